package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	esreconciler "k8s.io/endpointslice"
	esmetrics "k8s.io/endpointslice/metrics"
	"k8s.io/endpointslice/topologycache"
	esutil "k8s.io/endpointslice/util"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's alias of the controller (endpointslice-controller).
const Name = "endpointslice"

// QueueName is upstream's name of the controller's Service queue (its workqueue series).
const QueueName = "endpoint_slice"

// EventSource is the component of the controller's events, as upstream records them.
const EventSource = "endpoint-slice-controller"

// ControllerName is the value of the endpointslice.kubernetes.io/managed-by label of the
// slices the controller manages, upstream's: slices an upstream controller wrote are
// taken over as they are, and slices of other managers (the mirroring controller, users)
// are never touched.
const ControllerName = "endpointslice-controller.k8s.io"

// Flags of kube-controller-manager, with their bounds.
const (
	WorkersFlag              = "concurrent-service-endpoint-syncs"
	MaxEndpointsPerSliceFlag = "max-endpoints-per-slice"
	BatchPeriodFlag          = "endpointslice-updates-batch-period"

	defaultWorkers              = 5
	minWorkers, maxWorkers      = 1, 50
	defaultMaxEndpointsPerSlice = 100
	minMaxEndpoints, maxMaxEnd  = 1, 1000
)

// maxRetries is how many times in a row a Service's sync may fail before its key is
// dropped until its next event, as upstream (1 s doubling to 1000 s between them).
const maxRetries = 15

// endpointSliceChangeMinSyncDelay is the least delay before a Service is synced after one
// of its slices changed, so that changes to several slices are handled in one sync.
const endpointSliceChangeMinSyncDelay = time.Second

// The informers the controller reads: its primary Services, their pods and slices, and
// every Node (cluster-scoped, cached whole on every shard) for zones and topology.
var (
	services       = controllers.Typed(corev1.SchemeGroupVersion.WithResource("services"))
	pods           = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	endpointSlices = controllers.Typed(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"))
	nodes          = controllers.Typed(corev1.SchemeGroupVersion.WithResource("nodes"))
)

// Options are the controller's own flags.
type Options struct {
	// MaxEndpointsPerSlice caps the endpoints of one slice (1..1000).
	MaxEndpointsPerSlice int32
	// BatchPeriod delays a Service's sync after a pod change, so that the changes of
	// several pods are written together (0: no delay).
	BatchPeriod time.Duration
	// workers reads the worker flag the registry owns, for Validate's bounds.
	workers func() (int, error)
}

// Validate checks the flags as kube-controller-manager does, with its messages.
func (o *Options) Validate() error {
	var errs []error
	if o.workers != nil {
		n, err := o.workers()
		switch {
		case err != nil:
			errs = append(errs, err)
		case n < minWorkers:
			errs = append(errs, fmt.Errorf("%s must not be less than %d, but got %d", WorkersFlag, minWorkers, n))
		case n > maxWorkers:
			errs = append(errs, fmt.Errorf("%s must not be more than %d, but got %d", WorkersFlag, maxWorkers, n))
		}
	}
	switch {
	case o.MaxEndpointsPerSlice < minMaxEndpoints:
		errs = append(errs, fmt.Errorf("%s must not be less than %d, but got %d", MaxEndpointsPerSliceFlag, minMaxEndpoints, o.MaxEndpointsPerSlice))
	case o.MaxEndpointsPerSlice > maxMaxEnd:
		errs = append(errs, fmt.Errorf("%s must not be more than %d, but got %d", MaxEndpointsPerSliceFlag, maxMaxEnd, o.MaxEndpointsPerSlice))
	}
	return errors.Join(errs...)
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// flags and defaults (--concurrent-service-endpoint-syncs 5, --max-endpoints-per-slice
// 100, --endpointslice-updates-batch-period 0) and bounds, upstream's queue name and
// rate limiter, event source, and the permissions of upstream's
// system:controller:endpointslice-controller role.
func Descriptor() controllers.Descriptor {
	opts := &Options{MaxEndpointsPerSlice: defaultMaxEndpointsPerSlice}
	return controllers.Descriptor{
		Name: Name, QueueName: QueueName, OnByDefault: true,
		WorkersFlag: WorkersFlag, DefaultWorkers: defaultWorkers,
		EventSource: EventSource,
		RateLimiter: RateLimiter,
		Primary:     []controllers.Resource{services},
		Reads:       []controllers.Resource{pods, endpointSlices, nodes},
		Permissions: []controllers.Permission{
			// Slices are created with an owner reference to their Service with
			// blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
			// admission plugin allows only to whoever may update the owner's finalizers.
			{Resource: "services/finalizers", Verbs: []string{"update"}},
			{Group: "discovery.k8s.io", Resource: "endpointslices", Verbs: []string{"create", "update", "delete"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.Int32Var(&opts.MaxEndpointsPerSlice, MaxEndpointsPerSliceFlag, opts.MaxEndpointsPerSlice,
				"the maximum number of endpoints added to an EndpointSlice: more per slice is fewer slices, but larger ones (1 to 1000)")
			fs.DurationVar(&opts.BatchPeriod, BatchPeriodFlag, opts.BatchPeriod,
				"how long a Service's EndpointSlice update waits after a pod change, to join the changes of other pods: longer is fewer slice writes, but later endpoints")
			// The worker flag is the registry's (registered before AddFlags runs); its
			// bounds are upstream's, stricter than every controller's 1..1000.
			opts.workers = func() (int, error) {
				f := fs.Lookup(WorkersFlag)
				if f == nil {
					return defaultWorkers, nil
				}
				return strconv.Atoi(f.Value.String())
			}
		},
		Validate: opts.Validate,
		New: func(c controllers.Context) (controllers.Controller, error) {
			return newController(c, *opts)
		},
	}
}

// RateLimiter is upstream's Service queue rate limiter, slower than the default one since
// a sync may write many slices: a failing Service is retried after 1 s, doubling up to
// 1000 s, and retries of all Services together are held to 10 per second with a burst of
// 100.
func RateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 1000*time.Second),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Controller is the EndpointSlice controller.
type Controller struct {
	client        kubernetes.Interface
	serviceLister corelisters.ServiceLister
	podLister     corelisters.PodLister
	sliceLister   discoverylisters.EndpointSliceLister
	nodeLister    corelisters.NodeLister
	queue         workqueue.TypedRateLimitingInterface[string]
	recorder      record.EventRecorder
	metrics       *controllers.ReconcileMetrics

	reconciler  *esreconciler.Reconciler
	tracker     *esutil.EndpointSliceTracker
	triggerTime *esutil.TriggerTimeTracker
	topology    *topologycache.TopologyCache
	// topologyTrigger coalesces Node events into one pending topology check.
	topologyTrigger chan struct{}

	batchPeriod time.Duration
}

func newController(c controllers.Context, opts Options) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if c.Client == nil || c.Queue == nil || c.Recorder == nil {
		return nil, fmt.Errorf("the endpointslice controller needs Client, Queue and Recorder in its context")
	}
	infs, err := controllers.InformersFor(c.Informers, services, pods, endpointSlices, nodes)
	if err != nil {
		return nil, err
	}
	svcInf, podInf, sliceInf, nodeInf := infs[0], infs[1], infs[2], infs[3]
	if c.RegisterKubeMetrics != nil {
		// The module's metric globals, under upstream's names; registering them makes the
		// reconciler's and the syncs' observations visible (unregistered, they are no-ops).
		if err := c.RegisterKubeMetrics(
			esmetrics.EndpointsAddedPerSync, esmetrics.EndpointsRemovedPerSync, esmetrics.EndpointsDesired,
			esmetrics.NumEndpointSlices, esmetrics.DesiredEndpointSlices, esmetrics.EndpointSliceChanges,
			esmetrics.EndpointSlicesChangedPerSync, esmetrics.EndpointSliceSyncs,
			esmetrics.ServicesCountByTrafficDistribution,
		); err != nil {
			return nil, fmt.Errorf("endpointslice metrics: %w", err)
		}
	}
	ctrl := &Controller{
		client:          c.Client,
		serviceLister:   corelisters.NewServiceLister(svcInf.GetIndexer()),
		podLister:       corelisters.NewPodLister(podInf.GetIndexer()),
		sliceLister:     discoverylisters.NewEndpointSliceLister(sliceInf.GetIndexer()),
		nodeLister:      corelisters.NewNodeLister(nodeInf.GetIndexer()),
		queue:           c.Queue,
		recorder:        c.Recorder,
		metrics:         c.Metrics,
		tracker:         esutil.NewEndpointSliceTracker(),
		triggerTime:     esutil.NewTriggerTimeTracker(),
		topology:        topologycache.NewTopologyCache(),
		topologyTrigger: make(chan struct{}, 1),
		batchPeriod:     opts.BatchPeriod,
	}
	// PreferSameTrafficDistribution is GA and locked on in 1.37.
	ctrl.reconciler = esreconciler.NewReconciler(c.Client, ctrl.nodeLister, opts.MaxEndpointsPerSlice,
		ctrl.tracker, ctrl.topology, c.Recorder, ControllerName,
		esreconciler.WithPreferSameTrafficDistributionEnabled(true))
	if err := ctrl.addHandlers(c.Logger, svcInf, podInf, sliceInf, nodeInf); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers on the Service queue and the shard's topology check until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.runTopology(ctx)
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics, controllers.MaxRetries(maxRetries))
}

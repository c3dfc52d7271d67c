//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's alias of the controller
// (endpointslice-mirroring-controller).
const Name = "endpointslicemirroring"

// QueueName names the controller's queue and its workqueue series as upstream's does.
const QueueName = "endpoint_slice_mirroring"

// EventSource is the component of the controller's events, upstream's (which differs from
// its client's name, endpointslicemirroring-controller).
const EventSource = "endpoint-slice-mirroring-controller"

// ControllerName is the value of the endpointslice.kubernetes.io/managed-by label of the
// EndpointSlices the controller writes; it owns no other slice. Upstream's value, so a
// cluster that moves between kube-controller-manager and kshard keeps its slices.
const ControllerName = "endpointslicemirroring-controller.k8s.io"

// Upstream's retry policy: a key that failed this many times in a row is dropped (its next
// change queues it again), with a backoff of 1 s doubling to 100 s between tries, and all
// retries together at most 10 per second (burst 100).
const (
	maxRetries     = 15
	minSyncBackOff = time.Second
	maxSyncBackOff = 100 * time.Second
)

// The flags kube-controller-manager 1.37 names so, with its defaults and bounds.
const (
	WorkersFlag        = "mirroring-concurrent-service-endpoint-syncs"
	MaxPerSubsetFlag   = "mirroring-max-endpoints-per-subset"
	BatchPeriodFlag    = "mirroring-endpointslice-updates-batch-period"
	defaultWorkers     = 5
	minWorkers         = 1
	maxWorkers         = 50
	defaultMaxPerSubst = 1000
	minMaxPerSubset    = 1
	maxMaxPerSubset    = 1000
)

// The informers the controller reads. Endpoints are the primary objects: a queue key is
// the namespace/name shared by an Endpoints, its Service and the slices mirrored from it.
var (
	endpoints      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("endpoints"))
	services       = controllers.Typed(corev1.SchemeGroupVersion.WithResource("services"))
	endpointSlices = controllers.Typed(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"))
)

// Options are the controller's own flags.
type Options struct {
	// MaxEndpointsPerSubset is how many addresses of one Endpoints subset are mirrored
	// (into one EndpointSlice per address type); the rest are skipped with a
	// TooManyAddressesToMirror event.
	MaxEndpointsPerSubset int32
	// BatchPeriod delays the sync an EndpointSlice change queues, to fold several into one.
	BatchPeriod time.Duration
}

// Descriptor registers the controller: on by default as upstream, with
// kube-controller-manager's --mirroring-concurrent-service-endpoint-syncs (5 workers),
// --mirroring-max-endpoints-per-subset (1000) and
// --mirroring-endpointslice-updates-batch-period (0), bounded as upstream bounds them.
func Descriptor() controllers.Descriptor {
	opts := &Options{MaxEndpointsPerSubset: defaultMaxPerSubst}
	// The flag set the shard registered the worker flag in, read back by Validate.
	var flags *pflag.FlagSet
	return controllers.Descriptor{
		Name: Name, QueueName: QueueName, OnByDefault: true,
		WorkersFlag: WorkersFlag, DefaultWorkers: defaultWorkers,
		EventSource: EventSource,
		Primary:     []controllers.Resource{endpoints},
		Reads:       []controllers.Resource{services, endpointSlices},
		RateLimiter: rateLimiter,
		Permissions: []controllers.Permission{
			{Group: discoveryv1.GroupName, Resource: "endpointslices", Verbs: []string{"create", "update", "delete"}},
			// A mirrored slice's owner reference (its Endpoints) blocks the owner's
			// deletion, which the OwnerReferencesPermissionEnforcement admission plugin
			// allows only to whoever may update the owner's finalizers.
			{Resource: "endpoints/finalizers", Verbs: []string{"update"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			flags = fs
			fs.Int32Var(&opts.MaxEndpointsPerSubset, MaxPerSubsetFlag, opts.MaxEndpointsPerSubset, fmt.Sprintf(
				"the most addresses of one Endpoints subset that the EndpointSlice mirroring controller mirrors into an EndpointSlice (%d..%d); the rest are skipped, with a TooManyAddressesToMirror event",
				minMaxPerSubset, maxMaxPerSubset))
			fs.DurationVar(&opts.BatchPeriod, BatchPeriodFlag, opts.BatchPeriod,
				"how long the EndpointSlice mirroring controller delays the sync that a change of one of its EndpointSlices asks for, to join it with the changes that follow: fewer slice updates, later endpoint programming")
		},
		Validate: func() error { return errors.Join(opts.validate(), validateWorkers(flags)) },
		New: func(c controllers.Context) (controllers.Controller, error) {
			return newController(c, *opts)
		},
	}
}

// validate checks the flags as kube-controller-manager does.
func (o Options) validate() error {
	if o.MaxEndpointsPerSubset < minMaxPerSubset {
		return fmt.Errorf("%s must not be less than %d, but got %d", MaxPerSubsetFlag, minMaxPerSubset, o.MaxEndpointsPerSubset)
	}
	if o.MaxEndpointsPerSubset > maxMaxPerSubset {
		return fmt.Errorf("%s must not be more than %d, but got %d", MaxPerSubsetFlag, maxMaxPerSubset, o.MaxEndpointsPerSubset)
	}
	return nil
}

// validateWorkers checks --mirroring-concurrent-service-endpoint-syncs against upstream's
// bounds, 1..50, tighter than the shard's 1..1000 for every worker flag. The shard
// registers that flag in the flag set it hands AddFlags (before calling it).
func validateWorkers(fs *pflag.FlagSet) error {
	if fs == nil || fs.Lookup(WorkersFlag) == nil {
		return nil
	}
	n, err := fs.GetInt(WorkersFlag)
	if err != nil {
		return err
	}
	if n < minWorkers {
		return fmt.Errorf("%s must not be less than %d, but got %d", WorkersFlag, minWorkers, n)
	}
	if n > maxWorkers {
		return fmt.Errorf("%s must not be more than %d, but got %d", WorkersFlag, maxWorkers, n)
	}
	return nil
}

// rateLimiter is upstream's: its failure backoff starts at 1 s rather than the default
// 5 ms, since one sync may write many slices.
func rateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](minSyncBackOff, maxSyncBackOff),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Controller mirrors the Endpoints of Services without a selector into EndpointSlices.
type Controller struct {
	client       kubernetes.Interface
	endpoints    corelisters.EndpointsLister
	services     corelisters.ServiceLister
	slices       discoverylisters.EndpointSliceLister
	queue        workqueue.TypedRateLimitingInterface[string]
	metrics      *controllers.ReconcileMetrics
	batchPeriod  time.Duration
	reconciler   *reconciler
	tracker      *endpointsliceutil.EndpointSliceTracker
	metricsCache *metricsCache
}

func newController(c controllers.Context, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	infs, err := controllers.InformersFor(c.Informers, endpoints, services, endpointSlices)
	if err != nil {
		return nil, err
	}
	epInf, svcInf, sliceInf := infs[0], infs[1], infs[2]
	if c.RegisterKubeMetrics != nil {
		if err := c.RegisterKubeMetrics(kubeMetrics()...); err != nil {
			return nil, fmt.Errorf("registering the %s metrics: %w", Name, err)
		}
	}
	tracker := endpointsliceutil.NewEndpointSliceTracker()
	mc := newMetricsCache(opts.MaxEndpointsPerSubset)
	ctrl := &Controller{
		client:       c.Client,
		endpoints:    corelisters.NewEndpointsLister(epInf.GetIndexer()),
		services:     corelisters.NewServiceLister(svcInf.GetIndexer()),
		slices:       discoverylisters.NewEndpointSliceLister(sliceInf.GetIndexer()),
		queue:        c.Queue,
		metrics:      c.Metrics,
		batchPeriod:  opts.BatchPeriod,
		tracker:      tracker,
		metricsCache: mc,
		reconciler: &reconciler{
			client:       c.Client,
			tracker:      tracker,
			recorder:     c.Recorder,
			maxPerSubset: opts.MaxEndpointsPerSubset,
			metricsCache: mc,
		},
	}
	log := c.Logger
	if _, err := epInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addEndpoints(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updateEndpoints(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deleteEndpoints(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := svcInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.addService,
		UpdateFunc: ctrl.updateService,
		DeleteFunc: ctrl.deleteService,
	}); err != nil {
		return nil, err
	}
	if _, err := sliceInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.addSlice,
		UpdateFunc: func(old, cur any) { ctrl.updateSlice(log, old, cur) },
		DeleteFunc: ctrl.deleteSlice,
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers workers until ctx ends; a key that fails 15 times in a row is dropped,
// as upstream drops it.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics, controllers.MaxRetries(maxRetries))
}

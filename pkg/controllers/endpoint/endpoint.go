package endpoint

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's alias for the controller (its canonical name is
// endpoints-controller), and the name of its queue, as upstream's.
const Name = "endpoint"

// BatchPeriodFlag is kube-controller-manager's flag that delays the sync a pod change
// causes, so that changes of many pods join in one Endpoints update.
const BatchPeriodFlag = "endpoint-updates-batch-period"

// ControllerName is the value of the managed-by label on the Endpoints the controller
// writes, and the component of its events (upstream's ControllerName).
const ControllerName = "endpoint-controller"

// LabelManagedBy marks the Endpoints this controller manages (upstream's label).
const LabelManagedBy = "endpoints.kubernetes.io/managed-by"

// maxRetries is how many times a failing Service key is retried before it is dropped, as
// upstream drops it (the next change of the Service or its pods queues it again).
const maxRetries = 15

// The informers the controller reads: its primary Services, their pods, and the
// Endpoints it writes.
var (
	services  = controllers.Typed(corev1.SchemeGroupVersion.WithResource("services"))
	pods      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	endpoints = controllers.Typed(corev1.SchemeGroupVersion.WithResource("endpoints"))
)

// Options are the controller's flags.
type Options struct {
	// BatchPeriod delays the Service sync a pod change queues (--endpoint-updates-batch-period,
	// default 0: at once).
	BatchPeriod time.Duration
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-endpoint-syncs flag and default of 5 workers, its
// --endpoint-updates-batch-period flag, and the permissions of upstream's
// system:controller:endpoint-controller role that it uses. Its events carry the component
// "endpoint-controller", as upstream's (the default for the name).
func Descriptor() controllers.Descriptor {
	opts := &Options{}
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-endpoint-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{services},
		Reads:   []controllers.Resource{pods, endpoints},
		Permissions: []controllers.Permission{
			{Resource: "endpoints", Verbs: []string{"create", "update", "delete"}},
			// The API server's restricted-endpoints admission lets only whoever may
			// create endpoints/restricted write addresses in restricted ranges; upstream's
			// role grants it.
			{Resource: "endpoints/restricted", Verbs: []string{"create"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&opts.BatchPeriod, BatchPeriodFlag, opts.BatchPeriod,
				"The length of endpoint updates batching period. Processing of pod changes will be delayed by this duration to join them with potential upcoming updates and reduce the overall number of endpoints updates. Larger number = higher endpoint programming latency, but lower number of endpoints revision generated")
		},
		New: func(c controllers.Context) (controllers.Controller, error) { return newController(c, *opts) },
	}
}

// Controller is the Endpoints controller.
type Controller struct {
	client          kubernetes.Interface
	serviceLister   corelisters.ServiceLister
	podLister       corelisters.PodLister
	endpointsLister corelisters.EndpointsLister
	queue           workqueue.TypedRateLimitingInterface[string]
	recorder        record.EventRecorder
	metrics         *controllers.ReconcileMetrics
	log             logr.Logger

	// stale records the resourceVersion each Endpoints had before this controller updated
	// it: the cache still holding it has not seen the update yet.
	stale *staleTracker
	// triggerTimes computes the last-change-trigger-time annotation.
	triggerTimes *endpointsliceutil.TriggerTimeTracker
	batchPeriod  time.Duration
}

// New builds the controller with the default options; it registers its event handlers
// before the shard starts the informers.
func New(c controllers.Context) (controllers.Controller, error) { return newController(c, Options{}) }

func newController(c controllers.Context, opts Options) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, services, pods, endpoints)
	if err != nil {
		return nil, err
	}
	svcInf, podInf, epInf := infs[0], infs[1], infs[2]
	ctrl := &Controller{
		client:          c.Client,
		serviceLister:   corelisters.NewServiceLister(svcInf.GetIndexer()),
		podLister:       corelisters.NewPodLister(podInf.GetIndexer()),
		endpointsLister: corelisters.NewEndpointsLister(epInf.GetIndexer()),
		queue:           c.Queue,
		recorder:        c.Recorder,
		metrics:         c.Metrics,
		log:             c.Logger,
		stale:           newStaleTracker(),
		triggerTimes:    endpointsliceutil.NewTriggerTimeTracker(),
		batchPeriod:     opts.BatchPeriod,
	}
	if err := ctrl.addHandlers(svcInf, podInf, epInf); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run works the Service queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics, controllers.MaxRetries(maxRetries))
}

// Resync queues the key of every cached Endpoints of the namespaces the shard starts
// working, so that the sync deletes those whose Service is gone (upstream's
// checkLeftoverEndpoints, which it runs once at start): Endpoints of Services deleted
// while no shard, or another, worked the namespace. Endpoints carrying the leader-election
// annotation are skipped as upstream skips them: they have no Service by design.
func (c *Controller) Resync(scope controllers.Scope) {
	for _, ns := range scope.Namespaces {
		eps, err := c.endpointsLister.Endpoints(ns).List(labels.Everything())
		if err != nil { // a cache's lister does not fail
			c.log.Error(err, "listing cached Endpoints for leftovers", "namespace", ns)
			continue
		}
		for _, ep := range eps {
			if _, ok := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]; ok {
				continue
			}
			c.queue.Add(ep.Namespace + "/" + ep.Name)
		}
	}
}

// keyOf returns obj's namespace/name key, obj being an object or a deletion tombstone.
func keyOf(obj any) (string, bool) {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key, err == nil
}

package resourcequota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kshard's name for the controller: kube-controller-manager's alias of its
// resourcequota-controller.
const Name = "resourcequota"

// The controller's further queues. Its own queue (Context.Queue) is upstream's
// resourcequota_primary: full recalculations.
const (
	// PriorityQueue is upstream's queue of quotas whose status does not yet cover their
	// spec: admission refuses every create such a quota covers until it does.
	PriorityQueue = "resourcequota_priority"
	// ReplenishmentQueue is kshard's own queue of quotas to recompute because an object
	// they count was deleted or changed: upstream puts them on the primary queue, where a
	// periodic recalculation of many quotas delays them (kubernetes#122483).
	ReplenishmentQueue = "resourcequota_replenishment"
)

// SyncPeriodFlag is kube-controller-manager's flag for the period of full recalculation.
const SyncPeriodFlag = "resource-quota-sync-period"

// The informers the controller reads: its quotas, and the objects whose usage is more than
// a count (upstream's evaluators with 1.37's default features: DynamicResourceAllocation
// and DRAExtendedResource are GA and on).
var (
	quotas = controllers.Typed(corev1.SchemeGroupVersion.WithResource("resourcequotas"))
	pods   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	svcs   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("services"))
	pvcs   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
	claims = controllers.Typed(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"))
	// deviceClasses are cluster-scoped: every shard caches all of them. They say which
	// extended resources a claim's devices provide.
	deviceClasses = controllers.Typed(resourceapi.SchemeGroupVersion.WithResource("deviceclasses"))
)

// ignoredResources are the resources quota never counts, as upstream's
// pkg/quota/v1/install (virtual resources, and events, which were never counted).
var ignoredResources = []schema.GroupResource{
	{Resource: "bindings"},
	{Resource: "componentstatuses"},
	{Group: "authentication.k8s.io", Resource: "tokenreviews"},
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"},
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"},
	{Resource: "events"},
	{Group: "events.k8s.io", Resource: "events"},
}

// Options are the controller's own flags.
type Options struct {
	// SyncPeriod is how often every quota is recalculated in full.
	SyncPeriod time.Duration
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-resource-quota-syncs flag and default of 5 workers (per queue, as upstream),
// and --resource-quota-sync-period (default 5m).
func Descriptor() controllers.Descriptor {
	opts := &Options{SyncPeriod: 5 * time.Minute}
	// The priority and replenishment queues are filled by the controller's handlers only:
	// when the shard starts working a namespace, the primary queue gets each of its quotas
	// once (a Primary here would sync every quota three times).
	queue := func(name string) controllers.QueueSpec { return controllers.QueueSpec{Name: name} }
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-resource-quota-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{quotas},
		Reads:   []controllers.Resource{pods, svcs, pvcs, claims, deviceClasses},
		Queues:  []controllers.QueueSpec{queue(PriorityQueue), queue(ReplenishmentQueue)},
		Permissions: []controllers.Permission{
			{Resource: "resourcequotas/status", Verbs: []string{"update"}},
		},
		// Upstream's quotable resources: namespaced, and supporting create, list, watch
		// and delete (GetQuotableResources).
		Served: &controllers.ServedResources{
			Verbs:          []string{"create", "list", "watch", "delete"},
			NamespacedOnly: true,
			Ignore:         ignoredResources,
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&opts.SyncPeriod, SyncPeriodFlag, opts.SyncPeriod,
				"the period for syncing quota usage status in the system: every quota is recalculated in full this often (must be > 0)")
		},
		New: func(c controllers.Context) (controllers.Controller, error) {
			return newController(c, *opts, clock.RealClock{})
		},
	}
}

// Controller is the ResourceQuota controller.
type Controller struct {
	client        kubernetes.Interface
	quotaLister   corelisters.ResourceQuotaLister
	queue         workqueue.TypedRateLimitingInterface[string]
	priority      workqueue.TypedRateLimitingInterface[string]
	replenishment workqueue.TypedRateLimitingInterface[string]
	metrics       *controllers.ReconcileMetrics
	syncPeriod    time.Duration
	clock         clock.PassiveClock
	log           klog.Logger

	// registry holds an evaluator for every resource usage is computed of.
	registry quota.Registry
	// servedInformers is Context.Served: whether a served resource's lists fail now.
	servedInformers controllers.ServedInformers
	// served are the served resources the shard handed over, by group and resource.
	mu     sync.Mutex
	served map[schema.GroupResource]*servedResource
}

var _ controllers.ServedSubscriber = (*Controller)(nil)

func newController(c controllers.Context, opts Options, clk clock.PassiveClock) (*Controller, error) {
	if opts.SyncPeriod <= 0 {
		return nil, fmt.Errorf("--%s=%s: must be greater than 0", SyncPeriodFlag, opts.SyncPeriod)
	}
	if c.Served == nil {
		return nil, fmt.Errorf("the %s controller needs Served in its context", Name)
	}
	priority, replenishment := c.Queues[PriorityQueue], c.Queues[ReplenishmentQueue]
	if priority == nil || replenishment == nil {
		return nil, fmt.Errorf("the %s controller needs its %s and %s queues in its context", Name, PriorityQueue, ReplenishmentQueue)
	}
	infs, err := controllers.InformersFor(c.Informers, quotas, pods, svcs, pvcs, claims, deviceClasses)
	if err != nil {
		return nil, err
	}
	quotaInf, podInf, svcInf, pvcInf, claimInf, classInf := infs[0], infs[1], infs[2], infs[3], infs[4], infs[5]
	if err := addClaimOwnerIndex(claimInf); err != nil {
		return nil, fmt.Errorf("resource claim index: %w", err)
	}
	ctrl := &Controller{
		client:        c.Client,
		quotaLister:   corelisters.NewResourceQuotaLister(quotaInf.GetIndexer()),
		queue:         c.Queue,
		priority:      priority,
		replenishment: replenishment,
		metrics:       c.Metrics,
		syncPeriod:    opts.SyncPeriod,
		clock:         clk,
		log:           c.Logger,
		served:        map[schema.GroupResource]*servedResource{},
	}
	ctrl.registry = ctrl.newRegistry(podInf, svcInf, pvcInf, claimInf, classInf)
	log := c.Logger
	if _, err := quotaInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addQuota(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updateQuota(log, old, cur) },
		// The sync finds the quota gone and does nothing.
		DeleteFunc: func(obj any) { ctrl.enqueue(log, ctrl.queue, obj) },
	}); err != nil {
		return nil, err
	}
	// Pods, services, PVCs and ResourceClaims are read typed, so that an update that
	// changes what they use replenishes; their served informers, when handed over, are not
	// watched twice.
	for gr, inf := range map[schema.GroupResource]toolscache.SharedIndexInformer{
		pods.GroupResource(): podInf, svcs.GroupResource(): svcInf, pvcs.GroupResource(): pvcInf, claims.GroupResource(): claimInf,
	} {
		if _, err := inf.AddEventHandler(ctrl.replenishHandler(gr)); err != nil {
			return nil, err
		}
	}
	ctrl.servedInformers = c.Served
	c.Served.Subscribe(ctrl)
	return ctrl, nil
}

// Run runs workers on each of the three queues, as upstream runs them on each of its two,
// and queues every quota for a full recalculation every sync period, until ctx ends. The
// further queues' syncs are recorded in the controller's reconcile metrics too: each is a
// sync of a quota.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Go(func() { wait.UntilWithContext(ctx, c.enqueueAll, c.syncPeriod) })
	observed := func(ctx context.Context, key string) error {
		start := time.Now()
		err := c.sync(ctx, key)
		c.metrics.Observe(Name, start, err)
		return err
	}
	for name, q := range map[string]workqueue.TypedRateLimitingInterface[string]{
		PriorityQueue: c.priority, ReplenishmentQueue: c.replenishment,
	} {
		wg.Go(func() { controllers.RunWorkers(ctx, name, q, workers, observed, nil) })
	}
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
	wg.Wait()
}

// enqueueAll queues every quota of the shard's cache (its namespaces only) for a full
// recalculation: what catches usage no event reported (objects created, which admission
// charged, or changes no replenishment filter passes).
func (c *Controller) enqueueAll(ctx context.Context) {
	log := klog.FromContext(ctx)
	rqs, err := c.quotaLister.List(labels.Everything())
	if err != nil {
		log.Error(err, "unable to list resource quotas to queue them all")
		return
	}
	for _, rq := range rqs {
		c.queue.Add(rq.Namespace + "/" + rq.Name)
	}
	log.V(4).Info("queued every resource quota for a full calculation of usage", "quotas", len(rqs))
}

// enqueue adds obj's key (a quota, or its tombstone) to q.
func (c *Controller) enqueue(log klog.Logger, q workqueue.TypedRateLimitingInterface[string], obj any) {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		log.Error(err, "couldn't get the key of a resource quota", "object", obj)
		return
	}
	q.Add(key)
}

// updateQuota acts on a change of spec.hard only: status changes are the controller's own,
// and a full recalculation on every one would list a namespace's content for nothing.
// Scope changes alone wait for the next full recalculation, as upstream.
func (c *Controller) updateQuota(log klog.Logger, old, cur any) {
	o, ok1 := old.(*corev1.ResourceQuota)
	n, ok2 := cur.(*corev1.ResourceQuota)
	if !ok1 || !ok2 || quota.Equals(o.Spec.Hard, n.Spec.Hard) {
		return
	}
	c.addQuota(log, n)
}

// addQuota queues a quota on the priority queue when its status does not yet show its
// spec (hard differs, or a hard resource the controller can compute has no usage: until
// then admission refuses the creates it covers), and on the primary queue otherwise.
func (c *Controller) addQuota(log klog.Logger, obj any) {
	rq, ok := obj.(*corev1.ResourceQuota)
	if !ok {
		return
	}
	if c.missingUsage(rq) {
		c.enqueue(log, c.priority, rq)
		return
	}
	c.enqueue(log, c.queue, rq)
}

// missingUsage reports whether rq's status lags its spec: hard differs, or a hard
// resource that an evaluator computes has no usage.
func (c *Controller) missingUsage(rq *corev1.ResourceQuota) bool {
	if !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) {
		return true
	}
	for name := range rq.Status.Hard {
		if _, found := rq.Status.Used[name]; found {
			continue
		}
		for _, e := range c.registry.List() {
			if len(e.MatchingResources([]corev1.ResourceName{name})) > 0 {
				return true
			}
		}
	}
	return false
}

package namespace

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's name for the controller.
const Name = "namespace"

// SyncPeriodFlag is kube-controller-manager's flag for the period at which every
// terminating namespace is queued again whatever happened to it.
const SyncPeriodFlag = "namespace-sync-period"

// deletionGracePeriod is how long after a namespace event its sync waits, as upstream's:
// time for the other API servers of an HA control plane to see the deletion and refuse
// new content, and for late creations to reach every etcd member.
const deletionGracePeriod = 5 * time.Second

// namespaces is the controller's primary informer; its queue keys are Namespace names.
var namespaces = controllers.Typed(corev1.SchemeGroupVersion.WithResource("namespaces"))

// Options are the controller's own flags.
type Options struct {
	// SyncPeriod is how often every terminating namespace is queued again (0: never).
	SyncPeriod time.Duration
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-namespace-syncs flag and default of 10 workers, --namespace-sync-period
// (default 5 minutes), its client budget (×20 QPS, ×100 burst) and its queue's rate
// limiter. It needs get, list, delete and deletecollection on every resource of every
// group, and update of namespaces' status and finalize subresources, as upstream's
// system:controller:namespace-controller role grants.
func Descriptor() controllers.Descriptor {
	opts := &Options{SyncPeriod: 5 * time.Minute}
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-namespace-syncs", DefaultWorkers: 10,
		Primary: []controllers.Resource{namespaces},
		Permissions: []controllers.Permission{
			{Group: "*", Resource: "*", Verbs: []string{"get", "list", "delete", "deletecollection"}},
			{Resource: "namespaces/finalize", Verbs: []string{"update"}},
			{Resource: "namespaces/status", Verbs: []string{"update"}},
		},
		ClientQPSScale:   20,
		ClientBurstScale: 100,
		RateLimiter:      RateLimiter,
		AddFlags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&opts.SyncPeriod, SyncPeriodFlag, opts.SyncPeriod,
				"the period for syncing namespace life-cycle updates: every terminating namespace is queued again this often (0: never)")
		},
		New: func(c controllers.Context) (controllers.Controller, error) {
			if c.Client == nil {
				return nil, fmt.Errorf("the namespace controller needs Client in its context")
			}
			return newController(c, *opts, c.Client.Discovery().ServerPreferredNamespacedResources)
		},
	}
}

// RateLimiter is upstream's namespace queue rate limiter, faster than the default one so
// that namespace cleanup is retried quickly: a failing namespace is retried after 5 ms,
// doubling up to 60 s (never longer), and retries of all namespaces together are held to
// 10 per second with a burst of 100.
func RateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 60*time.Second),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Controller is the namespace controller.
type Controller struct {
	lister     corelisters.NamespaceLister
	queue      workqueue.TypedRateLimitingInterface[string]
	metrics    *controllers.ReconcileMetrics
	deleter    *deleter
	syncPeriod time.Duration
}

// newController builds the controller; discover returns the namespaced resources the
// API server serves (the client's discovery, a fixed list in tests).
func newController(c controllers.Context, opts Options, discover discoverFunc) (*Controller, error) {
	if opts.SyncPeriod < 0 {
		return nil, fmt.Errorf("--%s=%s: must not be negative", SyncPeriodFlag, opts.SyncPeriod)
	}
	if c.Client == nil || c.Metadata == nil {
		return nil, fmt.Errorf("the namespace controller needs Client and Metadata in its context")
	}
	inf, err := c.Informers.InformerFor(namespaces)
	if err != nil {
		return nil, err
	}
	d, err := newDeleter(c.Logger, c.Client.CoreV1(), c.Metadata, discover)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		lister:     corelisters.NewNamespaceLister(inf.GetIndexer()),
		queue:      c.Queue,
		metrics:    c.Metrics,
		deleter:    d,
		syncPeriod: opts.SyncPeriod,
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.enqueue,
		UpdateFunc: func(_, cur any) { ctrl.enqueue(cur) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends, and queues every terminating namespace again each
// sync period.
func (c *Controller) Run(ctx context.Context, workers int) {
	if c.syncPeriod > 0 {
		go wait.UntilWithContext(ctx, func(context.Context) { c.resync() }, c.syncPeriod)
	}
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// enqueue queues a namespace being deleted, after the deletion grace period.
func (c *Controller) enqueue(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.DeletionTimestamp == nil || ns.DeletionTimestamp.IsZero() {
		return
	}
	c.queue.AddAfter(ns.Name, deletionGracePeriod)
}

// resync queues every cached terminating namespace, as upstream's periodic resync of its
// informer handler does; the queue admits those of the shard's namespaces only.
func (c *Controller) resync() {
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ns := range all {
		c.enqueue(ns)
	}
}

// sync finishes the deletion of namespace key, if it is being deleted. A namespace that
// is not (the shard queues all of a partition's namespaces when it starts working it)
// costs no request.
func (c *Controller) sync(ctx context.Context, key string) error {
	log := klog.FromContext(ctx).WithValues("namespace", key)
	ctx = klog.NewContext(ctx, log)
	start := time.Now()
	defer func() { log.V(4).Info("finished syncing namespace", "duration", time.Since(start)) }()
	ns, err := c.lister.Get(key)
	if apierrors.IsNotFound(err) {
		log.V(2).Info("namespace has been deleted")
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil || ns.DeletionTimestamp.IsZero() {
		return nil
	}
	err = c.deleter.delete(ctx, ns.Name)
	if remaining, ok := err.(*contentRemainingError); ok {
		// Upstream waits half the estimate plus a second, and neither backs off nor
		// forgets the namespace's failures.
		return &controllers.RequeueAfterError{
			After:  time.Duration(remaining.estimate/2+1) * time.Second,
			Reason: remaining.Error(),
		}
	}
	return err
}

// finalized reports whether ns has no finalizers left in its spec.
func finalized(ns *corev1.Namespace) bool { return len(ns.Spec.Finalizers) == 0 }

// backgroundDelete is the delete options of every content delete: background propagation,
// so that the garbage collector adds no orphan finalizer (the namespace controller
// deletes every object itself).
func backgroundDelete() metav1.DeleteOptions {
	p := metav1.DeletePropagationBackground
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

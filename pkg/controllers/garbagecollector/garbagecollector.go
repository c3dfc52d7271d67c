package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kshard's name for the controller: the alias kube-controller-manager accepts for
// its garbage-collector-controller.
const Name = "garbagecollector"

// The controller's gated queues, named as upstream's workqueues so that their client-go
// workqueue series read as upstream's.
const (
	attemptToDeleteQueue = "garbage_collector_attempt_to_delete"
	attemptToOrphanQueue = "garbage_collector_attempt_to_orphan"
	graphChangesQueue    = "garbage_collector_graph_changes"
)

// eventSource is upstream's event component (not "garbagecollector-controller"): users
// and tools filter events by it.
const eventSource = "garbage-collector-controller"

// IgnoredResources are the resources upstream's garbage collector ignores by default:
// events, core and events.k8s.io. Events carry no owners worth collecting, and there are
// many.
func IgnoredResources() []schema.GroupResource {
	return []schema.GroupResource{{Group: "", Resource: "events"}, {Group: "events.k8s.io", Resource: "events"}}
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-gc-syncs flag and default of 20 workers per queue, every served resource
// that supports delete, list and watch (upstream's GetDeletableResources filter), and
// twice the client QPS ("each object deletion takes two API calls", as upstream).
//
// Upstream's --enable-garbage-collector is not exposed: kshard selects controllers with
// --controllers (-garbagecollector switches it off). The API server's flag of the same
// name must stay on.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-gc-syncs", DefaultWorkers: 20,
		ClientQPSScale: 2,
		Served: &controllers.ServedResources{
			Verbs:       []string{"delete", "list", "watch"},
			Ignore:      IgnoredResources(),
			Permissions: []string{"get", "patch", "delete"},
		},
		Queues:      []controllers.QueueSpec{{Name: attemptToDeleteQueue}, {Name: attemptToOrphanQueue}},
		EventSource: eventSource,
		New:         New,
	}
}

// Controller is the garbage collector of one shard: a dependency graph of the shard's
// namespaces' objects and of every cluster-scoped object, and the workers that delete
// objects whose owners are gone and orphan dependents of owners deleted with the orphan
// finalizer.
type Controller struct {
	metadata metadata.Interface
	recorder record.EventRecorder
	log      logr.Logger
	metrics  *controllers.ReconcileMetrics
	gcm      *Metrics

	graph  *graph
	absent *absentOwners
	// graphChanges carries informer events, virtual deletes and Resync events to the
	// graph builder's single goroutine. It is internal, not gated: the graph holds
	// whatever the shard's stores hold.
	graphChanges    workqueue.TypedInterface[*event]
	attemptToDelete workqueue.TypedRateLimitingInterface[string]
	attemptToOrphan workqueue.TypedRateLimitingInterface[string]

	resources *resources
	// remote is the cross-shard barrier: asked before a cluster-scoped owner loses
	// foregroundDeletion or orphan.
	remote RemoteDependents
	// remoteRetry is how long each cluster-scoped owner RemoteDependents keeps pending
	// waits before it is asked again.
	remoteRetry *remoteBackoff
	// elsewhereLookups bounds reportOwnerElsewhere's cluster-wide lookups across the
	// controller (elsewhereLookupQPS, elsewhereLookupBurst).
	elsewhereLookups flowcontrol.PassiveRateLimiter
	// resynced is set by the first Resync, which the shard calls only after its first
	// discovery round has handed every served resource over: until then the sweep
	// answers an error.
	resynced atomic.Bool
	// pending holds the scopes of Resync calls whose graph scan has not run yet.
	pending pendingResync
}

// New builds the controller and subscribes it to the shard's served resources.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, nil)
}

// newController builds the controller with remote as its barrier; nil is the sweep
// through c.Metadata (see sweeper).
func newController(c controllers.Context, remote RemoteDependents) (*Controller, error) {
	del, orph := c.Queues[attemptToDeleteQueue], c.Queues[attemptToOrphanQueue]
	if del == nil || orph == nil || c.Served == nil || c.Metadata == nil {
		return nil, errors.New("the garbage collector needs its two queues, served resources and a metadata client")
	}
	m, err := NewMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		metadata: c.Metadata, recorder: c.Recorder, log: c.Logger, metrics: c.Metrics, gcm: m,
		graph:            newGraph(),
		absent:           newAbsentOwners(absentOwnerCacheSize),
		graphChanges:     workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[*event]{Name: graphChangesQueue}),
		attemptToDelete:  del,
		attemptToOrphan:  orph,
		resources:        newResources(),
		remote:           remote,
		remoteRetry:      newRemoteBackoff(),
		elsewhereLookups: flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(elsewhereLookupQPS, elsewhereLookupBurst, clock.RealClock{}),
	}
	ctrl.remoteRetry.waiting = func(n int) { m.CrossPartitionWaitingOwners.Set(float64(n)) }
	if remote == nil {
		s := newSweeper(func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
			return c.Metadata.Resource(gvr).List(ctx, opts)
		}, ctrl.resources.namespacedResources, clock.RealClock{}, c.Logger.WithName("sweep"))
		s.ready = ctrl.resynced.Load
		s.observe = func(d time.Duration, complete bool) {
			result := "complete"
			if !complete {
				result = "failed"
			}
			m.CrossPartitionSweeps.WithLabelValues(result).Inc()
			m.CrossPartitionSweepSeconds.Observe(d.Seconds())
		}
		ctrl.remote = s
	}
	c.Served.Subscribe(ctrl)
	return ctrl, nil
}

// Run runs the graph builder and the attemptToDelete and attemptToOrphan workers until
// ctx ends. Upstream waits for its monitors to sync first; here the shard's gate
// admits keys of a partition only once its stores are filled (and Resync has run).
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	if s, ok := c.remote.(*sweeper); ok {
		s.bind(ctx)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		c.runGraphBuilder(ctx)
	}()
	go func() {
		defer wg.Done()
		controllers.RunWorkers(ctx, attemptToDeleteQueue, c.attemptToDelete, workers, c.syncDelete, c.metrics)
	}()
	go func() {
		defer wg.Done()
		controllers.RunWorkers(ctx, attemptToOrphanQueue, c.attemptToOrphan, workers, c.syncOrphan, c.metrics)
	}()
	<-ctx.Done()
	c.graphChanges.ShutDown()
	wg.Wait()
}

// runGraphBuilder applies graph changes one at a time until the queue shuts down.
func (c *Controller) runGraphBuilder(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("controller", Name)
	for {
		e, quit := c.graphChanges.Get()
		if quit {
			return
		}
		c.processGraphChange(log, e)
		c.graphChanges.Done(e)
	}
}

// enqueueDelete adds n's key to attemptToDelete. The caller holds the graph's lock (read
// or write).
func (c *Controller) enqueueDelete(n *node) {
	n.wantDelete.Store(true)
	c.attemptToDelete.Add(n.key())
}

// enqueueOrphan adds n's key to attemptToOrphan, to orphan n's dependents. The caller
// holds the graph's lock.
func (c *Controller) enqueueOrphan(n *node) {
	n.wantOrphan.Store(true)
	c.attemptToOrphan.Add(n.key())
}

// enqueueOrphanRefs adds n's key to attemptToOrphan, to remove from n its references to
// cluster-scoped owners being deleted with the orphan finalizer. The caller holds the
// graph's lock.
func (c *Controller) enqueueOrphanRefs(n *node) {
	n.wantOrphanRefs.Store(true)
	c.attemptToOrphan.Add(n.key())
}

// nodeLogger names the node's object in log lines.
func nodeLogger(ctx context.Context, id objectReference) (context.Context, logr.Logger) {
	log := klog.FromContext(ctx).WithValues("namespace", id.Namespace, "name", id.Name, "kind", id.Kind, "uid", id.UID)
	return klog.NewContext(ctx, log), log
}

var errNotObserved = controllers.QuietRetryError{Err: fmt.Errorf("item has not been observed by an informer yet")}

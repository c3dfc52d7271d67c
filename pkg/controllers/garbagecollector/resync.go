package garbagecollector

import (
	"slices"
	"sync"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

var _ controllers.Resyncer = (*Controller)(nil)

// Resync queues what a fresh upstream garbage collector would work for scope, when the
// shard starts working its partitions (the graph builder's queue adds made while the
// partitions were warmed were dropped by the gate). It queues one event, which the graph
// builder applies in turn (applyResync):
//
//  1. every object of scope that the stores hold then is added to the graph again (a
//     known node's add is a no-op update plus the transition check), closing the window
//     in which the stores hold the partition but event handlers have not yet seen every
//     object. The objects are read from the stores when the event is applied, not when
//     Resync is called: a snapshot could be applied after the delete the informer
//     delivered meanwhile and bring the object back as a ghost. An object added to a
//     store after Resync is added here too, and again by its own event later, a no-op;
//  2. then the absent owner cache is cleared (a release's synthetic deletes may have put
//     owners there that still exist), and every node of scope whose key was queued and
//     not yet worked (its want bit) is queued again. Scopes wait in pending until a
//     Resync event is applied, and the first one applied takes every scope waiting and
//     scans the graph once for them all: a shard that starts acquires its partitions
//     one by one (4,096 Resyncs), and a scan per Resync would cost partitions × nodes.
//     Taking a later Resync's scope early is safe: its partition is acquired before
//     Resync is called, so what the scan queues is admitted, and its own objects, added
//     when its event is applied, check their transitions themselves.
//
// One event per call, not one per object: a shard that starts makes every call at once,
// at Ready, when its heap is highest, and events per object held about 100 bytes each
// until the graph builder caught up (BenchmarkResyncQueued).
//
// So objects whose owners were deleted while no garbage collector ran are collected:
// their owners are virtual nodes, queued for a live check.
//
// The shard calls Resync only after its first discovery round: the first call also
// tells the sweep that every served resource has been handed over (sweeper.Pending).
func (c *Controller) Resync(scope controllers.Scope) {
	c.resynced.Store(true)
	c.pending.add(scope)
	c.graphChanges.Add(&event{typ: resyncEvent, scope: &scope})
}

// applyResync is a Resync event applied by the graph builder: steps 1 and 2 of Resync.
func (c *Controller) applyResync(log logr.Logger, scope controllers.Scope) {
	for _, s := range c.resources.all() {
		for _, obj := range scopedObjects(s.informer.GetIndexer(), s.res.Namespaced, scope) {
			c.processGraphChange(log, &event{typ: addEvent, obj: obj, kind: s.kind})
		}
	}
	c.resyncMarker(log)
}

// pendingResync gathers the scopes of Resync calls not yet scanned for (step 2).
type pendingResync struct {
	mu         sync.Mutex
	namespaces map[string]struct{}
	cluster    bool
}

func (p *pendingResync) add(s controllers.Scope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.namespaces == nil {
		p.namespaces = make(map[string]struct{}, len(s.Namespaces))
	}
	for _, ns := range s.Namespaces {
		p.namespaces[ns] = struct{}{}
	}
	p.cluster = p.cluster || s.Cluster
}

// take returns the waiting scopes and empties pending; ok is false when none waits.
func (p *pendingResync) take() (namespaces map[string]struct{}, cluster, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	namespaces, cluster = p.namespaces, p.cluster
	p.namespaces, p.cluster = nil, false
	return namespaces, cluster, len(namespaces) > 0 || cluster
}

// scopedObjects lists the objects of scope in an informer's store.
func scopedObjects(idx toolscache.Indexer, namespaced bool, scope controllers.Scope) []any {
	if !namespaced {
		if scope.Cluster {
			return idx.List()
		}
		return nil
	}
	var out []any
	if _, ok := idx.GetIndexers()[toolscache.NamespaceIndex]; ok {
		for _, ns := range scope.Namespaces {
			objs, err := idx.ByIndex(toolscache.NamespaceIndex, ns)
			if err == nil {
				out = append(out, objs...)
			}
		}
		return out
	}
	for _, obj := range idx.List() {
		if m, ok := obj.(interface{ GetNamespace() string }); ok && slices.Contains(scope.Namespaces, m.GetNamespace()) {
			out = append(out, obj)
		}
	}
	return out
}

// resyncMarker is step 2 of Resync, run by the graph builder, for every scope waiting.
func (c *Controller) resyncMarker(log logr.Logger) {
	c.absent.Clear()
	namespaces, cluster, ok := c.pending.take()
	if !ok {
		return // an earlier Resync event scanned for this one's scope
	}
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	var deletes, orphans int
	for _, n := range c.graph.nodes {
		// The key's namespace, not the identity's: a virtual owner of a cluster-scoped
		// kind is verified by its dependent's shard (node.verifiedIn).
		ns, _ := parseKey(n.key())
		if _, in := namespaces[ns]; (ns == "" && !cluster) || (ns != "" && !in) {
			continue
		}
		if n.wantDelete.Load() {
			c.attemptToDelete.Add(n.key())
			deletes++
		}
		if n.wantOrphan.Load() || n.wantOrphanRefs.Load() {
			c.attemptToOrphan.Add(n.key())
			orphans++
		}
	}
	log.V(2).Info("resynced", "namespaces", len(namespaces), "cluster", cluster, "attemptToDelete", deletes, "attemptToOrphan", orphans)
}

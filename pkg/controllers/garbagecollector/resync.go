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
// partitions were warmed were dropped by the gate):
//
//  1. every cached object of scope is added to the graph again (a known node's add is a
//     no-op update plus the transition check), closing the window in which the stores
//     hold the partition but event handlers have not yet seen every object. Objects are
//     queued by key and read from the store when the graph builder applies them (an
//     object gone by then is skipped): a snapshot taken here could be applied after the
//     delete the informer delivered meanwhile and bring the object back as a ghost;
//  2. a marker follows them through the graph builder's queue;
//  3. when the marker is applied, the absent owner cache is cleared (a release's
//     synthetic deletes may have put owners there that still exist), and every node of
//     scope whose key was queued and not yet worked (its want bit) is queued again.
//     Scopes wait in pending until a marker is applied, and the first marker applied
//     takes every scope waiting and scans the graph once for them all: a shard that
//     starts acquires its partitions one by one (4,096 Resyncs), and a scan per Resync
//     would cost partitions × nodes. Taking a later Resync's scope early is safe: its
//     partition is acquired before Resync is called, so what the scan queues is
//     admitted, and its own objects' events, applied later, check their transitions
//     themselves.
//
// So objects whose owners were deleted while no garbage collector ran are collected:
// their owners are virtual nodes, queued for a live check.
//
// The shard calls Resync only after its first discovery round: the first call also
// tells the sweep that every served resource has been handed over (sweeper.Pending).
func (c *Controller) Resync(scope controllers.Scope) {
	c.resynced.Store(true)
	for _, s := range c.resources.all() {
		for _, obj := range scopedObjects(s.informer.GetIndexer(), s.res.Namespaced, scope) {
			key, err := toolscache.MetaNamespaceKeyFunc(obj)
			if err != nil {
				continue
			}
			c.graphChanges.Add(&event{typ: resyncEvent, kind: s.kind, key: key})
		}
	}
	c.pending.add(scope)
	c.graphChanges.Add(&event{typ: markerEvent})
}

// pendingResync gathers the scopes of Resync calls not yet scanned for (step 3).
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

// resyncMarker is step 3 of Resync, run by the graph builder, for every scope waiting.
func (c *Controller) resyncMarker(log logr.Logger) {
	c.absent.Clear()
	namespaces, cluster, ok := c.pending.take()
	if !ok {
		return // an earlier marker scanned for this one's scope
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

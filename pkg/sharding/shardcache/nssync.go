package shardcache

// One namespace's warm-up in one feed (nsSync): buffer the namespace's events, list it,
// merge the list and the buffer into the stream (inject.go). A sync goes from buffering
// to pending (listed) to injected (merged); or it ends subsumed (a relist covers it),
// superseded (a newer sync of the namespace replaced it) or cancelled (released). It
// keeps:
//   - Buffering starts before the list is issued (beginSync, then the list), so the list
//     and the buffer leave no gap between them.
//   - At most one sync of a namespace is live in a feed; a newer one supersedes it, and
//     whoever waits for the old one follows it to the new one (next).
//   - No sync starts for a partition that is not admitted, or once its warm-up's context
//     has ended (a Release cancelled it), so a released warm-up cannot come back.
//   - A sync of an older epoch is never merged: the relist that began after it covers it.
//   - syncDone reports a namespace warm only once the store, caught up with the last
//     relist, holds every listed object still in the shadow at its listed resourceVersion
//     or newer.

import (
	"context"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// warmState is the warm-up part of a feed's state (guarded by feed.mu).
type warmState struct {
	// removed: the feed was removed from its Cache (Cache.Remove); its warm-ups are done.
	removed bool
	// syncs are the namespaces being warmed (buffering or waiting to be merged).
	syncs map[string]*nsSync
	// pending are the listed syncs waiting for the watch goroutine to merge them.
	pending []*nsSync
}

type syncState int

const (
	// syncBuffering: the namespace's events are held back while it is being listed.
	syncBuffering syncState = iota
	// syncPending: listed; waits for the watch goroutine to merge it into the stream.
	syncPending
	// syncInjected: merged; its batch is in the output queue at seq.
	syncInjected
	// syncSubsumed: a relist began after the warm-up, with the partition admitted, so
	// the relist covers the namespace and the warm-up's list is not merged.
	syncSubsumed
	// syncSuperseded: a newer warm-up of the same namespace replaced this one (next).
	syncSuperseded
	// syncCancelled: the partition was released, or the warm-up abandoned.
	syncCancelled
	// syncRemoved: the feed was removed (Cache.Remove): there is nothing left to cache.
	syncRemoved
)

// nsSync is the warm-up of one namespace in one feed: buffer the namespace's events, list
// it, merge the list and the buffer into the stream. Its fields are guarded by feed.mu.
type nsSync struct {
	namespace string
	partition partition.ID
	epoch     uint64
	state     syncState
	next      *nsSync // when superseded

	buffer      []watch.Event
	items       []runtime.Object
	listRV      uint64
	listRVKnown bool
	seq         uint64

	// listed is set once the list is done (or skipped); expected then holds the listed
	// objects' resourceVersions by name: the state the store must reach.
	listed   bool
	expected map[string]uint64
	// bulk: the namespace is not listed on its own but served by the feed's next
	// cluster-wide warm-up list (feed.warmInBulk).
	bulk bool
	// hold: once listed, s waits for unhold before it is merged (Cache.warmNewNamespace).
	hold bool
}

func (s *nsSync) stop(state syncState) {
	s.state = state
	s.buffer = nil
	s.items = nil
}

// beginSync starts buffering namespace's events, ahead of its list. A running warm-up of
// the namespace is superseded: the new list is issued later, so it covers everything the
// old one buffered. It returns nil if partition is not admitted (released meanwhile) or
// ctx, the warm-up's, has ended: a warm-up cancelled by Release must not start syncs
// after the partition has been prepared again.
func (f *feed) beginSync(ctx context.Context, namespace string, partition partition.ID) *nsSync {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil || !f.adm.admitted(partition) {
		return nil
	}
	if f.removed {
		return &nsSync{namespace: namespace, partition: partition, epoch: f.epoch, state: syncRemoved}
	}
	s := &nsSync{namespace: namespace, partition: partition, epoch: f.epoch, state: syncBuffering}
	if old := f.syncs[namespace]; old != nil {
		old.stop(syncSuperseded)
		old.next = s
	}
	f.syncs[namespace] = s
	return s
}

// unhold lets s be merged.
func (f *feed) unhold(s *nsSync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.hold = false
	f.wakeLocked()
}

// listMode says how s gets its list.
type listMode int

const (
	// listSkip: s needs no list any more (subsumed by a relist, cancelled, superseded).
	listSkip listMode = iota
	// listNamespace: s lists its namespace on its own.
	listNamespace
	// listBulk: the feed's cluster-wide warm-up list serves s.
	listBulk
)

// modeOf reports how s still has to be listed.
func (f *feed) modeOf(s *nsSync) listMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s.state != syncBuffering || s.epoch != f.epoch:
		return listSkip
	case s.bulk:
		return listBulk
	default:
		return listNamespace
	}
}

// abandon cancels s if it never got listed (its warm-up was cancelled).
func (f *feed) abandon(s *nsSync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.state == syncBuffering {
		s.stop(syncCancelled)
		if f.syncs[s.namespace] == s {
			delete(f.syncs, s.namespace)
		}
	}
}

// completeSync hands the namespace's list (items at resourceVersion rv) to the feed, to be
// merged by the watch goroutine. With listed=false the list was skipped (subsumed).
func (f *feed) completeSync(s *nsSync, items []runtime.Object, rv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.listed = true
	s.expected = make(map[string]uint64, len(items))
	for _, o := range items {
		v, _ := objectRV(o)
		s.expected[objectName(o)] = v
	}
	if s.state != syncBuffering {
		return
	}
	if s.epoch != f.epoch {
		s.stop(syncSubsumed)
		return
	}
	s.items = items
	s.listRV, s.listRVKnown = parseRV(rv)
	s.state = syncPending
	f.pending = append(f.pending, s)
	f.wakeLocked()
}

// syncDone reports whether s's objects are in the informer's store: each listed object is
// there at its listed resourceVersion or newer, unless it has since been deleted, and the
// store holds no object of the namespace that the shadow no longer has (the deletes of
// objects the list did not return have been applied: a first warm-up has none, a refresh
// of a cached namespace may).
func (f *feed) syncDone(s *nsSync) (bool, error) {
	f.mu.Lock()
	if f.removed {
		f.mu.Unlock()
		return true, nil // the resource is gone from the cache: nothing to wait for
	}
	for s.state == syncSuperseded && s.next != nil {
		s = s.next
	}
	switch {
	case s.state == syncCancelled:
		f.mu.Unlock()
		return false, ErrReleased
	case s.state == syncSubsumed || s.epoch != f.epoch:
		// Covered by a relist: wait for it to complete and for the list we took (if any).
		if !s.listed || f.listing {
			f.mu.Unlock()
			return false, nil
		}
	case s.state == syncInjected:
		if f.delivered < s.seq {
			f.mu.Unlock()
			return false, nil
		}
	default:
		f.mu.Unlock()
		return false, nil
	}
	relistRV := f.relistRV
	var check []string
	present := f.shadow[s.namespace]
	for name := range s.expected {
		if _, ok := present[name]; ok {
			check = append(check, name)
		}
	}
	shadowed := make(map[string]struct{}, len(present))
	for name := range present {
		shadowed[name] = struct{}{}
	}
	f.mu.Unlock()

	if !f.storeCaughtUp(relistRV) {
		return false, nil
	}
	indexer := f.informer.GetIndexer()
	cached, err := indexer.ByIndex(toolscache.NamespaceIndex, s.namespace)
	if err != nil {
		return false, err
	}
	for _, obj := range cached {
		if _, ok := shadowed[objectName(obj)]; !ok {
			return false, nil // its delete is queued, not applied yet
		}
	}
	for _, name := range check {
		obj, exists, err := indexer.GetByKey(s.namespace + "/" + name)
		if err != nil || !exists {
			return false, nil
		}
		want := s.expected[name]
		if got, ok := objectRV(obj); ok && want > 0 && got < want {
			return false, nil
		}
	}
	return true, nil
}

// remove marks the feed removed from its Cache: every warm-up of it counts as done and no
// new one starts, so that nothing waits for a resource that is no longer cached.
func (f *feed) remove() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
	for ns, s := range f.syncs {
		s.stop(syncRemoved)
		delete(f.syncs, ns)
	}
	for _, s := range f.pending {
		s.stop(syncRemoved)
	}
	f.pending = nil
}

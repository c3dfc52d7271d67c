package shardcache

// The shadow of the store, and release.
//
// The shadow is the store as it will be once every queued event has been applied: names
// and object pointers (shared with the store) by partition key. It keeps:
//   - Every event enters the output queue through appendLocked, which applies it to the
//     shadow in the same step; a relist resets both, and fills the shadow with what it
//     lists.
//   - Synthetic deletes (a release, a warm-up's objects gone from its list) are built from
//     the shadow, never from the informer's indexer, which lags behind the queue: a delete
//     is queued for exactly what the store will hold when the delete reaches it.
//
// Releasing partitions (release, releaseDone), once their admission has been revoked so
// that no new event of theirs is queued after:
//   - their warm-ups are cancelled and their floors dropped;
//   - every shadow object of theirs becomes a DELETED event behind what is already queued
//     (handlers see the deletes in stream order), then a bookmark;
//   - the release is done when those deletes have reached the reflector (or a relist
//     superseded them) and the store, caught up with the last relist, indexes no object
//     of the partitions any more.

import (
	"sort"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// shadowState is the shadow part of a feed's state (guarded by feed.mu).
type shadowState struct {
	// shadow: partition key (namespace) → name → object, as the store will hold it.
	shadow map[string]map[string]runtime.Object
}

// appendLocked queues ev for the reflector and applies it to the shadow.
func (f *feed) appendLocked(ev watch.Event) {
	switch ev.Type {
	case watch.Added, watch.Modified:
		if key, name, ok := objectKeys(ev.Object); ok {
			f.shadowPutLocked(key, name, ev.Object)
		}
	case watch.Deleted:
		if key, name, ok := objectKeys(ev.Object); ok {
			if objs := f.shadow[key]; objs != nil {
				delete(objs, name)
				if len(objs) == 0 {
					delete(f.shadow, key)
				}
			}
		}
	}
	f.outq = append(f.outq, ev)
	f.appended++
	f.wakeLocked()
}

func (f *feed) shadowPutLocked(key, name string, obj runtime.Object) {
	objs := f.shadow[key]
	if objs == nil {
		objs = map[string]runtime.Object{}
		f.shadow[key] = objs
	}
	objs[name] = obj
}

// shadowCount returns the number of objects the store will hold.
func (f *feed) shadowCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, objs := range f.shadow {
		n += len(objs)
	}
	return n
}

// releaseTicket tells Release what to wait for in one feed.
type releaseTicket struct {
	seq   uint64 // the synthetic deletes are delivered once delivered >= seq
	epoch uint64
}

// release drops partitions from the feed: warm-ups of their namespaces are cancelled and
// every shadow object of theirs becomes a synthetic DELETED event, queued behind what is
// already queued so that handlers see the deletes in stream order. Admission must have
// been revoked before, so that no new event of the partitions is queued after.
func (f *feed) release(partitions map[partition.ID]struct{}) releaseTicket {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ns, s := range f.syncs {
		if _, ok := partitions[s.partition]; ok {
			s.stop(syncCancelled)
			delete(f.syncs, ns)
		}
	}
	for ns := range f.floors {
		if _, ok := partitions[f.adm.partitionOf(ns)]; ok {
			delete(f.floors, ns)
		}
	}
	var keys []string
	for key := range f.shadow {
		if _, ok := partitions[f.adm.partitionOf(key)]; ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	before := f.appended
	for _, key := range keys {
		objs := make([]runtime.Object, 0, len(f.shadow[key]))
		for _, o := range f.shadow[key] {
			objs = append(objs, o)
		}
		sort.Slice(objs, func(i, j int) bool { return objectName(objs[i]) < objectName(objs[j]) })
		for _, o := range objs {
			f.appendLocked(watch.Event{Type: watch.Deleted, Object: o})
		}
	}
	if f.appended > before {
		f.appendBookmarkLocked()
	}
	f.counters.synthetic.Add(f.appended - before)
	if n := f.appended - before; n > 0 {
		f.logger.V(4).Info("Queued synthetic deletes for released partitions", "events", n)
	}
	return releaseTicket{seq: f.appended, epoch: f.epoch}
}

// releaseDone reports whether the synthetic deletes of ticket reached the reflector and
// the store holds no object of partitions any more.
func (f *feed) releaseDone(t releaseTicket, partitions []partition.ID) bool {
	f.mu.Lock()
	if (f.epoch == t.epoch && f.delivered < t.seq) || f.listing {
		f.mu.Unlock()
		return false
	}
	relistRV := f.relistRV
	f.mu.Unlock()
	if !f.storeCaughtUp(relistRV) {
		return false
	}
	indexer := f.informer.GetIndexer()
	for _, p := range partitions {
		keys, err := indexer.IndexKeys(PartitionIndex, PartitionIndexValue(p))
		if err != nil || len(keys) > 0 {
			return false
		}
	}
	return true
}

// storeCaughtUp reports whether the store has processed the last relist (its Replace),
// judged by the store's resourceVersion. Without AtomicFIFO the store does not track one,
// and the check is skipped.
func (f *feed) storeCaughtUp(relistRV string) bool {
	want, ok := parseRV(relistRV)
	if !ok {
		return true
	}
	got, ok := parseRV(f.informer.GetIndexer().LastStoreSyncResourceVersion())
	if !ok {
		return true
	}
	return got >= want
}

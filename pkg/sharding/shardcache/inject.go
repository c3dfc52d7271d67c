package shardcache

// Injection: a namespace's warm-up list merged into the running stream (injectLocked), by
// the watch goroutine, at its current position. For a namespace listed at resourceVersion
// L it queues, behind everything already queued:
//
//  1. the listed objects, oldest first, as ADDED or MODIFIED (as the shadow has them or
//     not), skipping those the shadow already has at the same resourceVersion;
//  2. DELETED for the shadow's objects of the namespace that the list does not have;
//  3. the namespace's buffered events newer than L, in stream order;
//  4. a BOOKMARK at the streams' newest position.
//
// It keeps:
//   - Floors: after the merge, upstream events of the namespace at or below L are dropped
//     (a watch lagging behind the list must not take objects back in time). A floor goes
//     once its stream has passed it (sweepFloorsLocked), once a newer event of the
//     namespace arrived, or with its partition's release.
//   - Bookmarks: after synthetic events carrying older objects, a bookmark at the newest
//     real position moves the reflector's (and the store's) resourceVersion back to where
//     the streams are. During a classic relist no position is known: the bookmark is owed
//     (needBookmark) and queued when the relist completes; during a watch-list relist the
//     initial-events-end bookmark does the job.

import (
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// injectState is the injection part of a feed's state (guarded by feed.mu).
type injectState struct {
	// floors: namespace → resourceVersion of its merged list; upstream events of the
	// namespace at or below it are already reflected by the list and are dropped.
	floors map[string]uint64
	// needBookmark: synthetic events were queued while the stream position was unknown
	// (during a classic relist); a bookmark follows them as soon as it is known.
	needBookmark bool
}

// injectLocked merges a listed namespace into the stream, at the current position:
//
//  1. the listed objects (state at the list's resourceVersion L), as ADDED or MODIFIED
//     depending on the shadow, skipping those the shadow already has at the same version;
//  2. DELETED for shadow objects of the namespace the list no longer has;
//  3. the events buffered since the warm-up began, those newer than L, in stream order;
//  4. a BOOKMARK at the high-water mark.
//
// Afterwards upstream events of the namespace at or below L are dropped (floor): a watch
// that lags behind the list must not take objects back in time.
func (f *feed) injectLocked(s *nsSync) {
	if f.syncs[s.namespace] == s {
		delete(f.syncs, s.namespace)
	}
	before := f.appended
	current := f.shadow[s.namespace]
	listed := make(map[string]struct{}, len(s.items))
	sortByRV(s.items)
	for _, obj := range s.items {
		name := objectName(obj)
		listed[name] = struct{}{}
		typ := watch.Added
		if old, ok := current[name]; ok {
			oldRV, ok1 := objectRV(old)
			newRV, ok2 := objectRV(obj)
			if ok1 && ok2 && oldRV == newRV {
				continue
			}
			typ = watch.Modified
		}
		f.appendLocked(watch.Event{Type: typ, Object: obj})
	}
	var stale []runtime.Object
	for name, old := range f.shadow[s.namespace] {
		if _, ok := listed[name]; !ok {
			stale = append(stale, old)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return objectName(stale[i]) < objectName(stale[j]) })
	for _, old := range stale {
		f.appendLocked(watch.Event{Type: watch.Deleted, Object: old})
	}
	for _, ev := range s.buffer {
		if rv, ok := objectRV(ev.Object); ok && s.listRVKnown && rv <= s.listRV {
			continue
		}
		f.appendLocked(ev)
	}
	if s.listRVKnown && s.listRV > f.streams[f.sliceOfLocked(s.namespace)].hwm {
		f.floors[s.namespace] = s.listRV
	}
	if f.appended > before {
		f.appendBookmarkLocked()
	}
	f.counters.synthetic.Add(f.appended - before)
	s.state = syncInjected
	s.seq = f.appended
	s.buffer = nil
	s.items = nil
	f.logger.V(4).Info("Merged warm-up list into the watch", "namespace", s.namespace,
		"partition", s.partition, "listResourceVersion", s.listRV, "events", f.appended-before)
}

// appendBookmarkLocked queues a synthetic BOOKMARK at the high-water mark, after
// synthetic events that carried older objects: it moves the reflector's last-synced
// resourceVersion (and the store's) back to the newest real position of the stream.
func (f *feed) appendBookmarkLocked() {
	if f.initial {
		return // the initial-events-end bookmark will do
	}
	if !f.positionKnownLocked() {
		f.needBookmark = f.listing
		return
	}
	obj := f.rt.Object.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	m.SetResourceVersion(strconv.FormatUint(f.newestLocked(), 10))
	f.appendLocked(watch.Event{Type: watch.Bookmark, Object: obj})
}

func (f *feed) sweepFloorsLocked() {
	for ns, floor := range f.floors {
		if floor <= f.streams[f.sliceOfLocked(ns)].hwm {
			delete(f.floors, ns)
		}
	}
}

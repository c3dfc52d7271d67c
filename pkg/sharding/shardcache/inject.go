package shardcache

// Injection: a namespace's warm-up list merged into the running stream (injectLocked), by
// the watch goroutine, at its current position. For a namespace listed at resourceVersion
// L it queues, behind everything already queued:
//
//  1. the listed objects, oldest first, as ADDED or MODIFIED (as the shadow has them or
//     not), skipping those the shadow already has at the same resourceVersion;
//  2. DELETED for the shadow's objects of the namespace that the list does not have;
//  3. the namespace's buffered events newer than L, in stream order — and every buffered
//     event of an object created while the namespace was buffered (not in the shadow,
//     first buffered as ADDED), which is told by them instead of by the list, then
//     brought to the list's version if the watch was behind it;
//  4. a BOOKMARK at the streams' newest position.
//
// It keeps:
//   - Handlers see the creation of every object created while its namespace is
//     buffered, as a watch would have shown it (createdWhileBuffered): a namespace is
//     also warmed while its partition is worked (a namespace that appears after its
//     partition's warm-up, onNamespaceAdded), and controllers count their own creations
//     by the ADDED event.
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
//     depending on the shadow, skipping those the shadow already has at the same version
//     and those created since the warm-up began;
//  2. DELETED for shadow objects of the namespace the list no longer has;
//  3. the events buffered since the warm-up began, those newer than L and all those of
//     objects created since, in stream order; then the list's state of the created
//     objects whose buffered events end below it (catchUpCreatedLocked);
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
	created := createdWhileBuffered(current, s.buffer)
	listed := make(map[string]struct{}, len(s.items))
	listedCreated := map[string]runtime.Object{}
	sortByRV(s.items)
	for _, obj := range s.items {
		name := objectName(obj)
		listed[name] = struct{}{}
		if created[name] {
			listedCreated[name] = obj // told by its own buffered events, below
			continue
		}
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
	last := map[string]watch.Event{}
	for _, ev := range s.buffer {
		if name := objectName(ev.Object); created[name] {
			last[name] = ev
		} else if rv, ok := objectRV(ev.Object); ok && s.listRVKnown && rv <= s.listRV {
			continue
		}
		f.appendLocked(ev)
	}
	f.catchUpCreatedLocked(s, last, listedCreated)
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

// createdWhileBuffered returns the names of the objects created while their namespace
// was buffered: absent from the shadow, their first buffered event is ADDED. The buffer
// holds every event of such an object from its creation on, which the list's snapshot
// would hide: handlers would never see an object created and deleted while the namespace
// was listed, and would first see one created and changed meanwhile in its later state.
// Controllers count their own creations by the ADDED event (expectations): a pod of a
// Job first seen already being deleted leaves a creation unobserved, and the Job makes
// no pod for expectations.Timeout (test/integration/batch TestJobPodReplacementFailed,
// in a namespace re-warmed by onNamespaceAdded while its partition was worked).
func createdWhileBuffered(current map[string]runtime.Object, buffer []watch.Event) map[string]bool {
	created := map[string]bool{}
	seen := map[string]struct{}{}
	for _, ev := range buffer {
		name := objectName(ev.Object)
		if _, ok := seen[name]; ok {
			continue
		}
		seen[name] = struct{}{}
		if _, ok := current[name]; !ok && ev.Type == watch.Added {
			created[name] = true
		}
	}
	return created
}

// catchUpCreatedLocked brings the objects created while their namespace was buffered,
// told by their buffered events (last holds each one's last), to the list's state when
// the watch was behind the list: the list's newer version (listed), or DELETED for one
// the list no longer has. Their late events at or below the list's version are dropped
// by the floor, as every object's are.
func (f *feed) catchUpCreatedLocked(s *nsSync, last map[string]watch.Event, listed map[string]runtime.Object) {
	if !s.listRVKnown {
		return
	}
	names := make([]string, 0, len(last))
	for name := range last {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ev := last[name]
		rv, ok := objectRV(ev.Object)
		if !ok || rv > s.listRV {
			continue // the buffer is past the list
		}
		obj, isListed := listed[name]
		switch {
		case isListed:
			if lrv, ok := objectRV(obj); ok && lrv > rv {
				typ := watch.Modified
				if ev.Type == watch.Deleted {
					typ = watch.Added // created again before the list
				}
				f.appendLocked(watch.Event{Type: typ, Object: obj})
			}
		case ev.Type != watch.Deleted:
			f.appendLocked(watch.Event{Type: watch.Deleted, Object: ev.Object})
		}
	}
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

package shardcache

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// slicedNamespaces are 24 namespaces of partition 1 and 24 of partition 2 whose names
// spread over FNV space (names differing only in their last characters would not).
func slicedNamespaces() []string {
	var names []string
	for p := 1; p <= 2; p++ {
		for i := 0; i < 24; i++ {
			names = append(names, fmt.Sprintf("p%d-%08x", p, uint32(i*2654435761+p*97)))
		}
	}
	return names
}

// sliceWatches returns, for each slice of the selector in force, the newest open watch
// of the fake apiserver with that slice's selector (nil if there is none).
func (e *filterEnv) sliceWatches() []*upstream {
	cov := e.c.filter.current()
	e.api.mu.Lock()
	defer e.api.mu.Unlock()
	out := make([]*upstream, len(cov.sels))
	for k, sel := range cov.sels {
		for i := len(e.api.watches) - 1; i >= 0; i-- {
			u := e.api.watches[i]
			select {
			case <-u.stop:
				continue
			default:
			}
			if u.opts.ShardSelector == sel {
				out[k] = u
				break
			}
		}
	}
	return out
}

// addedHistory is a history that adds one config map "c" to each namespace of names, at
// resourceVersions 1, 2, …; it returns the history and its last resourceVersion.
func addedHistory(names []string) (history, int) {
	var hist history
	for i, n := range names {
		hist = append(hist, ev{watch.Added, cm(n, "c", i+1)})
	}
	return hist, len(hist)
}

// next appends an event of typ for config map "c" of namespace at the next
// resourceVersion after *rv, advances *rv, and returns the object.
func (h *history) next(typ watch.EventType, namespace string, rv *int) *corev1.ConfigMap {
	*rv++
	o := cm(namespace, "c", *rv)
	*h = append(*h, ev{typ, o})
	return o
}

// startSliced starts a cache owning partition 1 of slicedNamespaces over four exact
// slices, each namespace holding config map "c", and waits for its sync and the slices'
// watches. It returns the history and its last resourceVersion, at which it listed.
func startSliced(t *testing.T, ctx context.Context) (*filterEnv, []string, history, int) {
	t.Helper()
	names := slicedNamespaces()
	hist, listRV := addedHistory(names)
	e := newFilterEnvWith(t, ctx, Options{MaxSelectorRanges: 7, MaxSelectorWatches: 4}, hist, names, 1)
	hist.list(e.api, "", listRV)
	e.c.Start(ctx)
	if err := e.c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitSliceWatches(t)
	return e, names, hist, listRV
}

// waitSliceWatches waits until every slice of the selector in force has an open watch.
func (e *filterEnv) waitSliceWatches(t *testing.T) {
	t.Helper()
	waitFor(t, "a watch per slice", func() bool {
		for _, u := range e.sliceWatches() {
			if u == nil {
				return false
			}
		}
		return true
	})
}

// emitSliced sends an event on the watch of the slice of obj's namespace, if that
// watch's selector covers it (as a filtering apiserver would), and reports whether it did.
func (e *filterEnv) emitSliced(t *testing.T, typ watch.EventType, obj *corev1.ConfigMap) bool {
	t.Helper()
	k := e.c.filter.current().set.SliceOf(obj.Namespace)
	u := e.sliceWatches()[k]
	if u == nil {
		t.Fatalf("no open watch for slice %d", k)
	}
	if !selectorMatches(t, u.opts.ShardSelector, obj.Namespace) {
		return false
	}
	u.send(typ, obj)
	return true
}

// TestServerFilterSlices: with MaxSelectorRanges too small for one exact selector, the
// selector is split over slices of the hash space, one watch per slice, and is exact.
// Lists (classic or streamed) cover every slice; the streams' events merge into one
// store; each stream keeps its own position, from which a watch that ended resumes it;
// a namespace that appears reopens only the watch of its slice.
func TestServerFilterSlices(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			names := slicedNamespaces()
			hist, listRV := addedHistory(names)
			e := newFilterEnvWith(t, ctx, Options{MaxSelectorRanges: 7, MaxSelectorWatches: 4}, hist, names, 1)
			owned := func(n string) bool { return testPartition(n) == 1 }
			if one := hashrange.Build(names, owned, 7); one.Foreign == 0 {
				t.Fatal("test setup: one selector of 7 ranges is already exact")
			}
			hist.list(e.api, "", listRV)

			// The first list: every slice's share, nothing else.
			streamPos := map[int]int{}
			if streaming {
				e.f.noWatchList = false // the fake clientset would refuse; the fake API streams
			}
			e.c.Start(ctx)
			cov := e.c.filter.current()
			waitFor(t, "the first selector", func() bool { cov = e.c.filter.current(); return cov != nil })
			if cov.set.Bits != 2 || cov.set.Foreign != 0 {
				t.Fatalf("selector of %d slices covering %d foreign namespaces, want 4 exact slices", len(cov.sels), cov.set.Foreign)
			}
			e.waitSliceWatches(t)
			if streaming {
				for k, u := range e.sliceWatches() {
					if u.opts.SendInitialEvents == nil || !*u.opts.SendInitialEvents {
						t.Fatalf("slice %d: not a streamed list: %+v", k, u.opts)
					}
					for _, o := range hist.state(listRV, "") {
						if selectorMatches(t, u.opts.ShardSelector, o.Namespace) {
							u.send(watch.Added, o.DeepCopy())
						}
					}
					// Each stream ends its list at its own position; the relist completes
					// at the oldest.
					streamPos[k] = listRV + k
					u.send(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(listRV + k),
						Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
				}
			} else {
				for k := range cov.sels {
					streamPos[k] = listRV
				}
			}
			if err := e.c.WaitForCacheSync(ctx); err != nil {
				t.Fatal(err)
			}
			waitTruth(t, e.inf, e.f, hist.truth(listRV, e.admitted))
			e.f.mu.Lock()
			relistRV := e.f.relistRV
			e.f.mu.Unlock()
			if relistRV != strconv.Itoa(listRV) {
				t.Errorf("relist completed at %s, want the oldest stream's %d", relistRV, listRV)
			}
			e.api.mu.Lock()
			for _, o := range e.api.listOpts {
				if !streaming && o.ShardSelector == "" {
					t.Errorf("an unfiltered list: %+v", o)
				}
			}
			e.api.mu.Unlock()

			// Live events, on the watch of each namespace's slice.
			rv := streamPos[len(cov.sels)-1]
			for _, n := range names {
				o := hist.next(watch.Modified, n, &rv)
				k := cov.set.SliceOf(n)
				if e.emitSliced(t, watch.Modified, o.DeepCopy()) {
					streamPos[k] = rv
				} else if owned(n) {
					t.Errorf("the watch of slice %d does not carry owned namespace %s", k, n)
				}
			}
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.waitStreamPositions(t, streamPos)

			// The store answers per namespace how far it has applied the namespace's
			// stream: the controllers' consistency guard must not take another stream's
			// newer resourceVersion for its own.
			store, ok := e.inf.GetStore().(interface{ LastStoreSyncResourceVersionIn(string) string })
			if !ok {
				t.Fatalf("the informer's store (%T) does not answer per namespace", e.inf.GetStore())
			}
			waitFor(t, "every namespace's stream applied", func() bool {
				for _, n := range names {
					if owned(n) && store.LastStoreSyncResourceVersionIn(n) != strconv.Itoa(streamPos[cov.set.SliceOf(n)]) {
						return false
					}
				}
				return true
			})

			// One upstream ends at once: the reflector watches again, every stream from its
			// own position.
			defer func(age time.Duration) { minReopenAge = age }(minReopenAge)
			minReopenAge = time.Hour
			before := e.api.watchCount()
			close(e.sliceWatches()[0].ch)
			waitFor(t, "new watches", func() bool { return e.api.watchCount() >= before+len(cov.sels) })
			for k, u := range e.sliceWatches() {
				if u.opts.ResourceVersion != strconv.Itoa(streamPos[k]) {
					t.Errorf("slice %d resumed from %s, want its stream's %d", k, u.opts.ResourceVersion, streamPos[k])
				}
			}
			// One that lived ends: it alone reopens, from its stream's position.
			minReopenAge = 0
			open := e.sliceWatches()
			before = e.api.watchCount()
			close(open[1].ch)
			waitFor(t, "slice 1's new watch", func() bool { u := e.sliceWatches()[1]; return u != nil && u != open[1] })
			if got := e.api.watchCount() - before; got != 1 {
				t.Errorf("%d watches opened after one slice's upstream ended, want 1", got)
			}
			for k, u := range e.sliceWatches() {
				if k != 1 && u != open[k] {
					t.Errorf("the watch of slice %d was reopened", k)
				}
			}
			if u := e.sliceWatches()[1]; u.opts.ResourceVersion != strconv.Itoa(streamPos[1]) {
				t.Errorf("slice 1 reopened from %s, want its stream's %d", u.opts.ResourceVersion, streamPos[1])
			}

			// A namespace of partition 1 appears: only its slice's watch reopens.
			const added = "p1-new"
			open = e.sliceWatches()
			before = e.api.watchCount()
			hist.list(e.api, added, rv) // its warm-up list: empty
			if _, err := e.client.CoreV1().Namespaces().Create(ctx, ns(added), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			e.waitCovered(t, added)
			k := e.c.filter.current().set.SliceOf(added)
			waitFor(t, "the reopened watch", func() bool { u := e.sliceWatches()[k]; return u != nil && u != open[k] })
			if got := e.api.watchCount() - before; got != 1 {
				t.Errorf("%d watches opened for a namespace of one slice, want 1", got)
			}
			for j, u := range e.sliceWatches() {
				if j != k && u != open[j] {
					t.Errorf("the watch of slice %d, which did not change, was reopened", j)
				}
			}
			if u := e.sliceWatches()[k]; u.opts.ResourceVersion != strconv.Itoa(streamPos[k]) {
				t.Errorf("slice %d reopened from %s, want its stream's %d", k, u.opts.ResourceVersion, streamPos[k])
			}
			o := hist.next(watch.Added, added, &rv)
			if !e.emitSliced(t, watch.Added, o.DeepCopy()) {
				t.Fatalf("the reopened watch does not carry %s", added)
			}
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.rvs.report(t)
		})
	}
}

// TestServerFilterSliceSplit: a shard that owned nothing (one slice) is handed a
// partition whose namespaces need four slices: its one stream splits into four, each
// watched from the parent's position with its own selector, and the partition's warm-up
// fills the store from them.
func TestServerFilterSliceSplit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := slicedNamespaces()
	hist, listRV := addedHistory(names)
	e := newFilterEnvWith(t, ctx, Options{MaxSelectorRanges: 7, MaxSelectorWatches: 4}, hist, names)
	hist.list(e.api, "", listRV)
	for _, n := range names {
		hist.list(e.api, n, listRV)
	}
	e.c.Start(ctx)
	if err := e.c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first watch", func() bool { return e.api.watchCount() > 0 })
	if cov := e.c.filter.current(); cov.set.Bits != 0 {
		t.Fatalf("owning nothing: %d slices, want 1", len(cov.sels))
	}
	before := e.api.watchCount()

	done := e.prepare(1)
	waitFor(t, "four slices", func() bool { return sliceBits(e.c.filter.current()) == 2 })
	e.waitSliceWatches(t)
	waitPrepared(t, done)
	if got := e.api.watchCount() - before; got != 4 {
		t.Errorf("%d watches opened by the split, want 4", got)
	}
	for k, u := range e.sliceWatches() {
		if u.opts.ResourceVersion != strconv.Itoa(listRV) {
			t.Errorf("slice %d watched from %s, want the parent stream's %d", k, u.opts.ResourceVersion, listRV)
		}
	}
	waitTruth(t, e.inf, e.f, hist.truth(listRV, e.admitted))
	rv := listRV
	for _, n := range names {
		o := hist.next(watch.Modified, n, &rv)
		e.emitSliced(t, watch.Modified, o.DeepCopy())
	}
	waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
	e.rvs.report(t)
}

// TestServerFilterSliceRelease: a shard owning two partitions over several slices
// releases the larger one, whose namespaces lie in half of the hash space, so that the
// covered namespaces it no longer owns outnumber the owned ones and the selector shrinks
// (it shrinks lazily, only then). The store drops the partition's objects; the slices
// whose ranges changed reopen from their own streams' positions, the others keep their
// watches; an event of the released partition that still arrives is dropped; preparing
// the partition again fills it back.
func TestServerFilterSliceRelease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Partition 1's namespaces spread over the hash space, partition 2's (more of them)
	// lie in its lower half only: the slices of the upper half do not change.
	var names []string
	for _, n := range slicedNamespaces() {
		if testPartition(n) == 1 {
			names = append(names, n)
		}
	}
	for i := 0; i < 24; i++ {
		names = append(names, fmt.Sprintf("p3-%08x", uint32(i*2246822519+7)))
	}
	for i, n := 0, 0; n < 32; i++ {
		if name := fmt.Sprintf("p2-%08x", uint32(i*2654435761+97)); hashrange.SliceOf(hashrange.Hash(name), 1) == 0 {
			names = append(names, name)
			n++
		}
	}
	hist, listRV := addedHistory(names)
	// The fewest ranges per selector for which owning partitions 1 and 2, and then 1
	// alone, takes the same number of slices (more than one): the release changes some
	// slices' ranges without splitting them (a split reopens every slice, see
	// TestServerFilterSliceSplit).
	opts := Options{MaxSelectorWatches: 8}
	ownedBoth := func(n string) bool { p := testPartition(n); return p == 1 || p == 2 }
	ownedOne := func(n string) bool { return testPartition(n) == 1 }
	for r := 2; r <= 12 && opts.MaxSelectorRanges == 0; r++ {
		both, one := hashrange.BuildSliced(names, ownedBoth, r, 0, 3), hashrange.BuildSliced(names, ownedOne, r, 0, 3)
		if both.Bits > 0 && both.Bits == one.Bits && both.Foreign == 0 && one.Foreign == 0 {
			opts.MaxSelectorRanges = r
		}
	}
	if opts.MaxSelectorRanges == 0 {
		t.Fatal("test setup: no selector size keeps the slices through the release")
	}
	e := newFilterEnvWith(t, ctx, opts, hist, names, 1, 2)
	hist.list(e.api, "", listRV)
	e.c.Start(ctx)
	if err := e.c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitSliceWatches(t)
	waitTruth(t, e.inf, e.f, hist.truth(listRV, e.admitted))
	before := e.c.filter.current()
	open := e.sliceWatches()
	watches := e.api.watchCount()

	relCtx, relCancel := context.WithTimeout(ctx, 30*time.Second)
	defer relCancel()
	if err := e.c.Release(relCtx, []partition.ID{2}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitTruth(t, e.inf, e.f, hist.truth(listRV, e.admitted))
	for _, n := range names {
		if testPartition(n) == 2 && e.admitted(n) {
			t.Fatalf("%s still admitted after its partition's release", n)
		}
	}
	var after *coverage
	waitFor(t, "a selector without partition 2", func() bool {
		after = e.c.filter.current()
		for _, n := range names {
			if testPartition(n) == 2 && after.set.Covers(n) {
				return false
			}
		}
		return true
	})
	if after.set.Bits != before.set.Bits {
		t.Errorf("the release changed the slices from %d to %d bits; slices only split", before.set.Bits, after.set.Bits)
	}
	changed := 0
	waitFor(t, "the changed slices' watches", func() bool {
		now := e.sliceWatches()
		for k, u := range now {
			if u == nil || (!after.set.SameSlice(before.set, k) && u == open[k]) {
				return false
			}
		}
		return true
	})
	now := e.sliceWatches()
	for k, u := range now {
		same := after.set.SameSlice(before.set, k)
		switch {
		case same && u != open[k]:
			t.Errorf("slice %d, whose ranges did not change, was reopened", k)
		case !same:
			changed++
			if u.opts.ResourceVersion != strconv.Itoa(listRV) {
				t.Errorf("slice %d reopened from %q, want its stream's %d", k, u.opts.ResourceVersion, listRV)
			}
		}
	}
	if changed == 0 || changed == len(now) {
		t.Fatalf("test setup: %d of %d slices' ranges changed, want some but not all", changed, len(now))
	}
	if got := e.api.watchCount() - watches; got != changed {
		t.Errorf("%d watches opened by the release, want %d (one per changed slice)", got, changed)
	}

	// Live events: the apiserver filters partition 2's out; one that still arrives on a
	// slice's watch (sent regardless of the selector) is dropped by the shard's own filter.
	rv := listRV
	for _, n := range names {
		o := hist.next(watch.Modified, n, &rv)
		if testPartition(n) == 2 {
			now[after.set.SliceOf(n)].send(watch.Modified, o.DeepCopy())
			continue
		}
		e.emitSliced(t, watch.Modified, o.DeepCopy())
	}
	waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))

	// Prepared again, the partition's objects come back from its warm-up.
	for _, n := range names {
		if testPartition(n) == 2 {
			hist.list(e.api, n, rv)
		}
	}
	hist.list(e.api, "", rv)
	waitPrepared(t, e.prepare(2))
	waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
	e.rvs.report(t)
}

// TestServerFilterSliceReopenFails: Prepare admits a partition and the slices' watches
// reopen with new selectors; the first such watch fails. A 500 makes the reflector watch
// again, every stream from its own position; a 410 Gone for those positions makes it
// relist every slice. Either way the store ends with exactly the admitted objects and
// the new selector's watches carry their events.
func TestServerFilterSliceReopenFails(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version")
	internal := apierrors.NewInternalError(fmt.Errorf("etcd unavailable"))
	tests := []struct {
		name string
		// fail answers a watch with one of the new selectors; n counts them, and
		// listed is the resourceVersion the lists answer at.
		fail   func(opts metav1.ListOptions, n, listed int) error
		relist bool
	}{
		{name: "500 once", fail: func(_ metav1.ListOptions, n, _ int) error {
			if n == 1 {
				return internal
			}
			return nil
		}},
		{name: "410 Gone from every stream position", relist: true, fail: func(opts metav1.ListOptions, _, listed int) error {
			if v, _ := strconv.Atoi(opts.ResourceVersion); v > 0 && v < listed {
				return gone
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e, names, hist, listRV := startSliced(t, ctx)
			before := e.c.filter.current()
			if before.set.Bits == 0 {
				t.Fatal("test setup: one slice")
			}
			// Live events of partition 1 move the streams apart.
			rv := listRV
			streamPos := map[int]int{}
			for k := range before.sels {
				streamPos[k] = listRV
			}
			for _, n := range names {
				if testPartition(n) != 1 {
					continue
				}
				o := hist.next(watch.Modified, n, &rv)
				if e.emitSliced(t, watch.Modified, o.DeepCopy()) {
					streamPos[before.set.SliceOf(n)] = rv
				}
			}
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.waitStreamPositions(t, streamPos)

			// Partition 2 is prepared: its warm-up lists, the relist (if any) and the
			// reopened watches all answer at rv.
			hist.list(e.api, "", rv)
			for _, n := range names {
				if testPartition(n) == 2 {
					hist.list(e.api, n, rv)
				}
			}
			lists := e.f.counters.clusterLists.Load()
			listed, n := rv, 0
			e.api.mu.Lock()
			e.api.failWatch = func(opts metav1.ListOptions) error {
				if !coversPartition(opts.ShardSelector, names, 2) {
					return nil
				}
				n++
				return tt.fail(opts, n, listed)
			}
			e.api.mu.Unlock()
			waitPrepared(t, e.prepare(2))
			waitFor(t, "a selector covering partition 2", func() bool {
				for _, nm := range names {
					if !e.c.filter.current().set.Covers(nm) {
						return false
					}
				}
				return true
			})
			e.waitSliceWatches(t)
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.api.mu.Lock()
			asked := n
			e.api.mu.Unlock()
			if asked < 2 {
				t.Fatalf("%d watches asked for with the new selectors, want a failed one and a later one", asked)
			}
			if got := e.f.counters.clusterLists.Load() - lists; tt.relist != (got > 0) {
				t.Errorf("%d cluster lists during the recovery, want a relist: %v", got, tt.relist)
			}
			if !tt.relist {
				for k, u := range e.sliceWatches() {
					if u.opts.ResourceVersion != strconv.Itoa(streamPos[k]) {
						t.Errorf("slice %d watched again from %s, want its stream's %d", k, u.opts.ResourceVersion, streamPos[k])
					}
				}
			}

			// The new watches carry every namespace's events.
			for _, nm := range names {
				o := hist.next(watch.Modified, nm, &rv)
				if !e.emitSliced(t, watch.Modified, o.DeepCopy()) {
					t.Errorf("no watch carries %s", nm)
				}
			}
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.rvs.report(t)
			e.api.mu.Lock()
			t.Logf("apiserver calls: %v", e.api.calls)
			e.api.mu.Unlock()
		})
	}
}

// coversPartition reports whether selector sel covers a namespace of partition p among
// names.
func coversPartition(sel string, names []string, p partition.ID) bool {
	if sel == "" {
		return false
	}
	for _, n := range names {
		if covers, _ := selectorCovers(sel, n); covers && testPartition(n) == p {
			return true
		}
	}
	return false
}

// waitStreamPositions waits until every stream of the feed is at want[k].
func (e *filterEnv) waitStreamPositions(t *testing.T, want map[int]int) {
	t.Helper()
	waitFor(t, "every stream at its position", func() bool {
		e.f.mu.Lock()
		defer e.f.mu.Unlock()
		for k, st := range e.f.streams {
			if st.hwm != uint64(want[k]) {
				return false
			}
		}
		return true
	})
}

// TestServerFilterSliceFloors: a namespace warmed up while its slice's watch lags behind
// the warm-up's list must not go back in time, whatever the other slices' streams do.
// Its events at or below the list's resourceVersion are dropped, whether they arrive
// during the warm-up (buffered) or after it (below the floor); a bookmark of another
// slice's stream, newer than the list, does not lift the floor, which belongs to the
// namespace's own stream; its newer events apply.
func TestServerFilterSliceFloors(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%v", buffered), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e, names, hist, listRV := startSliced(t, ctx)
			cov := e.c.filter.current()
			// x, of partition 2, is warmed up; y lies in another slice.
			var x, y string
			for _, n := range names {
				if testPartition(n) == 2 {
					x = n
					break
				}
			}
			for _, n := range names {
				if cov.set.SliceOf(n) != cov.set.SliceOf(x) {
					y = n
					break
				}
			}
			if x == "" || y == "" {
				t.Fatal("test setup: no two namespaces in different slices")
			}
			// x changes at 50, 52 and 53, is listed at 55, changes again at 56. (53 is
			// not in the history: the list at 55 supersedes it.)
			rv := listRV + 1
			lagging := []*corev1.ConfigMap{hist.next(watch.Modified, x, &rv)}
			rv++
			lagging = append(lagging, hist.next(watch.Modified, x, &rv))
			rv += 2
			hist.next(watch.Modified, x, &rv)
			listed := rv
			for _, n := range names {
				if testPartition(n) == 2 {
					hist.list(e.api, n, listed)
				}
			}
			newer := hist.next(watch.Modified, x, &rv)
			afterBookmark := cm(x, "c", listed-2)
			xWatch := func() *upstream {
				var u *upstream
				waitFor(t, "the watch of x's slice with a selector covering it", func() bool {
					u = e.sliceWatches()[e.c.filter.current().set.SliceOf(x)]
					return u != nil && coversPartition(u.opts.ShardSelector, []string{x}, 2)
				})
				return u
			}
			bookmarkY := func() {
				e.sliceWatches()[cov.set.SliceOf(y)].send(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(rv + 10)}})
			}
			if buffered {
				// Everything arrives while x's list is in flight.
				e.api.beforeList = func(namespace string, _ metav1.ListOptions) {
					if namespace != x {
						return
					}
					u := xWatch()
					for _, o := range lagging {
						u.send(watch.Modified, o.DeepCopy())
					}
					bookmarkY()
					u.send(watch.Modified, afterBookmark)
					u.send(watch.Modified, newer.DeepCopy())
				}
			}
			waitPrepared(t, e.prepare(2))
			if !buffered {
				// The watch lags: the events the list already holds come after it.
				u := xWatch()
				for _, o := range lagging {
					u.send(watch.Modified, o.DeepCopy())
				}
				bookmarkY()
				u.send(watch.Modified, afterBookmark) // newer than its stream, below the floor
				u.send(watch.Modified, newer.DeepCopy())
			}
			waitTruth(t, e.inf, e.f, hist.truth(rv, e.admitted))
			e.rvs.report(t)
		})
	}
}

package shardcache

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// collector reads a watch in the background, as the reflector does.
type collector struct {
	mu     sync.Mutex
	events []string
	done   chan struct{}
}

func collect(w watch.Interface) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ev := range w.ResultChan() {
			c.mu.Lock()
			c.events = append(c.events, describeEvent(ev))
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

// settle waits for n events (or 5s), then a little longer to catch unexpected extra
// events, and returns all of them.
func (c *collector) settle(n int) []string {
	deadline := time.Now().Add(5 * time.Second)
	for len(c.snapshot()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return c.snapshot()
}

// waitState waits until s reaches state.
func waitState(t *testing.T, f *feed, s *nsSync, state syncState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		got := s.state
		f.mu.Unlock()
		if got == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync of %s in state %d, want %d", s.namespace, got, state)
		}
		time.Sleep(time.Millisecond)
	}
}

type ev struct {
	typ watch.EventType
	obj *corev1.ConfigMap
}

func objs(items ...*corev1.ConfigMap) []runtime.Object {
	out := make([]runtime.Object, 0, len(items))
	for _, it := range items {
		out = append(out, it)
	}
	return out
}

func TestFeedListFilter(t *testing.T) {
	items := []*corev1.ConfigMap{cm("p1-a", "x", 3), cm("p2-a", "y", 4), cm("kube-system", "z", 5), cm("p1-b", "w", 6)}
	tests := []struct {
		name     string
		admitted []partition.ID
		want     []string
	}{
		{name: "nothing admitted", admitted: nil, want: nil},
		{name: "one partition, two namespaces", admitted: []partition.ID{1}, want: []string{"p1-a/x@3", "p1-b/w@6"}},
		{name: "two partitions", admitted: []partition.ID{1, 2}, want: []string{"p1-a/x@3", "p2-a/y@4", "p1-b/w@6"}},
		{name: "unrelated partition", admitted: []partition.ID{7}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, api := newTestFeed(t, tt.admitted...)
			api.setList("", 10, items...)
			list, err := f.ListWithContext(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := meta.ExtractList(list)
			var names []string
			for _, o := range got {
				names = append(names, describe(o))
				if m, _ := meta.Accessor(o); m.GetManagedFields() != nil {
					t.Errorf("%s: managedFields not stripped", describe(o))
				}
			}
			if !equalStrings(names, tt.want) {
				t.Errorf("listed %v, want %v", names, tt.want)
			}
			if lm, _ := meta.ListAccessor(list); lm.GetResourceVersion() != "10" {
				t.Errorf("list resourceVersion %q, want 10", lm.GetResourceVersion())
			}
			if f.shadowCount() != len(tt.want) {
				t.Errorf("shadow holds %d objects, want %d", f.shadowCount(), len(tt.want))
			}
		})
	}
}

func TestFeedWatchFilter(t *testing.T) {
	tests := []struct {
		name     string
		admitted []partition.ID
		events   []ev
		want     []string
	}{
		{
			name:     "other partitions are dropped",
			admitted: []partition.ID{1},
			events: []ev{
				{watch.Added, cm("p1-a", "x", 11)}, {watch.Added, cm("p2-a", "y", 12)},
				{watch.Modified, cm("kube-system", "z", 13)}, {watch.Deleted, cm("p1-a", "x", 14)},
			},
			want: []string{"ADDED p1-a/x@11", "DELETED p1-a/x@14"},
		},
		{
			name:     "duplicates of a restarted watch are dropped",
			admitted: []partition.ID{1},
			events: []ev{
				{watch.Added, cm("p1-a", "x", 11)}, {watch.Added, cm("p1-a", "x", 11)},
				{watch.Modified, cm("p1-a", "x", 9)}, {watch.Modified, cm("p1-a", "x", 12)},
			},
			want: []string{"ADDED p1-a/x@11", "MODIFIED p1-a/x@12"},
		},
		{
			name:     "nothing admitted",
			admitted: nil,
			events:   []ev{{watch.Added, cm("p1-a", "x", 11)}},
			want:     nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, api := newTestFeed(t, tt.admitted...)
			api.setList("", 10)
			_, w := reflectList(t, f)
			defer w.Stop()
			c := collect(w)
			up := api.lastWatch()
			for _, e := range tt.events {
				up.send(e.typ, e.obj)
			}
			if got := c.settle(len(tt.want)); !equalStrings(got, tt.want) {
				t.Errorf("events %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFeedMerge covers the ordering of a warm-up merge: the namespace's list at L, the
// events buffered while it ran (only those newer than L), the bookmark at the stream's
// position, and the floor that drops a lagging watch's events up to L.
func TestFeedMerge(t *testing.T) {
	tests := []struct {
		name        string
		admitted    []partition.ID // before the cluster list
		clusterList []*corev1.ConfigMap
		admit       []partition.ID // after the cluster list, before the live events
		live        []ev           // before the warm-up
		buffered    []ev           // while the namespace is listed
		listRV      int
		list        []*corev1.ConfigMap // the namespace list of p1-a
		after       []ev                // after the merge
		want        []string            // every event after the cluster list
	}{
		{
			name:        "watch ahead of the list: newer buffered events follow the list",
			clusterList: []*corev1.ConfigMap{cm("other", "o", 5), cm("p1-a", "old", 6)},
			admit:       []partition.ID{1},
			buffered: []ev{
				{watch.Added, cm("p1-a", "x", 11)}, {watch.Modified, cm("p1-a", "x", 13)},
				{watch.Added, cm("p1-a", "y", 14)}, {watch.Deleted, cm("p1-a", "x", 21)},
				{watch.Added, cm("p1-a", "z", 22)}, {watch.Modified, cm("other", "o", 23)},
			},
			listRV: 20,
			list:   []*corev1.ConfigMap{cm("p1-a", "old", 6), cm("p1-a", "x", 13), cm("p1-a", "y", 14)},
			after:  []ev{{watch.Modified, cm("p1-a", "y", 24)}},
			want: []string{
				// x and y were created while the namespace was listed: told by their
				// own events, x from its creation on.
				"ADDED p1-a/old@6", "ADDED p1-a/x@11", "MODIFIED p1-a/x@13", "ADDED p1-a/y@14",
				"DELETED p1-a/x@21", "ADDED p1-a/z@22", "BOOKMARK @23",
				"MODIFIED p1-a/y@24",
			},
		},
		{
			name:     "watch behind the list: its events up to the list's version are dropped",
			admit:    []partition.ID{1},
			buffered: []ev{{watch.Added, cm("p1-a", "x", 11)}},
			listRV:   20,
			list:     []*corev1.ConfigMap{cm("p1-a", "x", 11), cm("p1-a", "y", 15), cm("p1-a", "w", 17)},
			after: []ev{
				{watch.Added, cm("p1-a", "y", 15)}, {watch.Added, cm("p1-a", "w", 17)},
				{watch.Modified, cm("p1-a", "x", 19)}, {watch.Added, cm("p2-a", "n", 20)},
				{watch.Modified, cm("p1-a", "y", 25)},
			},
			want: []string{
				// x, created while the namespace was listed, is told by its buffered
				// event, after the objects the list alone shows.
				"ADDED p1-a/y@15", "ADDED p1-a/w@17", "ADDED p1-a/x@11", "BOOKMARK @11",
				"MODIFIED p1-a/y@25",
			},
		},
		{
			name:     "objects gone by the list are deleted from the store",
			admit:    []partition.ID{1},
			live:     []ev{{watch.Added, cm("p1-a", "s", 11)}, {watch.Added, cm("p1-a", "t", 12)}},
			buffered: []ev{{watch.Deleted, cm("p1-a", "s", 13)}},
			listRV:   15,
			list:     []*corev1.ConfigMap{cm("p1-a", "t", 12)},
			want: []string{
				"ADDED p1-a/s@11", "ADDED p1-a/t@12",
				"DELETED p1-a/s@11", "BOOKMARK @13",
			},
		},
		{
			// A namespace re-warmed while its partition is worked (onNamespaceAdded: it
			// appeared within newNamespaceGrace of the partition's warm-up): a pod created
			// and deleted while the namespace was listed must reach the handlers, or a
			// controller that counts its creations by the ADDED event (expectations) waits
			// expectations.Timeout for it (test/integration/batch TestJobPodReplacementFailed).
			name:     "an object created and deleted while the namespace is listed is told",
			admit:    []partition.ID{1},
			buffered: []ev{{watch.Added, cm("p1-a", "x", 11)}, {watch.Deleted, cm("p1-a", "x", 12)}},
			listRV:   15,
			want:     []string{"ADDED p1-a/x@11", "DELETED p1-a/x@12", "BOOKMARK @12"},
		},
		{
			name:  "an object created while the namespace is listed is first told as created",
			admit: []partition.ID{1},
			buffered: []ev{
				{watch.Added, cm("p1-a", "x", 11)}, {watch.Modified, cm("p1-a", "x", 12)},
				{watch.Modified, cm("p1-a", "x", 16)},
			},
			listRV: 15,
			list:   []*corev1.ConfigMap{cm("p1-a", "x", 12)},
			want:   []string{"ADDED p1-a/x@11", "MODIFIED p1-a/x@12", "MODIFIED p1-a/x@16", "BOOKMARK @16"},
		},
		{
			// The watch lags behind the list: the buffer has the creation, not yet the
			// later changes the list shows; the list's version follows the buffered ones,
			// and the late events at or below the list's version are dropped.
			name:     "a created object behind the list is brought to the list's version",
			admit:    []partition.ID{1},
			buffered: []ev{{watch.Added, cm("p1-a", "x", 11)}, {watch.Added, cm("p1-a", "y", 12)}},
			listRV:   20,
			list:     []*corev1.ConfigMap{cm("p1-a", "x", 14)},
			after: []ev{
				{watch.Modified, cm("p1-a", "x", 14)}, {watch.Deleted, cm("p1-a", "y", 18)},
				{watch.Modified, cm("p1-a", "x", 21)},
			},
			want: []string{
				"ADDED p1-a/x@11", "ADDED p1-a/y@12", "MODIFIED p1-a/x@14", "DELETED p1-a/y@12", "BOOKMARK @12",
				"MODIFIED p1-a/x@21",
			},
		},
		{
			name:        "a namespace already current produces no event",
			admitted:    []partition.ID{1},
			clusterList: []*corev1.ConfigMap{cm("p1-a", "x", 5)},
			listRV:      12,
			list:        []*corev1.ConfigMap{cm("p1-a", "x", 5)},
			want:        nil,
		},
		{
			name:        "other namespaces flow while one is buffered",
			admitted:    []partition.ID{1},
			clusterList: []*corev1.ConfigMap{cm("p1-b", "q", 4)},
			buffered:    []ev{{watch.Modified, cm("p1-b", "q", 11)}, {watch.Added, cm("p1-a", "x", 12)}},
			listRV:      11,
			want:        []string{"MODIFIED p1-b/q@11", "ADDED p1-a/x@12", "BOOKMARK @12"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, api := newTestFeed(t, tt.admitted...)
			api.setList("", 10, tt.clusterList...)
			_, w := reflectList(t, f)
			defer w.Stop()
			c := collect(w)
			up := api.lastWatch()

			f.adm.update(tt.admit, true)
			for _, e := range tt.live {
				up.send(e.typ, e.obj)
				rv, _ := objectRV(e.obj)
				waitHWM(t, f, rv)
			}
			s := f.beginSync(context.Background(), "p1-a", 1)
			if s == nil {
				t.Fatal("beginSync refused an admitted partition")
			}
			for _, e := range tt.buffered {
				up.send(e.typ, e.obj)
			}
			api.setList("p1-a", tt.listRV, tt.list...)
			items, rv, err := f.listNamespace(context.Background(), "p1-a", 100)
			if err != nil {
				t.Fatal(err)
			}
			f.completeSync(s, items, rv)
			waitState(t, f, s, syncInjected)
			for _, e := range tt.after {
				up.send(e.typ, e.obj)
			}
			if got := c.settle(len(tt.want)); !equalStrings(got, tt.want) {
				t.Errorf("events:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestFeedRelistSubsumesWarmup(t *testing.T) {
	f, api := newTestFeed(t)
	api.setList("", 10, cm("p1-a", "x", 5))
	_, w := reflectList(t, f)
	f.adm.update([]partition.ID{1}, true)
	s := f.beginSync(context.Background(), "p1-a", 1)
	api.lastWatch().send(watch.Added, cm("p1-a", "y", 11)) // buffered
	w.Stop()

	// The reflector relists (e.g. after a 410): the relist is filtered with partition 1
	// admitted, so it covers the warm-up.
	api.setList("", 12, cm("p1-a", "x", 5), cm("p1-a", "y", 11))
	listed, w2 := reflectList(t, f)
	defer w2.Stop()
	if want := []string{"p1-a/x@5", "p1-a/y@11"}; !equalStrings(listed, want) {
		t.Errorf("relist returned %v, want %v", listed, want)
	}
	if f.modeOf(s) != listSkip {
		t.Error("a warm-up begun before the relist still wants its list")
	}
	api.setList("p1-a", 11, cm("p1-a", "x", 5))
	items, rv, _ := f.listNamespace(context.Background(), "p1-a", 100)
	f.completeSync(s, items, rv) // late list result: must not be merged
	c := collect(w2)
	api.lastWatch().send(watch.Modified, cm("p1-a", "x", 13))
	if got, want := c.settle(1), []string{"MODIFIED p1-a/x@13"}; !equalStrings(got, want) {
		t.Errorf("events after relist %v, want %v", got, want)
	}
	f.mu.Lock()
	state := s.state
	f.mu.Unlock()
	if state != syncSubsumed {
		t.Errorf("warm-up state %d, want subsumed", state)
	}
}

func TestFeedRelease(t *testing.T) {
	f, api := newTestFeed(t, 1, 2)
	api.setList("", 10, cm("p1-a", "x", 5), cm("p1-b", "y", 6), cm("p2-a", "z", 7))
	_, w := reflectList(t, f)
	defer w.Stop()
	c := collect(w)
	up := api.lastWatch()
	up.send(watch.Modified, cm("p2-a", "z", 11))
	waitHWM(t, f, 11)

	f.adm.update([]partition.ID{1}, false) // Release revokes admission first
	ticket := f.release(map[partition.ID]struct{}{1: {}})
	up.send(watch.Modified, cm("p1-a", "x", 12)) // after revocation: dropped
	up.send(watch.Modified, cm("p2-a", "z", 13))
	want := []string{
		"MODIFIED p2-a/z@11",
		"DELETED p1-a/x@5", "DELETED p1-b/y@6", "BOOKMARK @11",
		"MODIFIED p2-a/z@13",
	}
	if got := c.settle(len(want)); !equalStrings(got, want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
	if ticket.seq != 4 {
		t.Errorf("ticket seq %d, want 4 (three deletes and a bookmark after one event)", ticket.seq)
	}
	if n := f.shadowCount(); n != 1 {
		t.Errorf("shadow holds %d objects, want 1", n)
	}
}

func TestFeedReleaseCancelsWarmup(t *testing.T) {
	f, api := newTestFeed(t, 1)
	api.setList("", 10)
	_, w := reflectList(t, f)
	defer w.Stop()
	c := collect(w)
	s := f.beginSync(context.Background(), "p1-a", 1)
	api.lastWatch().send(watch.Added, cm("p1-a", "x", 11))
	f.adm.update([]partition.ID{1}, false)
	f.release(map[partition.ID]struct{}{1: {}})
	f.completeSync(s, objs(cm("p1-a", "x", 11)), "11")
	if got := c.settle(0); len(got) != 0 {
		t.Errorf("a released warm-up produced events %v", got)
	}
	if _, err := f.syncDone(s); err != ErrReleased {
		t.Errorf("syncDone error %v, want ErrReleased", err)
	}
	if f.beginSync(context.Background(), "p1-a", 1) != nil {
		t.Error("beginSync accepted a revoked partition")
	}
}

// TestFeedWatchRestart: a new watch resumes from the high-water mark (not from the
// resourceVersion of an injected object the reflector recorded), drops replayed events,
// and first delivers what the previous watch left queued.
func TestFeedWatchRestart(t *testing.T) {
	f, api := newTestFeed(t, 1)
	api.setList("", 10, cm("p1-a", "x", 5))
	_, w := reflectList(t, f)
	up := api.lastWatch()
	got := []string{}
	go up.send(watch.Modified, cm("p1-a", "x", 20))
	got = append(got, take(t, w, 1)...)

	// Warm p1-b; the reflector reads only part of the merge before the watch ends.
	s := f.beginSync(context.Background(), "p1-b", 1)
	api.setList("p1-b", 18, cm("p1-b", "a", 15), cm("p1-b", "b", 16))
	items, rv, _ := f.listNamespace(context.Background(), "p1-b", 100)
	f.completeSync(s, items, rv)
	got = append(got, take(t, w, 1)...)
	w.Stop()

	// The reflector's last-synced version is now 15 (the injected object); it asks to
	// resume from there.
	w2, err := f.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "15"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if rv := api.lastWatch().opts.ResourceVersion; rv != "20" {
		t.Errorf("new watch requested from %q, want the high-water mark 20", rv)
	}
	c := collect(w2)
	up2 := api.lastWatch()
	up2.send(watch.Modified, cm("p1-a", "x", 20)) // replay: dropped
	up2.send(watch.Added, cm("p1-a", "n", 21))
	got = append(got, c.settle(3)...)
	want := []string{
		"MODIFIED p1-a/x@20",
		"ADDED p1-b/a@15", "ADDED p1-b/b@16", "BOOKMARK @20",
		"ADDED p1-a/n@21",
	}
	if !equalStrings(got, want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
}

// TestFeedWatchList covers client-go's streaming list: initial events are filtered, the
// initial-events-end bookmark passes, and a warm-up is merged only after it.
func TestFeedWatchList(t *testing.T) {
	f, api := newTestFeed(t, 1)
	w := watchList(t, f)
	defer w.Stop()
	c := collect(w)
	up := api.lastWatch()
	up.send(watch.Added, cm("p1-a", "x", 7))
	up.send(watch.Added, cm("p2-a", "y", 3))
	waitFor(t, "p2-a/y dropped", func() bool { return f.counters.dropped.Load() == 1 })
	f.adm.update([]partition.ID{2}, true)
	s := f.beginSync(context.Background(), "p2-b", 2)
	up.send(watch.Added, cm("p2-b", "z", 5)) // initial event of a warming namespace: buffered
	api.setList("p2-b", 12, cm("p2-b", "z", 5))
	items, rv, _ := f.listNamespace(context.Background(), "p2-b", 100)
	f.completeSync(s, items, rv)
	if got := c.settle(1); !equalStrings(got, []string{"ADDED p1-a/x@7"}) {
		t.Errorf("before the end of initial events: %v", got)
	}
	end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	up.send(watch.Bookmark, end)
	up.send(watch.Added, cm("p2-b", "u", 13))
	want := []string{"ADDED p1-a/x@7", "BOOKMARK @10", "ADDED p2-b/z@5", "BOOKMARK @10", "ADDED p2-b/u@13"}
	if got := c.settle(len(want)); !equalStrings(got, want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listing || f.initial || f.relistRV != "10" {
		t.Errorf("after the initial events: listing=%v initial=%v relistRV=%q", f.listing, f.initial, f.relistRV)
	}
}

func TestFeedErrorEventPassesThrough(t *testing.T) {
	f, api := newTestFeed(t, 1)
	api.setList("", 10)
	_, w := reflectList(t, f)
	defer w.Stop()
	c := collect(w)
	api.lastWatch().send(watch.Error, &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
	if got := c.settle(1); len(got) != 1 || got[0][:5] != "ERROR" {
		t.Errorf("events %v, want one ERROR", got)
	}
}

// TestFeedReleaseDuringPagedRelist: deletes queued while a paginated relist runs (the
// stream position is unknown) are followed by a bookmark once the list completes, and
// reach the reflector first thing in the next watch, after its Replace.
func TestFeedReleaseDuringPagedRelist(t *testing.T) {
	f, api := newTestFeed(t, 1, 2)
	page1 := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10", Continue: "next"},
		Items: []corev1.ConfigMap{*cm("p1-a", "x", 5)}}
	api.lists[""] = page1
	api.setList("|next", 10, cm("p2-a", "y", 6), cm("p1-b", "z", 7))

	if _, err := f.ListWithContext(context.Background(), metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	f.adm.update([]partition.ID{1}, false)
	f.release(map[partition.ID]struct{}{1: {}}) // p1-a/x came with page 1
	list, err := f.ListWithContext(context.Background(), metav1.ListOptions{Limit: 1, Continue: "next"})
	if err != nil {
		t.Fatal(err)
	}
	items, _ := meta.ExtractList(list)
	if len(items) != 1 || describe(items[0]) != "p2-a/y@6" {
		t.Errorf("page 2 after the release returned %d items, want only p2-a/y@6", len(items))
	}
	w, err := f.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got, want := drain(t, w, 100*time.Millisecond), []string{"DELETED p1-a/x@5", "BOOKMARK @10"}; !equalStrings(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

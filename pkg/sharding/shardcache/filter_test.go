package shardcache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// selectorMatches reports whether the wire selector sel matches namespace, parsed the
// simple way the builder writes it.
func selectorMatches(t *testing.T, sel, namespace string) bool {
	t.Helper()
	if sel == "" {
		t.Fatalf("no selector sent")
	}
	ok, err := selectorCovers(sel, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// selectorCovers is selectorMatches for the fake apiserver: "" matches everything.
func selectorCovers(sel, namespace string) (bool, error) {
	if sel == "" {
		return true, nil
	}
	h := hashrange.Hash(namespace)
	for _, part := range strings.Split(sel, " || ") {
		var lo, hi string
		part = strings.TrimPrefix(part, "shardRange("+hashrange.NamespaceKey+", ")
		part = strings.TrimSuffix(part, ")")
		f := strings.Split(part, ", ")
		if len(f) != 2 {
			return false, fmt.Errorf("cannot parse %q", sel)
		}
		lo, hi = strings.Trim(f[0], "'"), strings.Trim(f[1], "'")
		hs := "0x" + strings.TrimPrefix(hashHex(h), "0x")
		if !less(hs, lo) && less(hs, hi) {
			return true, nil
		}
	}
	return false, nil
}

func hashHex(h uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b)
}

func less(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// serverFilterCache returns a cache in ModeServerFilter over client (namespaces) and api
// (config maps), partitions prepared before its start, started and synced.
func serverFilterCache(t *testing.T, ctx context.Context, client *fake.Clientset, api *fakeAPI, partitions ...partition.ID) (*Cache, *feed) {
	t.Helper()
	c, err := New(client, testPartition, Options{Mode: ModeServerFilter, SelectorDebounce: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(api.resourceType())
	if err := c.Prepare(ctx, partitions); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	return c, c.feedList()[0]
}

func TestServerFilterSendsSelector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p1-a"), ns("p1-b"), ns("p2-a"), ns("p3-a"), ns("other"))
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	api.setList("", 10, cm("p1-a", "x", 5), cm("p2-a", "y", 6))
	c, f := serverFilterCache(t, ctx, client, api, 1)
	waitFor(t, "watch", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.watches) > 0 })

	api.mu.Lock()
	listSel := api.listOpts[0].ShardSelector
	api.mu.Unlock()
	watchSel := api.lastWatch().opts.ShardSelector
	if listSel != watchSel {
		t.Errorf("list selector %q, watch selector %q", listSel, watchSel)
	}
	for _, n := range []string{"p1-a", "p1-b"} {
		if !selectorMatches(t, listSel, n) {
			t.Errorf("selector %q does not cover owned namespace %s", listSel, n)
		}
	}
	for _, n := range []string{"p2-a", "p3-a", "other"} {
		if selectorMatches(t, listSel, n) {
			t.Errorf("selector %q covers foreign namespace %s (5 namespaces make at most 2 ranges)", listSel, n)
		}
	}
	// The client filter still holds: the fake API ignores the selector.
	if got := c.CachedObjects()["configmaps"]; got != 1 {
		t.Errorf("cached %d config maps, want 1", got)
	}
	st := c.Stats()
	for _, s := range st {
		if s.Resource == "configmaps" && s.SelectorRanges == 0 {
			t.Errorf("no selector ranges reported: %+v", s)
		}
	}
	if f.cov == nil {
		t.Fatal("feed has no selector")
	}
}

func TestServerFilterNothingOwned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p2-a"))
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	api.setList("", 10, cm("p2-a", "y", 6))
	c, err := New(client, testPartition, Options{Mode: ModeServerFilter})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(api.resourceType())
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	sel := api.listOpts[0].ShardSelector
	api.mu.Unlock()
	if want := (hashrange.Set{}).String(); sel != want {
		t.Errorf("selector %q, want hashrange.Nothing's %q", sel, want)
	}
}

// TestServerFilterNewNamespace: a namespace of an admitted partition that appears
// outside the selector makes the feed reopen its watch from the high-water mark with a
// selector that covers it, and then list the namespace, so that objects older than the
// watch's position and those created meanwhile are all cached.
func TestServerFilterNewNamespace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p1-a"), ns("p2-a"))
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	api.setList("", 10, cm("p1-a", "x", 5))
	c, f := serverFilterCache(t, ctx, client, api, 1)
	waitFor(t, "watch", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.watches) > 0 })
	up := api.lastWatch()
	up.send(watch.Added, cm("p1-a", "y", 11))
	waitHWM(t, f, 11)
	if selectorMatches(t, up.opts.ShardSelector, "p1-new") {
		t.Fatal("test setup: the first selector covers p1-new")
	}

	// p1-new appears with an object older than the watch's position (9) and one newer
	// (12); the old watch, filtered by the server, never sends them.
	api.setList("p1-new", 12, cm("p1-new", "a", 9), cm("p1-new", "b", 12))
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns("p1-new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch reopened", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.watches) > 1 })
	up2 := api.lastWatch()
	if up2.opts.ResourceVersion != "11" {
		t.Errorf("watch reopened from %q, want the high-water mark 11", up2.opts.ResourceVersion)
	}
	if !selectorMatches(t, up2.opts.ShardSelector, "p1-new") || !selectorMatches(t, up2.opts.ShardSelector, "p1-a") {
		t.Errorf("new selector %q does not cover p1-new and p1-a", up2.opts.ShardSelector)
	}
	select {
	case <-up.stop:
	case <-time.After(5 * time.Second):
		t.Error("old upstream watch not stopped")
	}
	up2.send(watch.Added, cm("p1-new", "b", 12)) // also in the list: dropped
	up2.send(watch.Added, cm("p1-new", "c", 13))
	up2.send(watch.Added, cm("p2-a", "z", 14)) // the fake server does not filter

	want := []string{"p1-a/x", "p1-a/y", "p1-new/a", "p1-new/b", "p1-new/c"}
	waitFor(t, "every object of p1-new cached", func() bool {
		keys := c.InformerFor(api.resourceType()).GetStore().ListKeys()
		slices.Sort(keys)
		return slices.Equal(keys, want)
	})
	api.mu.Lock()
	calls := append([]string(nil), api.calls...)
	api.mu.Unlock()
	// Both happen; in either order: the warm-up may list once the feed holds the new
	// selector, before the reopened watch request leaves, and that watch resumes from the
	// high-water mark (11), at or below any later list's resourceVersion, so nothing falls
	// between them. (This asked for the watch first and failed once in 16 race runs.)
	if !slices.Contains(calls, "watch 11") || !slices.Contains(calls, "list p1-new") {
		t.Errorf("calls %v: want the watch reopened from 11 and p1-new listed", calls)
	}
	if n := f.counters.selectorRestarts.Load(); n != 1 {
		t.Errorf("%d selector restarts, want 1", n)
	}
	if n := f.counters.watches.Load(); n != 2 {
		t.Errorf("%d watches, want 2 (the reflector's watch must not have ended)", n)
	}
}

// TestServerFilterPrepareGrows: a partition prepared while the cache runs is covered
// (one restart), and warmed.
func TestServerFilterPrepareGrows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p1-a"), ns("p2-a"), ns("p2-b"))
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	api.setList("", 10, cm("p1-a", "x", 5))
	c, f := serverFilterCache(t, ctx, client, api, 1)
	waitFor(t, "watch", func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.watches) > 0 })
	up := api.lastWatch()
	up.send(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "11"}})
	waitHWM(t, f, 11)
	api.setList("p2-a", 12, cm("p2-a", "a", 3))
	api.setList("p2-b", 12, cm("p2-b", "b", 4))
	if err := c.Prepare(ctx, []partition.ID{2}); err != nil {
		t.Fatal(err)
	}
	up2 := api.lastWatch()
	if up2 == up || up2.opts.ResourceVersion != "11" {
		t.Fatalf("no watch reopened from 11 (last watch from %q)", up2.opts.ResourceVersion)
	}
	for _, n := range []string{"p1-a", "p2-a", "p2-b"} {
		if !selectorMatches(t, up2.opts.ShardSelector, n) {
			t.Errorf("selector %q does not cover %s", up2.opts.ShardSelector, n)
		}
	}
	keys := c.InformerFor(api.resourceType()).GetStore().ListKeys()
	slices.Sort(keys)
	if want := []string{"p1-a/x", "p2-a/a", "p2-b/b"}; !slices.Equal(keys, want) {
		t.Errorf("cached %v, want %v", keys, want)
	}
	if n := f.counters.selectorRestarts.Load(); n != 1 {
		t.Errorf("%d selector restarts, want 1", n)
	}
}

// TestFeedStaleSelectorFreezesHighWaterMark: once the selector changes, events of the
// upstream watch opened with the old one are not accounted for (the high-water mark stays
// where the change happened), so that the watch reopened from it with the new selector
// delivers them, and everything of the newly covered namespaces after that point.
func TestFeedStaleSelectorFreezesHighWaterMark(t *testing.T) {
	f, _ := newTestFeed(t, 1)
	f.filter = &serverFilter{} // marks ModeServerFilter; not used below
	f.mu.Lock()
	f.cov = oneSliceCoverage(1, "old")
	f.streams[0].hwm, f.gen = 10, 7
	f.mu.Unlock()
	if _, _, reopen := f.accept(7, 0, 0, 1, watch.Event{Type: watch.Added, Object: cm("p1-a", "x", 11)}); reopen {
		t.Fatal("reopen asked with the selector unchanged")
	}
	waitHWM(t, f, 11)
	f.setCoverage(oneSliceCoverage(2, "new"))
	if stale, _, _ := f.staleUpstreams(7, 0, []uint64{1}); len(stale) != 1 {
		t.Error("the watch of the old selector need not reopen")
	}
	if _, alive, reopen := f.accept(7, 0, 0, 1, watch.Event{Type: watch.Added, Object: cm("p1-a", "y", 12)}); !alive || !reopen {
		t.Errorf("event of the old selector's watch: alive=%v reopen=%v, want both", alive, reopen)
	}
	spec, ok := f.reopenSpec(7, 0, metav1.ListOptions{ResourceVersion: "3", TimeoutSeconds: new(int64)})
	if opts := spec.opts; !ok || opts.ResourceVersion != "11" || opts.ShardSelector != "new" || spec.covGen != 2 || opts.TimeoutSeconds == nil {
		t.Errorf("reopen options %+v gen %d ok %v; want from 11 with the new selector", opts, spec.covGen, ok)
	}
	if _, _, reopen := f.accept(7, 0, 0, 2, watch.Event{Type: watch.Added, Object: cm("p1-a", "y", 12)}); reopen {
		t.Error("the reopened watch is stale")
	}
	waitHWM(t, f, 12)
	if f.covers("p1-a") {
		t.Error("covers a namespace the selector's ranges do not hold")
	}
}

// oneSliceCoverage is a selector of one slice, generation gen, whose wire form is sel and
// whose (empty) ranges cover nothing.
func oneSliceCoverage(gen uint64, sel string) *coverage {
	return &coverage{set: hashrange.Sliced{Slices: []hashrange.Set{{}}}, sels: []string{sel}, gens: []uint64{gen}, gen: gen}
}

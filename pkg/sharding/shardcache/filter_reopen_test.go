package shardcache

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
)

// history is the fake cluster's config maps as a stream of events in resourceVersion
// order: lists and watches of the fake apiserver are cut from it, so that every list
// and every watch the feed gets is consistent with one truth.
type history []ev

func rvOf(obj *corev1.ConfigMap) int {
	rv, _ := strconv.Atoi(obj.ResourceVersion)
	return rv
}

// state returns the objects of namespace ("": all) that exist at resourceVersion rv.
func (h history) state(rv int, namespace string) []*corev1.ConfigMap {
	m := map[string]*corev1.ConfigMap{}
	for _, e := range h {
		if rvOf(e.obj) > rv {
			break
		}
		if namespace != "" && e.obj.Namespace != namespace {
			continue
		}
		key := e.obj.Namespace + "/" + e.obj.Name
		if e.typ == watch.Deleted {
			delete(m, key)
		} else {
			m[key] = e.obj
		}
	}
	out := make([]*corev1.ConfigMap, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// truth returns key → resourceVersion of the objects of admitted namespaces at rv.
func (h history) truth(rv int, admitted func(string) bool) map[string]string {
	out := map[string]string{}
	for _, o := range h.state(rv, "") {
		if admitted(o.Namespace) {
			out[o.Namespace+"/"+o.Name] = o.ResourceVersion
		}
	}
	return out
}

// list makes the fake apiserver answer lists of namespace ("": the cluster) at rv.
func (h history) list(api *fakeAPI, namespace string, rv int) {
	api.setList(namespace, rv, h.state(rv, namespace)...)
}

// pagedList makes the cluster-wide list at rv come in two pages, the second behind the
// continue token "next".
func (h history) pagedList(api *fakeAPI, rv int) {
	items := h.state(rv, "")
	half := len(items) / 2
	api.setList("", rv, items[:half]...)
	api.setList("|next", rv, items[half:]...)
	api.mu.Lock()
	api.lists[""].Continue = "next"
	api.mu.Unlock()
}

// replay sends the events after from, up to and including to, on the newest watch, as
// a server-side filtering apiserver would (those its selector covers).
func (h history) replay(t *testing.T, api *fakeAPI, from, to int) {
	t.Helper()
	for _, e := range h {
		if rv := rvOf(e.obj); rv > from && rv <= to {
			api.emit(e.typ, e.obj.DeepCopy())
		}
	}
}

// pageGate holds the fake apiserver's answer to the second page of a cluster-wide list.
type pageGate struct {
	reached, release chan struct{}
	reachedOnce      sync.Once
	releaseOnce      sync.Once
}

func gateSecondPage(t *testing.T, api *fakeAPI) *pageGate {
	g := &pageGate{reached: make(chan struct{}), release: make(chan struct{})}
	api.beforeList = func(namespace string, opts metav1.ListOptions) {
		if namespace == "" && opts.Continue == "next" {
			g.reachedOnce.Do(func() { close(g.reached) })
			<-g.release
		}
	}
	t.Cleanup(g.open)
	return g
}

func (g *pageGate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

func (g *pageGate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the second page of the relist was never requested")
	}
}

// rvCheck records, through an informer's handler, every object whose resourceVersion
// went backwards in the store.
type rvCheck struct {
	mu   sync.Mutex
	errs []string
}

func checkRVs(inf toolscache.SharedIndexInformer) *rvCheck {
	c := &rvCheck{}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*corev1.ConfigMap), newObj.(*corev1.ConfigMap)
			if rvOf(n) < rvOf(o) {
				c.mu.Lock()
				c.errs = append(c.errs, fmt.Sprintf("%s/%s went from %s back to %s", n.Namespace, n.Name, o.ResourceVersion, n.ResourceVersion))
				c.mu.Unlock()
			}
		},
	})
	return c
}

func (c *rvCheck) report(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Errorf("resourceVersion went backwards: %s", e)
	}
}

// storeRVs returns key → resourceVersion of the informer's store.
func storeRVs(inf toolscache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, o := range inf.GetStore().List() {
		m := o.(*corev1.ConfigMap)
		out[m.Namespace+"/"+m.Name] = m.ResourceVersion
	}
	return out
}

// waitTruth waits until the store holds exactly want (keys and resourceVersions), and
// checks that the feed's shadow agrees (no object duplicated or left behind).
func waitTruth(t *testing.T, inf toolscache.SharedIndexInformer, f *feed, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !maps.Equal(storeRVs(inf), want) {
		if time.Now().After(deadline) {
			t.Fatalf("store holds\n %v\nwant exactly\n %v", sortedPairs(storeRVs(inf)), sortedPairs(want))
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := f.shadowCount(); n != len(want) {
		t.Errorf("the feed's shadow holds %d objects, want %d", n, len(want))
	}
}

func sortedPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"@"+v)
	}
	sort.Strings(out)
	return out
}

// filterEnv is a cache in ModeServerFilter over a fake apiserver that filters by the
// selector, fed from a history.
type filterEnv struct {
	ctx    context.Context
	client *fake.Clientset
	api    *fakeAPI
	c      *Cache
	f      *feed
	inf    toolscache.SharedIndexInformer
	rvs    *rvCheck
	hist   history
}

// newFilterEnv builds the cache with partitions admitted before its start; it is not
// started.
func newFilterEnv(t *testing.T, ctx context.Context, hist history, namespaces []string, partitions ...partition.ID) *filterEnv {
	t.Helper()
	return newFilterEnvWith(t, ctx, Options{}, hist, namespaces, partitions...)
}

// newFilterEnvWith is newFilterEnv with options (Mode, SelectorDebounce and PollInterval
// are set).
func newFilterEnvWith(t *testing.T, ctx context.Context, opts Options, hist history, namespaces []string, partitions ...partition.ID) *filterEnv {
	t.Helper()
	e := &filterEnv{ctx: ctx, hist: hist}
	var objs []*corev1.Namespace
	for _, n := range namespaces {
		objs = append(objs, ns(n))
	}
	e.client = fake.NewClientset()
	for _, o := range objs {
		if err := e.client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	e.api = &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}, serverFilter: true}
	opts.Mode, opts.SelectorDebounce, opts.PollInterval = ModeServerFilter, 20*time.Millisecond, 5*time.Millisecond
	c, err := New(e.client, testPartition, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	e.inf = c.InformerFor(e.api.resourceType())
	e.f = c.feedList()[0]
	e.rvs = checkRVs(e.inf)
	if err := c.Prepare(ctx, partitions); err != nil {
		t.Fatal(err)
	}
	return e
}

// prepare runs Prepare in the background; the channel gets its result.
func (e *filterEnv) prepare(partitions ...partition.ID) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		defer cancel()
		done <- e.c.Prepare(ctx, partitions)
	}()
	return done
}

func waitPrepared(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Prepare: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Prepare did not return")
	}
}

// waitCovered waits until the selector in force, in the filter and in the feed, covers
// every namespace of names.
func (e *filterEnv) waitCovered(t *testing.T, names ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a selector covering %v", names), func() bool {
		cov := e.c.filter.current()
		e.f.mu.Lock()
		fcov := e.f.cov
		e.f.mu.Unlock()
		if cov == nil || fcov != cov {
			return false
		}
		for _, n := range names {
			if !cov.set.Covers(n) {
				return false
			}
		}
		return true
	})
}

// waitFinalWatch waits until the newest upstream watch is a plain watch (no initial
// events) with the selector in force, at least the nth one, and returns its
// resourceVersion.
func (e *filterEnv) waitFinalWatch(t *testing.T, nth int, covered ...string) int {
	t.Helper()
	var u *upstream
	waitFor(t, fmt.Sprintf("a plain watch, at least the %dth, with the newest selector (covering %v)", nth, covered), func() bool {
		if e.api.watchCount() < nth {
			return false
		}
		cov := e.c.filter.current()
		u = e.api.lastWatch()
		if cov == nil || !slices.Contains(cov.sels, u.opts.ShardSelector) || u.opts.SendInitialEvents != nil {
			return false
		}
		for _, n := range covered {
			if !cov.set.Covers(n) {
				return false
			}
		}
		return true
	})
	for _, n := range covered {
		if !selectorMatches(t, u.opts.ShardSelector, n) {
			t.Errorf("the final watch's selector does not cover %s", n)
		}
	}
	rv, err := strconv.Atoi(u.opts.ResourceVersion)
	if err != nil {
		t.Fatalf("final watch from %q", u.opts.ResourceVersion)
	}
	return rv
}

func (e *filterEnv) admitted(namespace string) bool { return e.c.adm.namespaceAdmitted(namespace) }

func expired410() *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired,
		Message: "too old resource version"}
}

// TestServerFilterSelectorChangeDuringRelist: the selector changes while the feed is in
// the middle of a relist (the relist's list or its streamed initial events are not
// complete). The relist keeps the selector it started with, so it misses the newly
// covered namespaces; the watch that follows it must use the newest selector, and the
// warm-up of those namespaces must list them only once that watch carries them (a list
// taken during the relist is older than the relist, and what changed in between would
// be lost). At the end the store is exactly the cluster's admitted objects, and no
// object's resourceVersion went backwards.
//
// The fake apiserver filters lists and watches by the selector they carry, and serves
// namespace lists that are stale (older than the relist) until the relist completes.
func TestServerFilterSelectorChangeDuringRelist(t *testing.T) {
	tests := []struct {
		name       string
		namespaces []string // known to the Namespace informer from the start
		hist       history
		streaming  bool // client-go's streaming list instead of LIST + WATCH
		// relistRV is the resourceVersion of the relist during which the selector changes.
		relistRV int
		// before brings the feed into the relist, up to the point where the change comes,
		// and returns what completes the relist.
		before func(t *testing.T, e *filterEnv) (after func())
		// change changes the selector; prepared is non-nil if it called Prepare.
		change  func(t *testing.T, e *filterEnv) (prepared <-chan error)
		covered []string // by the newest selector
		// stale: namespace lists that the fake apiserver serves, at staleRV, while the
		// relist runs; finalListRV: the resourceVersion of those it serves afterwards.
		stale       []string
		staleRV     int
		finalListRV int
		endRV       int
	}{
		{
			name:       "paged relist after a 410, Prepare between the pages",
			namespaces: []string{"p1-a", "p1-b", "p2-a", "p2-b", "p3-a"},
			hist: history{
				{watch.Added, cm("p1-a", "x", 5)}, {watch.Added, cm("p2-a", "y", 6)}, {watch.Added, cm("p3-a", "q", 7)},
				{watch.Added, cm("p1-a", "x2", 11)}, {watch.Added, cm("p2-a", "y2", 12)},
				{watch.Added, cm("p1-b", "z", 15)}, {watch.Added, cm("p2-b", "w", 16)},
				{watch.Added, cm("p2-a", "y4", 19)}, // after the stale namespace lists, before the relist
				{watch.Added, cm("p2-a", "y3", 21)},
				{watch.Modified, cm("p2-b", "w", 23)}, {watch.Modified, cm("p1-a", "x", 24)},
				{watch.Deleted, cm("p2-a", "y", 25)},
			},
			relistRV: 20,
			before: func(t *testing.T, e *filterEnv) func() {
				e.hist.list(e.api, "", 10)
				e.c.Start(e.ctx)
				if err := e.c.WaitForCacheSync(e.ctx); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "watch", func() bool { return e.api.watchCount() > 0 })
				e.hist.replay(t, e.api, 10, 12)
				waitHWM(t, e.f, 11)
				gate := gateSecondPage(t, e.api)
				e.hist.pagedList(e.api, 20)
				e.api.lastWatch().send(watch.Error, expired410()) // the reflector relists
				gate.wait(t)
				return gate.open
			},
			change: func(t *testing.T, e *filterEnv) <-chan error {
				return e.prepare(2)
			},
			covered:     []string{"p1-a", "p1-b", "p2-a", "p2-b"},
			stale:       []string{"p2-a", "p2-b"},
			staleRV:     18,
			finalListRV: 22,
			endRV:       25,
		},
		{
			name:       "paged first list, a namespace of the partition appears between the pages",
			namespaces: []string{"p1-a", "p2-a"},
			hist: history{
				{watch.Added, cm("p1-a", "x", 5)}, {watch.Added, cm("p2-a", "y", 6)},
				{watch.Added, cm("p1-new", "a", 8)}, // the Namespace informer does not know p1-new yet
				{watch.Added, cm("p1-new", "b", 11)},
				{watch.Modified, cm("p1-a", "x", 12)}, {watch.Modified, cm("p1-new", "b", 13)},
			},
			relistRV: 10,
			before: func(t *testing.T, e *filterEnv) func() {
				gate := gateSecondPage(t, e.api)
				e.hist.pagedList(e.api, 10)
				e.c.Start(e.ctx)
				gate.wait(t)
				return gate.open
			},
			change: func(t *testing.T, e *filterEnv) <-chan error {
				if _, err := e.client.CoreV1().Namespaces().Create(e.ctx, ns("p1-new"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			covered:     []string{"p1-a", "p1-new"},
			stale:       []string{"p1-new"},
			staleRV:     7, // before p1-new/a
			finalListRV: 11,
			endRV:       13,
		},
		{
			name:       "streaming list, Prepare while the initial events arrive",
			namespaces: []string{"p1-a", "p1-b", "p2-a", "p3-a"},
			streaming:  true,
			hist: history{
				{watch.Added, cm("p1-a", "x", 5)}, {watch.Added, cm("p2-a", "y", 6)}, {watch.Added, cm("p1-b", "z", 7)},
				{watch.Added, cm("p3-a", "q", 8)},
				{watch.Added, cm("p2-a", "v", 9)}, // after the stale namespace list, before the relist
				{watch.Added, cm("p2-a", "y2", 11)},
				{watch.Modified, cm("p1-a", "x", 12)}, {watch.Modified, cm("p2-a", "y", 13)},
			},
			relistRV: 10,
			before: func(t *testing.T, e *filterEnv) func() {
				e.f.noWatchList = false // the fake clientset would refuse; the fake API streams
				e.c.Start(e.ctx)
				waitFor(t, "watch-list", func() bool { return e.api.watchCount() > 0 })
				if u := e.api.lastWatch(); u.opts.SendInitialEvents == nil || !*u.opts.SendInitialEvents {
					t.Fatalf("the reflector did not stream its list (WatchListClient off?): %+v", u.opts)
				}
				e.api.emit(watch.Added, cm("p1-a", "x", 5)) // the first initial event
				return func() {
					for _, o := range e.hist.state(10, "")[1:] { // the rest, as the old selector has them
						e.api.emit(watch.Added, o.DeepCopy())
					}
					e.api.lastWatch().send(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
						Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
				}
			},
			change: func(t *testing.T, e *filterEnv) <-chan error {
				return e.prepare(2)
			},
			covered:     []string{"p1-a", "p1-b", "p2-a"},
			stale:       []string{"p2-a"},
			staleRV:     8,
			finalListRV: 11,
			endRV:       13,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := newFilterEnv(t, ctx, tt.hist, tt.namespaces, 1)
			for _, n := range tt.stale {
				e.hist.list(e.api, n, tt.staleRV)
			}
			after := tt.before(t, e)
			if cov := e.c.filter.current(); cov == nil {
				t.Fatal("no selector computed by the relist")
			} else if cov.set.Covers(tt.covered[len(tt.covered)-1]) {
				t.Fatalf("test setup: the relist's selector already covers %s", tt.covered[len(tt.covered)-1])
			}
			e.f.mu.Lock()
			if !e.f.listing && !e.f.initial {
				t.Error("test setup: the feed is not relisting")
			}
			e.f.mu.Unlock()

			prepared := tt.change(t, e)
			e.waitCovered(t, tt.covered...)
			// A warm-up that (wrongly) lists while the relist runs gets the stale list.
			time.Sleep(50 * time.Millisecond)
			for _, n := range tt.stale {
				e.hist.list(e.api, n, tt.finalListRV)
			}
			after()

			from := e.waitFinalWatch(t, 1, tt.covered...)
			if from != tt.relistRV {
				t.Errorf("final watch from %d, want the relist's resourceVersion %d", from, tt.relistRV)
			}
			e.hist.replay(t, e.api, from, tt.finalListRV)
			if prepared != nil {
				waitPrepared(t, prepared)
			}
			e.hist.replay(t, e.api, tt.finalListRV, tt.endRV)
			waitTruth(t, e.inf, e.f, e.hist.truth(tt.endRV, e.admitted))
			e.rvs.report(t)
			if u := e.api.lastWatch(); !slices.Contains(e.c.filter.current().sels, u.opts.ShardSelector) {
				t.Errorf("the watch does not use the newest selector")
			}
		})
	}
}

// TestServerFilterReopenFails: the watch reopened with a new selector (after Prepare
// admitted a partition) fails, as a request (410 Gone for a compacted resourceVersion,
// or a 500) or with an ERROR event on the new stream. The feed must recover, by watching
// again from its high-water mark or by relisting, and end with exactly the cluster's
// admitted objects, with the new selector in force.
func TestServerFilterReopenFails(t *testing.T) {
	hist := history{
		{watch.Added, cm("p1-a", "x", 5)}, {watch.Added, cm("p2-a", "y", 6)}, {watch.Added, cm("p3-a", "q", 7)},
		{watch.Modified, cm("p1-a", "x", 11)}, // accounted for by the first watch
		{watch.Added, cm("p2-a", "y2", 15)},   // the new selector's watch must bring it, or a relist
		{watch.Modified, cm("p2-a", "y", 21)}, {watch.Modified, cm("p1-a", "x", 22)},
		{watch.Added, cm("p2-b", "n", 23)},
	}
	const hwm, nsListRV, relistRV, endRV = 11, 16, 20, 23
	newSelector := func(opts metav1.ListOptions) bool {
		ok, _ := selectorCovers(opts.ShardSelector, "p2-a")
		return opts.ShardSelector != "" && ok
	}
	gone := apierrors.NewResourceExpired("too old resource version: 11 (19)")
	internal := apierrors.NewInternalError(fmt.Errorf("etcd unavailable"))
	tests := []struct {
		name string
		// failWatch fails watch requests (see fakeAPI.failWatch); n counts the calls
		// with the new selector.
		failWatch func(opts metav1.ListOptions, n int) error
		// onReopen, if set, acts on the reopened (successful) upstream watch.
		onReopen   func(t *testing.T, u *upstream)
		minWatches int  // the final watch is at least the nth
		relist     bool // recovery relists (else it watches again from the high-water mark)
	}{
		{
			name: "410 Gone: every watch from the high-water mark is refused",
			failWatch: func(opts metav1.ListOptions, _ int) error {
				if opts.ResourceVersion == strconv.Itoa(hwm) && newSelector(opts) {
					return gone
				}
				return nil
			},
			minWatches: 2,
			relist:     true,
		},
		{
			name: "500 once",
			failWatch: func(opts metav1.ListOptions, n int) error {
				if n == 1 {
					return internal
				}
				return nil
			},
			minWatches: 2,
		},
		{
			name:       "410 ERROR event on the reopened watch",
			onReopen:   func(t *testing.T, u *upstream) { u.send(watch.Error, expired410()) },
			minWatches: 3,
			relist:     true,
		},
		{
			name: "500 ERROR event on the reopened watch",
			onReopen: func(t *testing.T, u *upstream) {
				u.send(watch.Error, &apierrors.NewInternalError(fmt.Errorf("etcd unavailable")).ErrStatus)
			},
			minWatches: 3,
			relist:     true, // the reflector retries internal errors only with MaxInternalErrorRetryDuration set
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := newFilterEnv(t, ctx, hist, []string{"p1-a", "p2-a", "p2-b", "p3-a"}, 1)
			hist.list(e.api, "", 10)
			e.c.Start(ctx)
			if err := e.c.WaitForCacheSync(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "watch", func() bool { return e.api.watchCount() > 0 })
			hist.replay(t, e.api, 10, hwm)
			// In the store, so that the reflector has read an event of its watch: a watch
			// that ends with none within a second is "very short", and makes it relist.
			waitFor(t, "p1-a/x@11 in the store", func() bool { return storeRVs(e.inf)["p1-a/x"] == "11" })

			hist.list(e.api, "", relistRV)
			hist.list(e.api, "p2-a", nsListRV)
			hist.list(e.api, "p2-b", nsListRV)
			n := 0
			e.api.mu.Lock()
			e.api.failWatch = func(opts metav1.ListOptions) error {
				if !newSelector(opts) || tt.failWatch == nil {
					return nil
				}
				n++
				return tt.failWatch(opts, n)
			}
			e.api.mu.Unlock()
			prepared := e.prepare(2)
			if tt.onReopen != nil {
				waitFor(t, "the reopened watch", func() bool { return e.api.watchCount() >= 2 })
				u := e.api.lastWatch()
				if u.opts.ResourceVersion != strconv.Itoa(hwm) || !newSelector(u.opts) {
					t.Fatalf("reopened watch from %q with selector %q, want from %d with the new selector", u.opts.ResourceVersion, u.opts.ShardSelector, hwm)
				}
				tt.onReopen(t, u)
			}

			from := e.waitFinalWatch(t, tt.minWatches, "p1-a", "p2-a", "p2-b")
			lists := e.f.counters.clusterLists.Load()
			switch {
			case tt.relist && (from != relistRV || lists < 2):
				t.Errorf("recovered with a watch from %d after %d cluster lists, want a relist (a watch from %d)", from, lists, relistRV)
			case !tt.relist && (from != hwm || lists != 1):
				t.Errorf("recovered with a watch from %d after %d cluster lists, want a watch from the high-water mark %d", from, lists, hwm)
			}
			e.hist.replay(t, e.api, from, relistRV)
			waitPrepared(t, prepared)
			e.hist.replay(t, e.api, max(from, relistRV), endRV)
			waitTruth(t, e.inf, e.f, hist.truth(endRV, e.admitted))
			e.rvs.report(t)
			e.api.mu.Lock()
			calls := append([]string(nil), e.api.calls...)
			e.api.mu.Unlock()
			t.Logf("apiserver calls: %v", calls)
		})
	}
}

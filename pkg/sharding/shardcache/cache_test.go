package shardcache

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
)

// listCounter records the namespace of every configmap list call.
type listCounter struct {
	mu  sync.Mutex
	all []string
}

func (l *listCounter) react(action k8stesting.Action) (bool, runtime.Object, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, action.GetNamespace())
	return false, nil, nil
}

func (l *listCounter) count(ns string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.all {
		if x == ns {
			n++
		}
	}
	return n
}

// handlerLog records the events a controller's handler sees.
type handlerLog struct {
	mu     sync.Mutex
	events []string
}

func (h *handlerLog) add(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, s)
}

func (h *handlerLog) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

func keyOf(obj any) string {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Key
	}
	k, _ := toolscache.MetaNamespaceKeyFunc(obj)
	return k
}

func ns(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func cachedNames(t *testing.T, c *Cache) []string {
	t.Helper()
	got, err := configMapLister(c).List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range got {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	sort.Strings(out)
	return out
}

func TestCachePrepareRelease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		ns("p1-a"), ns("p1-b"), ns("p2-a"), ns("other"),
		cm("p1-a", "x", 0), cm("p1-b", "y", 0), cm("p2-a", "z", 0), cm("p2-a", "w", 0), cm("other", "o", 0),
	)
	lists := &listCounter{}
	client.PrependReactor("list", "configmaps", lists.react)

	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := &handlerLog{}
	_, _ = c.InformerFor(ConfigMaps).AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.add("add " + keyOf(obj)) },
		UpdateFunc: func(_, obj any) { h.add("update " + keyOf(obj)) },
		DeleteFunc: func(obj any) { h.add("delete " + keyOf(obj)) },
	})

	// Before Start, Prepare only admits: no list at all.
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	if n := len(lists.all); n != 0 {
		t.Fatalf("Prepare before Start made %d list calls", n)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := cachedNames(t, c), []string{"p1-a/x", "p1-b/y"}; !equalStrings(got, want) {
		t.Fatalf("after start: cached %v, want %v", got, want)
	}
	if !c.Prepared(1) || c.Prepared(2) {
		t.Errorf("Prepared(1)=%v Prepared(2)=%v, want true false", c.Prepared(1), c.Prepared(2))
	}
	clusterLists := lists.count("")

	// Prepare while running: namespace-scoped lists only.
	if err := c.Prepare(ctx, []partition.ID{2}); err != nil {
		t.Fatal(err)
	}
	if got, want := cachedNames(t, c), []string{"p1-a/x", "p1-b/y", "p2-a/w", "p2-a/z"}; !equalStrings(got, want) {
		t.Fatalf("after Prepare(2): cached %v, want %v", got, want)
	}
	if n := lists.count(""); n != clusterLists {
		t.Errorf("Prepare made %d cluster-wide lists", n-clusterLists)
	}
	if n := lists.count("p2-a"); n != 1 {
		t.Errorf("Prepare listed p2-a %d times, want 1", n)
	}
	if n := lists.count("p1-a") + lists.count("other"); n != 0 {
		t.Errorf("Prepare listed namespaces of other partitions %d times", n)
	}
	waitFor(t, "handler adds", func() bool { return h.count("add p2-a/") == 2 })

	// Live events: admitted partitions flow, others are dropped.
	if _, err := client.CoreV1().ConfigMaps("other").Create(ctx, cm("other", "new", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createCached(t, ctx, client, c, "p2-a", "new")
	if _, err := configMapLister(c).ConfigMaps("other").Get("new"); err == nil {
		t.Error("object of a partition that is not admitted was cached")
	}

	// Release: handlers see deletes, the store empties.
	if err := c.Release(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	if got, want := cachedNames(t, c), []string{"p2-a/new", "p2-a/w", "p2-a/z"}; !equalStrings(got, want) {
		t.Fatalf("after Release(1): cached %v, want %v", got, want)
	}
	waitFor(t, "handler deletes", func() bool { return h.count("delete p1-") == 2 })
	if idx, _ := c.InformerFor(ConfigMaps).GetIndexer().IndexKeys(PartitionIndex, PartitionIndexValue(2)); len(idx) != 3 {
		t.Errorf("partition index holds %d objects of partition 2, want 3", len(idx))
	}

	// Prepare again brings the partition back.
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	if got := len(cachedNames(t, c)); got != 5 {
		t.Errorf("after Prepare(1) again: %d objects cached, want 5", got)
	}
	if got := c.CachedObjects(); got["configmaps"] != 5 || got["namespaces"] != 4 {
		t.Errorf("CachedObjects %v, want 5 configmaps and 4 namespaces", got)
	}
	reg := prometheus.NewRegistry()
	if err := c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	want := `# HELP kshard_shard_cached_objects Objects in the shard's informer stores, by resource.
# TYPE kshard_shard_cached_objects gauge
kshard_shard_cached_objects{resource="configmaps"} 5
kshard_shard_cached_objects{resource="namespaces"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kshard_shard_cached_objects"); err != nil {
		t.Error(err)
	}
}

func TestCachePrepareTimesOutAndResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p3-a"), cm("p3-a", "x", 0))
	block := make(chan struct{})
	client.PrependReactor("list", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() == "p3-a" {
			<-block
		}
		return false, nil, nil
	})
	c := startedConfigMapCache(t, ctx, client, Options{})
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := c.Prepare(short, []partition.ID{3}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Prepare with a blocked list returned %v, want a deadline error", err)
	}
	close(block)
	// The warm-up went on in the background; a second Prepare waits for it.
	if err := c.Prepare(ctx, []partition.ID{3}); err != nil {
		t.Fatal(err)
	}
	if got := cachedNames(t, c); !equalStrings(got, []string{"p3-a/x"}) {
		t.Errorf("cached %v, want [p3-a/x]", got)
	}
}

func TestCacheReleaseDuringWarmup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p4-a"), cm("p4-a", "x", 0))
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	client.PrependReactor("list", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() == "p4-a" {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-block
		}
		return false, nil, nil
	})
	c := startedConfigMapCache(t, ctx, client, Options{})
	errc := make(chan error, 1)
	go func() { errc <- c.Prepare(ctx, []partition.ID{4}) }()
	<-entered // the warm-up is listing p4-a
	if err := c.Release(ctx, []partition.ID{4}); err != nil {
		t.Fatal(err)
	}
	close(block)
	if err := <-errc; !errors.Is(err, ErrReleased) {
		t.Errorf("Prepare returned %v, want ErrReleased", err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := cachedNames(t, c); len(got) != 0 {
		t.Errorf("a released partition is cached: %v", got)
	}
}

func TestNewRejectsUnknownMode(t *testing.T) {
	if _, err := New(fake.NewClientset(), testPartition, Options{Mode: Mode(7)}); err == nil {
		t.Error("New with an unknown mode succeeded")
	}
}

func TestNamespacesIndexedByPartition(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := New(fake.NewClientset(ns("p5-a"), ns("p5-b"), ns("p6-a")), testPartition, Options{})
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.NamespacesOf(5); !equalStrings(got, []string{"p5-a", "p5-b"}) {
		t.Errorf("NamespacesOf(5) = %v", got)
	}
	for _, tc := range []struct {
		partition partition.ID
		want      int
	}{{5, 2}, {6, 1}, {7, 0}} {
		if got := c.NamespaceCount(tc.partition); got != tc.want {
			t.Errorf("NamespaceCount(%d) = %d, want %d", tc.partition, got, tc.want)
		}
	}
	if got, _ := corelisters.NewNamespaceLister(c.nsInformer.GetIndexer()).List(labels.Everything()); len(got) != 3 {
		t.Errorf("the namespace informer holds %d namespaces, want all 3", len(got))
	}
}

// TestCacheRewarmsLateNamespace: a namespace the Namespace informer learns about after a
// partition's warm-up enumerated it is listed, unless it is brand new.
func TestCacheRewarmsLateNamespace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	lists := &listCounter{}
	client.PrependReactor("list", "configmaps", lists.react)
	c := startedConfigMapCache(t, ctx, client, Options{})
	if err := c.Prepare(ctx, []partition.ID{7}); err != nil {
		t.Fatal(err)
	}
	old := ns("p7-old")
	old.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	fresh := ns("p7-fresh")
	fresh.CreationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
	for _, n := range []*corev1.Namespace{old, fresh} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "p7-old listed", func() bool { return lists.count("p7-old") == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := lists.count("p7-fresh"); n != 0 {
		t.Errorf("a brand-new namespace was listed %d times", n)
	}
}

// TestCacheRefresh: a partition warmed while another shard still wrote to it. Here the
// ConfigMap watch never brings the changes made after the warm-up (in a shard it brings
// them late, and another informer's watch may be ahead); Refresh lists the partition
// again, so the store shows them before the partition is worked.
func TestCacheRefresh(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p7-a"), ns("p8-a"), cm("p7-a", "x", 0), cm("p7-a", "gone", 0))
	client.PrependWatchReactor("configmaps", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil // a watch that lags forever
	})
	c := startedConfigMapCache(t, ctx, client, Options{})
	if err := c.Prepare(ctx, []partition.ID{7}); err != nil {
		t.Fatal(err)
	}
	if got, want := cachedNames(t, c), []string{"p7-a/gone", "p7-a/x"}; !slices.Equal(got, want) {
		t.Fatalf("warmed %v, want %v", got, want)
	}
	// The previous owner's last writes.
	changed := cm("p7-a", "x", 0)
	changed.Data = map[string]string{"v": "2"}
	if _, err := client.CoreV1().ConfigMaps("p7-a").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("p7-a").Create(ctx, cm("p7-a", "new", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().ConfigMaps("p7-a").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := cachedNames(t, c); !slices.Equal(got, []string{"p7-a/gone", "p7-a/x"}) {
		t.Fatalf("the watch brought the changes (%v): the test shows nothing", got)
	}

	if err := c.Refresh(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got, want := cachedNames(t, c), []string{"p7-a/new", "p7-a/x"}; !slices.Equal(got, want) {
		t.Errorf("after Refresh: %v, want %v", got, want)
	}
	x, err := configMapLister(c).ConfigMaps("p7-a").Get("x")
	if err != nil || x.Data["v"] != "2" {
		t.Errorf("after Refresh x is %+v (%v), want the update", x, err)
	}
	if err := c.Refresh(ctx, 8); !errors.Is(err, ErrReleased) {
		t.Errorf("Refresh of a partition not prepared: %v, want ErrReleased", err)
	}
}

// TestCacheRefreshResumes: a Refresh whose caller gives up leaves its lists running, and
// the caller's next Refresh waits for them instead of listing again (the shard runtime
// retries a Work whose attempt timed out: a refresh that takes longer than one attempt
// must still end).
func TestCacheRefreshResumes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p7-a"), cm("p7-a", "x", 0))
	lists := &listCounter{}
	client.PrependReactor("list", "configmaps", lists.react)
	var block atomic.Bool
	release := make(chan struct{})
	client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "p7-a" && block.Load() {
			<-release
		}
		return false, nil, nil
	})
	c := startedConfigMapCache(t, ctx, client, Options{})
	if err := c.Prepare(ctx, []partition.ID{7}); err != nil {
		t.Fatal(err)
	}
	before := lists.count("p7-a")
	block.Store(true)
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if err := c.Refresh(short, 7); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh with a blocked list: %v, want the caller's deadline", err)
	}
	again := make(chan error, 1)
	go func() { again <- c.Refresh(ctx, 7) }()
	select {
	case err := <-again:
		t.Fatalf("the second Refresh returned %v while the first one's list is blocked", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-again; err != nil {
		t.Fatal(err)
	}
	if n := lists.count("p7-a") - before; n != 1 {
		t.Errorf("p7-a listed %d times by two Refresh calls, want once", n)
	}
}

// TestCacheRemove: removing an informer (its resource is no longer served) stops it,
// releases a Prepare waiting for its warm-up, and lets a later Informer build a fresh one.
func TestCacheRemove(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p7-a"), ns("p8-a"), cm("p7-a", "x", 0), cm("p8-a", "y", 0))
	entered, release := make(chan struct{}, 1), make(chan struct{})
	client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "p8-a" {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return false, nil, nil
	})
	c := startedConfigMapCache(t, ctx, client, Options{})
	if err := c.Prepare(ctx, []partition.ID{7}); err != nil {
		t.Fatal(err)
	}
	old := c.InformerFor(ConfigMaps)
	prepared := make(chan error, 1)
	go func() { prepared <- c.Prepare(ctx, []partition.ID{8}) }()
	<-entered // p8-a's warm-up list is in flight

	if err := c.Remove(ConfigMaps.Key()); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-prepared:
		if err != nil {
			t.Fatalf("Prepare after the informer was removed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prepare still waits for the warm-up of a removed informer")
	}
	if got := c.Resources(); slices.Contains(got, ConfigMaps.Name()) {
		t.Errorf("resources after Remove: %v", got)
	}
	fresh, err := c.Informer(ConfigMaps.Key())
	if err != nil {
		t.Fatal(err)
	}
	if fresh == old {
		t.Fatal("Informer after Remove returned the removed informer")
	}
	waitFor(t, "the new informer lists the admitted partitions", func() bool {
		names := cachedNames(t, c)
		return slices.Equal(names, []string{"p7-a/x", "p8-a/y"})
	})
	if err := c.Remove(Key{Resource: corev1.SchemeGroupVersion.WithResource("namespaces")}); err == nil {
		t.Error("the Namespace informer was removed")
	}
	if err := c.Remove(Key{Resource: corev1.SchemeGroupVersion.WithResource("secrets")}); err != nil {
		t.Errorf("removing an informer the cache does not have: %v", err)
	}
}

// TestCacheOptional: an optional informer whose lists fail (an aggregated API that is
// down) blocks neither the start, nor Prepare, nor readiness; it is reported failing, and
// fills once its lists succeed again. A required one blocks, as before.
func TestCacheOptional(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(ns("p7-a"), ns("p8-a"), cm("p7-a", "x", 0), cm("p8-a", "y", 0))
	var down atomic.Bool
	down.Store(true)
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("the aggregated API is down")
		}
		return false, nil, nil
	})
	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	optional := ConfigMaps
	optional.Optional = true
	inf := c.InformerFor(optional)
	c.Start(ctx)
	bounded, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := c.WaitForCacheSync(bounded); err != nil {
		t.Fatalf("the start waits for a failing optional informer: %v", err)
	}
	if err := c.Prepare(bounded, []partition.ID{7}); err != nil {
		t.Fatalf("Prepare waits for a failing optional informer: %v", err)
	}
	if err := c.Synced([]partition.ID{7}); err != nil {
		t.Errorf("readiness with a failing optional informer: %v", err)
	}
	if got := c.Failing(); got[optional.Name()] == nil {
		t.Errorf("Failing() = %v, want %s", got, optional.Name())
	}

	down.Store(false)
	waitFor(t, "the optional informer lists once its API is back", func() bool {
		_, ok, _ := inf.GetIndexer().GetByKey("p7-a/x")
		return ok && len(c.Failing()) == 0
	})
	// Healthy again, it is waited for: partition 8's ConfigMap is there when Prepare returns.
	if err := c.Prepare(bounded, []partition.ID{8}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := inf.GetIndexer().GetByKey("p8-a/y"); !ok {
		t.Error("Prepare of a healthy optional informer returned before its objects were cached")
	}

	// A required informer whose lists fail blocks Prepare, as it always did.
	down.Store(true)
	c2, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c2.InformerFor(ConfigMaps)
	c2.Start(ctx)
	short, stop2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop2()
	if err := c2.Prepare(short, []partition.ID{7}); err == nil {
		t.Error("Prepare returned while a required informer could not list")
	}
}

// TestCacheRewarmTellsCreations: a namespace that appears just after its partition's
// warm-up is listed again while the partition may be worked (TestCacheRewarmsLateNamespace);
// an object created in it and changed while that list is on its way must reach the
// handlers as created, then changed, as a watch shows it: a Job pod first seen already
// being deleted leaves the Job's creation expectation unmet for five minutes
// (test/integration/batch TestJobPodReplacementFailed).
func TestCacheRewarmTellsCreations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	api := &fakeAPI{t: t, lists: map[string]*corev1.ConfigMapList{}}
	api.setList("", 10)
	entered, release := make(chan struct{}), make(chan struct{})
	api.beforeList = func(namespace string, _ metav1.ListOptions) {
		if namespace == "p7-new" {
			close(entered)
			<-release
		}
	}
	c, err := New(client, testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := &handlerLog{}
	_, _ = c.InformerFor(api.resourceType()).AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.add("add " + describe(obj.(runtime.Object))) },
		UpdateFunc: func(_, obj any) { h.add("update " + describe(obj.(runtime.Object))) },
		DeleteFunc: func(obj any) { h.add("delete " + keyOf(obj)) },
	})
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Prepare(ctx, []partition.ID{7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch", func() bool { return api.watchCount() > 0 })

	n := ns("p7-new")
	n.CreationTimestamp = metav1.Now()
	if _, err := client.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-entered // the namespace's events are buffered until its list is merged
	up := api.lastWatch()
	up.send(watch.Added, cm("p7-new", "x", 11))
	up.send(watch.Modified, cm("p7-new", "x", 12))
	waitHWM(t, c.feedList()[0], 12)
	api.setList("p7-new", 12, cm("p7-new", "x", 12))
	close(release)

	waitFor(t, "the handler told of p7-new/x@12", func() bool {
		return h.count("add p7-new/x@12")+h.count("update p7-new/x@12") > 0
	})
	h.mu.Lock()
	got := slices.Clone(h.events)
	h.mu.Unlock()
	if want := []string{"add p7-new/x@11", "update p7-new/x@12"}; !equalStrings(got, want) {
		t.Errorf("handler saw %v, want %v", got, want)
	}
}

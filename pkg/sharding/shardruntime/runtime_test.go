package shardruntime

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

// testPartition maps "pN-…" namespaces to partition N and everything else to 99.
func testPartition(ns string) partition.ID {
	if strings.HasPrefix(ns, "p") {
		if i := strings.IndexByte(ns, '-'); i > 1 {
			if n, err := strconv.Atoi(ns[1:i]); err == nil {
				return partition.ID(n)
			}
		}
	}
	return 99
}

// fakeController records the keys the runtime enqueues into its queue.
type fakeController struct {
	mu       sync.Mutex
	enqueued []string
	ran      bool
}

func (f *fakeController) Run(ctx context.Context) {
	f.mu.Lock()
	f.ran = true
	f.mu.Unlock()
	<-ctx.Done()
}

func (f *fakeController) Add(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enqueued = append(f.enqueued, key)
}

// calls returns the enqueued keys, sorted.
func (f *fakeController) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.enqueued)
	slices.Sort(out)
	return out
}

// runtimeController is ctrl as the runtime sees it: ConfigMaps are its primary objects.
func runtimeController(ctrl *fakeController) Controller {
	return Controller{Name: "fake", Queues: []Queue{{Name: "fake", Queue: ctrl, Primary: []shardcache.Key{shardcache.ConfigMaps.Key()}}}, Run: ctrl.Run}
}

// blocker holds configmap lists of one namespace until released.
type blocker struct {
	ns      string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocker(ns string) *blocker {
	return &blocker{ns: ns, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (b *blocker) react(action k8stesting.Action) (bool, k8sruntime.Object, error) {
	if action.GetNamespace() == b.ns {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		<-b.release
	}
	return false, nil, nil
}

func (b *blocker) open() { b.once.Do(func() { close(b.release) }) }

type env struct {
	t     *testing.T
	cache *shardcache.Cache
	gate  *gate.Gate
	ctrl  *fakeController
	rt    *Runtime
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// world is the cluster of every test: partition 3 has two namespaces, 5 and 7 one each.
func world() []k8sruntime.Object {
	return []k8sruntime.Object{
		namespace("p3-a"), namespace("p3-b"), namespace("p5-a"), namespace("p7-a"), namespace("other"),
		configMap("p3-a", "x"), configMap("p3-a", "y"), configMap("p3-b", "z"),
		configMap("p5-a", "v"), configMap("p7-a", "w"), configMap("other", "o"),
	}
}

// newEnv builds a runtime over a fake cluster and runs it until the test ends. A non-nil
// b blocks configmap lists of its namespace.
func newEnv(t *testing.T, b *blocker) *env {
	t.Helper()
	client := fake.NewClientset(world()...)
	if b != nil {
		client.PrependReactor("list", "configmaps", b.react)
		t.Cleanup(b.open)
	}
	return newEnvOver(t, client)
}

// newEnvOver builds a runtime over client's cluster (world's objects, reactors the test
// adds) and runs it until the test ends.
func newEnvOver(t *testing.T, client *fake.Clientset) *env {
	t.Helper()
	c, err := shardcache.New(client, testPartition, shardcache.Options{PollInterval: 5 * time.Millisecond, StartWindow: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(shardcache.ConfigMaps) // register before Start, as controllers do
	g := gate.New(gate.NamespaceNameKeys(testPartition))
	ctrl := &fakeController{}
	e := runEnv(t, c, g, []Controller{runtimeController(ctrl)})
	e.ctrl = ctrl
	return e
}

// runEnv builds a runtime of ctrls over c and g and runs it until the test ends.
func runEnv(t *testing.T, c *shardcache.Cache, g *gate.Gate, ctrls []Controller) *env {
	t.Helper()
	return runEnvWith(t, c, g, ctrls, nil)
}

// runEnvWith is runEnv with a load meter (nil: none).
func runEnvWith(t *testing.T, c *shardcache.Cache, g *gate.Gate, ctrls []Controller, meter *loadmeter.Meter) *env {
	t.Helper()
	rt, err := New(c, g, ctrls, Options{RetryInterval: 10 * time.Millisecond, Meter: meter}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		rt.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	e := &env{t: t, cache: c, gate: g, rt: rt}
	// Actions arrive once the runtime runs (the session starts after Run).
	e.eventually("Run sets the context", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.ctx != nil
	})
	return e
}

const waitFor = 1500 * time.Millisecond

// eventually polls cond until it holds or the deadline passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// never checks that cond stays false for a short while.
func (e *env) never(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		if cond() {
			e.t.Fatalf("unexpectedly %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// idle waits until no operation of p is queued or running.
func (e *env) idle(p partition.ID) {
	e.t.Helper()
	e.eventually("partition "+strconv.Itoa(int(p))+" has no queued operation", func() bool {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		return e.rt.serial[p] == nil
	})
}

// cached returns the cached configmaps of partition p as "namespace/name", sorted.
func (e *env) cached(p partition.ID) []string {
	objs, err := corelisters.NewConfigMapLister(e.cache.InformerFor(shardcache.ConfigMaps).GetIndexer()).List(labels.Everything())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		if testPartition(o.Namespace) == p {
			out = append(out, o.Namespace+"/"+o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// doneRecorder is a done callback that snapshots the partition's cache when called.
type doneRecorder struct {
	called   atomic.Bool
	mu       sync.Mutex
	snapshot []string
}

func (e *env) doneFor(p partition.ID) (*doneRecorder, func()) {
	d := &doneRecorder{}
	return d, func() {
		snap := e.cached(p)
		d.mu.Lock()
		d.snapshot = snap
		d.mu.Unlock()
		if d.called.Swap(true) {
			e.t.Errorf("done of partition %d called twice", p)
		}
	}
}

func (d *doneRecorder) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.snapshot
}

var (
	p3Objects = []string{"p3-a/x", "p3-a/y", "p3-b/z"}
	p5Objects = []string{"p5-a/v"}
)

func TestWarmThenWork(t *testing.T) {
	tests := []struct {
		name string
		// beforeStart: the partition is warmed within the first StartWindow, so the
		// informers' first list fills it; otherwise it is warmed while they run.
		beforeStart bool
		p           partition.ID
		wantObjects []string
		wantKeys    []string
	}{
		{name: "warmed by the first list", beforeStart: true, p: 3, wantObjects: p3Objects, wantKeys: p3Objects},
		{name: "warmed while running", p: 5, wantObjects: p5Objects, wantKeys: p5Objects},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBlocker("p5-a")
			e := newEnv(t, b)
			if !tc.beforeStart {
				// Start the informers with another partition first.
				e.rt.Warm(7, func() {})
				e.eventually("the informers run", e.cache.Started)
				e.idle(7)
			}
			d, done := e.doneFor(tc.p)
			e.rt.Warm(tc.p, done)
			if !tc.beforeStart {
				<-b.entered
				e.never("done is called while the warm-up list is blocked", d.called.Load)
			}
			b.open()
			e.eventually("done is called", d.called.Load)
			if got := d.seen(); !slices.Equal(got, tc.wantObjects) {
				t.Errorf("cached when done was called: %v, want %v", got, tc.wantObjects)
			}
			if slices.Contains(e.gate.Partitions(), tc.p) {
				t.Errorf("Warm acquired partition %d", tc.p)
			}
			if got := e.ctrl.calls(); len(got) != 0 {
				t.Errorf("Warm enqueued %v", got)
			}

			e.rt.Work(tc.p, false)
			e.eventually("Work acquires the partition", func() bool { return slices.Contains(e.gate.Partitions(), tc.p) })
			e.idle(tc.p)
			if got := e.ctrl.calls(); !slices.Equal(got, tc.wantKeys) {
				t.Errorf("enqueued keys %v, want %v", got, tc.wantKeys)
			}
			if got := e.gate.Partitions(); !slices.Equal(got, []partition.ID{tc.p}) {
				t.Errorf("acquired partitions %v, want [%d]", got, tc.p)
			}
			if err := e.rt.Synced(); err != nil {
				t.Errorf("Synced: %v", err)
			}
		})
	}
}

// TestWorkRefresh: Work with refresh (a partition warmed while its previous owner still
// wrote) lists the partition again, and acquires it only after that list.
func TestWorkRefresh(t *testing.T) {
	tests := []struct {
		name    string
		refresh bool
		// wantLists: whether p5-a's configmap list found partition 5 acquired, per list.
		wantLists []bool
	}{
		{name: "without", wantLists: []bool{false}},
		{name: "with", refresh: true, wantLists: []bool{false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(world()...)
			var mu sync.Mutex
			var lists []bool
			var g atomic.Pointer[gate.Gate]
			client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
				if a.GetNamespace() == "p5-a" {
					mu.Lock()
					lists = append(lists, slices.Contains(g.Load().Partitions(), 5))
					mu.Unlock()
				}
				return false, nil, nil
			})
			e := newEnvOver(t, client)
			g.Store(e.gate)
			e.rt.Warm(7, func() {})
			e.eventually("the informers run", e.cache.Started)
			e.idle(7)
			d, done := e.doneFor(5)
			e.rt.Warm(5, done)
			e.eventually("partition 5 is warm", d.called.Load)

			e.rt.Work(5, tc.refresh)
			e.eventually("Work acquires the partition", func() bool { return slices.Contains(e.gate.Partitions(), 5) })
			e.idle(5)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(lists, tc.wantLists) {
				t.Errorf("lists of p5-a (acquired at the time) %v, want %v", lists, tc.wantLists)
			}
			if got := e.ctrl.calls(); !slices.Equal(got, p5Objects) {
				t.Errorf("enqueued keys %v, want %v", got, p5Objects)
			}
		})
	}
}

func TestWorkWithoutWarmWaitsForCaches(t *testing.T) {
	b := newBlocker("p5-a")
	e := newEnv(t, b)
	e.rt.Warm(7, func() {})
	e.eventually("the informers run", e.cache.Started)
	e.rt.Work(5, false)
	<-b.entered
	e.never("partition 5 is acquired before its caches are synced", func() bool { return slices.Contains(e.gate.Partitions(), 5) })
	if got := e.ctrl.calls(); len(got) != 0 {
		t.Errorf("enqueued %v before the caches were synced", got)
	}
	b.open()
	e.eventually("Work acquires the partition", func() bool { return slices.Contains(e.gate.Partitions(), 5) })
	e.idle(5)
	if got := e.cached(5); !slices.Equal(got, p5Objects) {
		t.Errorf("cached %v, want %v", got, p5Objects)
	}
	if got := e.ctrl.calls(); !slices.Equal(got, p5Objects) {
		t.Errorf("enqueued %v, want %v", got, p5Objects)
	}
}

func TestOperationsRunInOrder(t *testing.T) {
	t.Run("Work then Stop", func(t *testing.T) {
		b := newBlocker("p5-a")
		e := newEnv(t, b)
		e.rt.Warm(7, func() {})
		e.eventually("the informers run", e.cache.Started)
		e.rt.Work(5, false) // waits for the blocked warm-up
		<-b.entered
		e.rt.Stop(5)
		if slices.Contains(e.gate.Partitions(), 5) {
			t.Fatal("partition 5 acquired right after Stop")
		}
		b.open()
		// The queued Work runs (it enqueues), then the queued Stop revokes again.
		e.eventually("the queued Work runs", func() bool { return len(e.ctrl.calls()) > 0 })
		e.idle(5)
		if slices.Contains(e.gate.Partitions(), 5) {
			t.Error("partition 5 is acquired after Work, Stop: the queued Work re-acquired it")
		}
		if got := e.cached(5); !slices.Equal(got, p5Objects) {
			t.Errorf("Stop dropped caches: cached %v, want %v", got, p5Objects)
		}
	})

	t.Run("Work waiting for its caches, then Drain", func(t *testing.T) {
		b := newBlocker("p5-a")
		e := newEnv(t, b)
		e.rt.Warm(7, func() {})
		e.eventually("the informers run", e.cache.Started)
		e.rt.Work(5, false) // waits for the blocked warm-up
		<-b.entered
		d, done := e.doneFor(5)
		e.rt.Drain(5, done)
		b.open()
		e.eventually("the drain reports done", d.called.Load)
		e.idle(5)
		if slices.Contains(e.gate.Partitions(), 5) {
			t.Error("partition 5 is acquired after Work, Drain: the Work waiting for its caches re-acquired it")
		}
		if got := e.ctrl.calls(); len(got) != 0 {
			t.Errorf("the abandoned Work enqueued %v", got)
		}
	})

	t.Run("Work then Stop back to back", func(t *testing.T) {
		e := newEnv(t, nil)
		for _, p := range []partition.ID{3, 5, 7} {
			e.rt.Work(p, false)
			e.rt.Stop(p)
		}
		for _, p := range []partition.ID{3, 5, 7} {
			e.idle(p)
		}
		if got := e.gate.Partitions(); len(got) != 0 {
			t.Errorf("acquired partitions %v after Work, Stop of each", got)
		}
	})

	t.Run("Work then Drop", func(t *testing.T) {
		e := newEnv(t, nil)
		e.rt.Work(3, false)
		e.rt.Work(5, false)
		e.rt.Drop(3)
		e.idle(3)
		e.idle(5)
		if slices.Contains(e.gate.Partitions(), 3) {
			t.Error("partition 3 acquired after Drop")
		}
		if got := e.cached(3); len(got) != 0 {
			t.Errorf("dropped partition 3 still cached: %v", got)
		}
		if slices.Contains(e.cache.Admitted(), 3) {
			t.Errorf("dropped partition 3 still admitted: %v", e.cache.Admitted())
		}
		if !slices.Contains(e.gate.Partitions(), 5) || !slices.Equal(e.cached(5), p5Objects) {
			t.Errorf("partition 5 affected by dropping 3: acquired %v, cached %v", slices.Contains(e.gate.Partitions(), 5), e.cached(5))
		}
	})

	t.Run("Drop then Warm", func(t *testing.T) {
		e := newEnv(t, nil)
		d1, done1 := e.doneFor(5)
		e.rt.Warm(5, done1)
		e.eventually("the first warm-up is done", d1.called.Load)
		d2, done2 := e.doneFor(5)
		e.rt.Drop(5)
		e.rt.Warm(5, done2)
		e.eventually("the second warm-up is done", d2.called.Load)
		e.idle(5)
		// Had the warm-up run first, the drop would have emptied the cache after it.
		if got := d2.seen(); !slices.Equal(got, p5Objects) {
			t.Errorf("cached when done was called: %v, want %v", got, p5Objects)
		}
		if got := e.cached(5); !slices.Equal(got, p5Objects) {
			t.Errorf("cached after Drop, Warm: %v, want %v", got, p5Objects)
		}
	})
}

func TestDrainWaitsForInFlightWork(t *testing.T) {
	e := newEnv(t, nil)
	q := e.gate.NewQueue(gate.QueueConfig{Name: "test"})
	defer q.ShutDown()
	e.rt.Work(3, false)
	e.rt.Work(5, false)
	e.eventually("partitions 3 and 5 are acquired", func() bool { return slices.Contains(e.gate.Partitions(), 3) && slices.Contains(e.gate.Partitions(), 5) })
	q.Add("p3-a/x")
	key, shutdown := q.Get()
	if shutdown || key != "p3-a/x" {
		t.Fatalf("Get = %q, %v", key, shutdown)
	}

	var drained atomic.Bool
	e.rt.Drain(3, func() { drained.Store(true) })
	if slices.Contains(e.gate.Partitions(), 3) {
		t.Error("partition 3 still acquired right after Drain")
	}
	q.Add("p3-a/y")
	if s := q.Stats(); s.Dropped != 1 {
		t.Errorf("a key of a draining partition was admitted: %+v", s)
	}
	e.never("done is called while a key of the partition is in flight", drained.Load)
	if !slices.Contains(e.gate.Partitions(), 5) {
		t.Error("draining 3 revoked 5")
	}
	q.Done(key)
	e.eventually("done is called once the in-flight key is done", drained.Load)
	e.idle(3)
	if got := e.cached(3); !slices.Equal(got, p3Objects) {
		t.Errorf("Drain dropped caches: %v, want %v", got, p3Objects)
	}
}

func TestStats(t *testing.T) {
	e := newEnv(t, nil)
	q := e.gate.NewQueue(gate.QueueConfig{Name: "test"})
	defer q.ShutDown()
	wantKeys := 5 // namespaces are cached unfiltered

	type want struct {
		acquired, prepared int
		namespaces         int
		cached             int
		depth              int
	}
	check := func(step string, w want) {
		t.Helper()
		s := e.rt.Stats()
		got := want{s.AcquiredPartitions, s.PreparedPartitions, s.Namespaces, s.CachedObjects, s.QueueDepth}
		if got != w {
			t.Errorf("%s: stats %+v, want %+v", step, got, w)
		}
		if s.Fenced {
			t.Errorf("%s: fenced", step)
		}
	}
	check("empty", want{cached: 0})

	w3, done3 := e.doneFor(3)
	e.rt.Warm(3, done3)
	e.rt.Warm(5, func() {})
	e.rt.Work(5, false)
	e.eventually("3 is warm", w3.called.Load)
	e.idle(3)
	e.idle(5)
	check("3 warm, 5 worked", want{acquired: 1, prepared: 1, namespaces: 1, cached: wantKeys + 4})

	e.rt.Work(3, false)
	e.idle(3)
	q.Add("p3-a/x")
	q.Add("p5-a/v")
	q.Add("p7-a/w") // not acquired: dropped
	check("3 and 5 worked", want{acquired: 2, namespaces: 3, cached: wantKeys + 4, depth: 2})

	e.rt.Stop(5)
	e.idle(5)
	check("5 stopped", want{acquired: 1, prepared: 1, namespaces: 2, cached: wantKeys + 4, depth: 2})

	e.rt.Drop(5)
	e.idle(5)
	check("5 dropped", want{acquired: 1, namespaces: 2, cached: wantKeys + 3, depth: 2})
}

func TestSetDeadline(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name       string
		deadline   time.Time
		wantFenced bool
	}{
		{name: "no lease", wantFenced: false},
		{name: "future", deadline: time.Now().Add(time.Hour), wantFenced: false},
		{name: "past", deadline: time.Now().Add(-time.Second), wantFenced: true},
		{name: "extended again", deadline: time.Now().Add(time.Hour), wantFenced: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.rt.SetDeadline(tc.deadline)
			if !e.gate.Deadline().Equal(tc.deadline) {
				t.Errorf("gate deadline %v, want %v", e.gate.Deadline(), tc.deadline)
			}
			if got := e.gate.Fenced(); got != tc.wantFenced {
				t.Errorf("Fenced() = %v, want %v", got, tc.wantFenced)
			}
			if got := e.rt.Stats().Fenced; got != tc.wantFenced {
				t.Errorf("Stats().Fenced = %v, want %v", got, tc.wantFenced)
			}
			if err := gate.WriteAllowed(e.gate); (err != nil) != tc.wantFenced {
				t.Errorf("WriteAllowed = %v, want fenced %v", err, tc.wantFenced)
			}
		})
	}
}

func TestRunStartsControllers(t *testing.T) {
	e := newEnv(t, nil)
	e.eventually("the controller runs with its workers", func() bool {
		e.ctrl.mu.Lock()
		defer e.ctrl.mu.Unlock()
		return e.ctrl.ran
	})
	if e.cache.Started() {
		t.Error("informers started before any Warm or Work")
	}
	if err := e.rt.Synced(); err != nil {
		t.Errorf("Synced with nothing acquired: %v", err)
	}
}

// TestDropDoesNotWaitForAStuckWarmup: a warm-up that cannot finish must not hold back the
// Drop of its partition; the abandoned warm-up never reports synced.
func TestDropDoesNotWaitForAStuckWarmup(t *testing.T) {
	b := newBlocker("p5-a")
	e := newEnv(t, b)
	e.rt.Warm(7, func() {})
	e.eventually("the informers run", e.cache.Started)
	d, done := e.doneFor(5)
	e.rt.Warm(5, done)
	<-b.entered // the warm-up's list is stuck
	e.rt.Drop(5)
	e.eventually("partition 5 is no longer admitted although its warm-up is stuck", func() bool {
		return !slices.Contains(e.cache.Admitted(), 5)
	})
	b.open()
	e.idle(5)
	if d.called.Load() {
		t.Error("the abandoned warm-up reported its partition synced after the Drop")
	}
}

// TestWarmBeforeRunStartsInformers: actions that arrive before Run still start the
// informers once Run is called.
func TestWarmBeforeRunStartsInformers(t *testing.T) {
	client := fake.NewClientset(world()...)
	c, err := shardcache.New(client, testPartition, shardcache.Options{PollInterval: 5 * time.Millisecond, StartWindow: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(shardcache.ConfigMaps)
	g := gate.New(gate.NamespaceNameKeys(testPartition))
	rt, err := New(c, g, nil, Options{RetryInterval: 10 * time.Millisecond}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	var synced atomic.Bool
	rt.Warm(3, func() { synced.Store(true) })

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); rt.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	e := &env{t: t, cache: c, gate: g, rt: rt}
	e.eventually("a Warm issued before Run is synced", synced.Load)
}

// TestFurtherQueueFollowsHandoff: a controller's second queue (of pods, beside its
// ConfigMap queue) is handed off as its first is: on acquire it is filled with the keys
// of the partition's cached pods; on a release its keys of the partition are refused
// and discarded, and the release waits for its key in flight; a revocation cancels its
// key in flight and fences that key's writes.
func TestFurtherQueueFollowsHandoff(t *testing.T) {
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	client := fake.NewClientset(append(world(), pod("p3-a", "pa"), pod("p3-b", "pb"), pod("p5-a", "pc"), pod("p7-a", "pd"))...)
	c, err := shardcache.New(client, testPartition, shardcache.Options{PollInterval: 5 * time.Millisecond, StartWindow: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(shardcache.ConfigMaps)
	c.InformerFor(shardcache.Pods)
	g := gate.New(gate.NamespaceNameKeys(testPartition))
	first, second := g.NewQueue(gate.QueueConfig{Name: "two"}), g.NewQueue(gate.QueueConfig{Name: "two_pods"})
	t.Cleanup(first.ShutDown)
	t.Cleanup(second.ShutDown)
	e := runEnv(t, c, g, []Controller{{Name: "two", Queues: []Queue{
		{Name: "two", Queue: first, Primary: []shardcache.Key{shardcache.ConfigMaps.Key()}},
		{Name: "two_pods", Queue: second, Primary: []shardcache.Key{shardcache.Pods.Key()}},
	}, Run: func(ctx context.Context) { <-ctx.Done() }}})

	e.rt.Work(3, false)
	e.idle(3)
	if s := first.Stats(); s.Pending != len(p3Objects) {
		t.Errorf("first queue after acquiring 3: %+v, want %d keys pending", s, len(p3Objects))
	}
	if s := second.Stats(); s.Pending != 2 {
		t.Fatalf("second queue after acquiring 3: %+v, want 2 keys pending (p3-a/pa, p3-b/pb)", s)
	}
	key, shutdown := second.Get()
	if shutdown || key != "p3-a/pa" {
		t.Fatalf("second queue's Get = %q, %v; want p3-a/pa", key, shutdown)
	}
	e.rt.Work(5, false)
	e.idle(5)

	var drained atomic.Bool
	e.rt.Drain(3, func() { drained.Store(true) })
	second.Add("p3-a/pa")
	if s := second.Stats(); s.Dropped != 1 || s.Stale != 1 || s.Pending != 1 || s.InFlight != 1 {
		t.Errorf("second queue while 3 drains: %+v, want 1 dropped, 1 stale (p3-b/pb), 1 pending (p5-a/pc), 1 in flight", s)
	}
	e.never("the drain is done while the second queue's key of 3 is in flight", drained.Load)
	second.Done(key)
	e.eventually("the drain is done once the second queue's key is done", drained.Load)

	key, shutdown = second.Get()
	if shutdown || key != "p5-a/pc" {
		t.Fatalf("second queue's Get after draining 3 = %q, %v; want p5-a/pc (p3-b/pb discarded)", key, shutdown)
	}
	if s := second.Stats(); s.Discarded != 1 || s.Stale != 0 {
		t.Errorf("second queue after draining 3: %+v, want 1 discarded, none stale", s)
	}
	ctx, cancel := second.KeyContext(context.Background(), key)
	defer cancel()
	if err := g.WriteAllowedFor(key); err != nil {
		t.Errorf("write of %s before the revocation: %v", key, err)
	}
	e.rt.Stop(5)
	e.eventually("the revocation cancels the second queue's key in flight", func() bool { return ctx.Err() != nil })
	if err := g.WriteAllowedFor(key); err == nil {
		t.Errorf("write of %s allowed after its partition was revoked", key)
	}
	second.Done(key)
}

// TestResyncOnAcquire: a controller with Resync is told, on each acquire, the acquired
// partition's namespaces and whether it is the cluster partition, after the gate admits
// its keys (what it adds is not dropped).
func TestResyncOnAcquire(t *testing.T) {
	client := fake.NewClientset(world()...)
	c, err := shardcache.New(client, testPartition, shardcache.Options{PollInterval: 5 * time.Millisecond, StartWindow: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(shardcache.ConfigMaps)
	g := gate.New(gate.NamespaceNameKeys(testPartition))
	q := g.NewQueue(gate.QueueConfig{Name: "gc"})
	t.Cleanup(q.ShutDown)
	type call struct {
		namespaces []string
		cluster    bool
	}
	calls := make(chan call, 4)
	e := runEnv(t, c, g, []Controller{{Name: "gc",
		Resync: func(namespaces []string, cluster bool) {
			sort.Strings(namespaces)
			for _, ns := range namespaces {
				q.Add(ns + "/uid")
			}
			calls <- call{namespaces, cluster}
		},
		Run: func(ctx context.Context) { <-ctx.Done() }}})

	e.rt.Work(3, false)
	e.idle(3)
	got := <-calls
	if !slices.Equal(got.namespaces, []string{"p3-a", "p3-b"}) || got.cluster != (c.ClusterPartition() == 3) {
		t.Errorf("Resync of partition 3 = %+v, want namespaces [p3-a p3-b], cluster %v", got, c.ClusterPartition() == 3)
	}
	if s := q.Stats(); s.Pending != 2 || s.Dropped != 0 {
		t.Errorf("queue after Resync: %+v, want its 2 keys pending, none dropped", s)
	}
	cp := c.ClusterPartition()
	e.rt.Work(cp, false)
	e.idle(cp)
	if got := <-calls; !got.cluster {
		t.Errorf("Resync of the cluster partition %d = %+v, want cluster", cp, got)
	}
}

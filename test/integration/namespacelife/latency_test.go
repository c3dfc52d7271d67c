package namespacelife

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/test/framework"
)

// The latency goal: a new namespace has its default ServiceAccount and kube-root-ca.crt
// within this long, at the 99th percentile. BenchmarkNewNamespaceLatency (make bench)
// measures against it; the test only logs whether it was met.
const latencyGoal = time.Second

// stuckBound is what the test fails at: a p99 this far above the goal is a namespace that
// waited for something other than a busy machine (a missed event, a handoff that lost it).
const stuckBound = 10 * latencyGoal

// Sizes of the latency measurement.
const (
	// loadNamespaces exist before the measurement, with loadWriters writing ConfigMaps in
	// them throughout (about loadWritesPerSecond in all): the shards' caches and queues
	// are not idle.
	loadNamespaces      = 60
	loadWriters         = 4
	loadWritesPerSecond = 40
	// minMeasured namespaces at least are measured: before the scale-out, while it
	// moves partitions, and after.
	minMeasured = 120
	// createInterval paces the creates before and after the handoff; during it,
	// handoffCreators create as fast as they can.
	createInterval  = 100 * time.Millisecond
	handoffCreators = 4
	// handoffMax bounds the creates during the handoff.
	handoffMax = 200
)

// TestNewNamespaceLatency checks, with three shards on a loaded cluster scaled 3→4 while
// namespaces are being created, that every new namespace gets its default ServiceAccount
// and kube-root-ca.crt, also those created in partitions being handed over. It fails when
// p99 is above stuckBound, or when no namespace was created in a moving partition (the
// handoff would not be tested); the 1 s goal is measured by BenchmarkNewNamespaceLatency,
// not by a timed test.
func TestNewNamespaceLatency(t *testing.T) {
	r := measureNewNamespaceLatency(t)
	if r.p99 > latencyGoal {
		t.Logf("p99 %s is above the goal of %s (this test fails only above %s; make bench measures the goal)", r.p99, latencyGoal, stuckBound)
	}
	if r.p99 > stuckBound {
		t.Errorf("p99 %s is above %s", r.p99, stuckBound)
	}
}

// BenchmarkNewNamespaceLatency measures what TestNewNamespaceLatency checks and reports the
// new-namespace latency's p50, p99 and max (ms), and whether p99 met the 1 s goal
// (goal_met 1 or 0). One iteration is one measurement: run it with -benchtime=1x.
func BenchmarkNewNamespaceLatency(b *testing.B) {
	for range b.N {
		r := measureNewNamespaceLatency(b)
		b.ReportMetric(float64(r.p50.Milliseconds()), "p50-ms")
		b.ReportMetric(float64(r.p99.Milliseconds()), "p99-ms")
		b.ReportMetric(float64(r.max.Milliseconds()), "max-ms")
		b.ReportMetric(float64(r.moving), "moving-namespaces")
		met := 0.0
		if r.p99 <= latencyGoal {
			met = 1
		}
		b.ReportMetric(met, "goal_met")
	}
}

// latencyResult is one measurement's distribution.
type latencyResult struct {
	p50, p99, max time.Duration
	// moving counts the namespaces created in a partition that was being handed over.
	moving int
}

// measureNewNamespaceLatency times, from just before its create to the moment a watch sees
// the later of the two, how long each new namespace waits for its default ServiceAccount
// and kube-root-ca.crt, with three shards on a loaded cluster, scaling the shards 3→4 while
// namespaces are being created so that some are created in partitions being handed over.
// It logs the distribution and fails tb when fewer than 100 namespaces were measured, when
// none was created in a moving partition, or when a namespace never got both.
func measureNewNamespaceLatency(tb testing.TB) latencyResult {
	t := tb
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the controllers: there is no handoff to measure (" + c.String() + ")")
	}
	k := c.KShard
	f := framework.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := fmt.Sprintf("lat-%d", time.Now().UnixNano()%1e6)
	// Registered first, so it runs after every namespace's own delete: the few hundred
	// namespaces this test made are gone before the package's other tests run, which would
	// otherwise share the API server (and each shard's namespace workers) with their
	// deletion, a minute of deletecollection calls.
	t.Cleanup(func() { waitNamespacesGone(t, f, "e2e-"+run+"-", 3*time.Minute) })

	// The load: namespaces with ConfigMaps rewritten all along.
	var loadNS []string
	for i := range loadNamespaces {
		ns := createNamespace(t, f, fmt.Sprintf("e2e-%s-load-%d", run, i))
		loadNS = append(loadNS, ns)
	}
	var loadWrites atomic.Int64
	var loadWG sync.WaitGroup
	for w := range loadWriters {
		loadWG.Add(1)
		go func() {
			defer loadWG.Done()
			tick := time.NewTicker(time.Second * loadWriters / loadWritesPerSecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				ns := loadNS[(w*7919+i)%len(loadNS)]
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", i%20)},
					Data: map[string]string{"i": fmt.Sprint(i)}}
				if _, err := f.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					_, _ = f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
				}
				loadWrites.Add(1)
			}
		}()
	}
	defer loadWG.Wait()
	defer cancel()

	// What the controllers write, seen by two cluster-wide watches.
	seen := newArrivals()
	watchFirst(t, ctx, seen, "serviceaccounts", func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return f.Client.CoreV1().ServiceAccounts("").Watch(ctx, o)
	}, "default")
	watchFirst(t, ctx, seen, "configmaps", func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return f.Client.CoreV1().ConfigMaps("").Watch(ctx, o)
	}, rootCAName)

	var (
		mu      sync.Mutex
		created = map[string]time.Time{}
		moving  []string // created in a partition that was moving, or moved after
		ownerAt = map[string]coordinatorrpc.Owner{}
		seq     atomic.Int64
	)
	create := func(phase string) {
		name := fmt.Sprintf("e2e-%s-%s-%d", run, phase, seq.Add(1))
		start := time.Now()
		createNamespace(t, f, name)
		o, err := k.NamespaceOwner(ctx, name)
		mu.Lock()
		defer mu.Unlock()
		created[name] = start
		if err == nil {
			ownerAt[name] = o
		}
	}

	// Before: three shards.
	for range minMeasured / 3 {
		create("before")
		time.Sleep(createInterval)
	}
	// During: a fourth shard takes partitions over while creates run flat out.
	extra := k.StartShard(fmt.Sprintf("shard-lat-%d", time.Now().UnixNano()%1e4))
	scaled := time.Now()
	var during atomic.Int64
	var cw sync.WaitGroup
	done := make(chan struct{})
	for range handoffCreators {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for during.Add(1) <= handoffMax {
				select {
				case <-done:
					return
				default:
				}
				create("during")
			}
		}()
	}
	k.WaitAllOwned(t, 90*time.Second)
	close(done)
	cw.Wait()
	converged := time.Since(scaled)
	// A namespace created in a partition being handed over: its owner at creation was in
	// a handoff state, or is not its owner now.
	for name, was := range ownerAt {
		now, err := k.NamespaceOwner(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if was.State != "owned" || now.Shard != was.Shard {
			moving = append(moving, fmt.Sprintf("%s (partition %d: %s by %s at creation, now %s)", name, was.Partition, was.State, was.Shard, now.Shard))
		}
	}
	// After: four shards, up to the count.
	for len(createdSnapshot(&mu, created)) < minMeasured || time.Since(scaled) < converged+3*time.Second {
		create("after")
		time.Sleep(createInterval)
	}

	// Back to three shards before the other tests: the fourth hands its partitions back.
	t.Cleanup(func() {
		_ = extra.Signal(syscall.SIGTERM)
		if ended, _ := extra.Wait(90 * time.Second); !ended {
			t.Errorf("%s did not leave within 90s", extra.Name)
		}
		k.WaitAllOwned(t, 90*time.Second)
	})

	// Every namespace gets both; the latency is the later arrival's.
	names := createdSnapshot(&mu, created)
	framework.Eventually(t, 60*time.Second, "every measured namespace has its ServiceAccount and kube-root-ca.crt", func(context.Context) (bool, error) {
		for _, n := range names {
			if _, ok := seen.both(n); !ok {
				return false, fmt.Errorf("namespace %s: ServiceAccount %v, kube-root-ca.crt %v", n, seen.has("serviceaccounts", n), seen.has("configmaps", n))
			}
		}
		return true, nil
	})
	var lat []time.Duration
	var worst string
	for _, n := range names {
		at, _ := seen.both(n)
		d := at.Sub(created[n])
		lat = append(lat, d)
		if d == slices.Max(lat) {
			worst = n
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*q))] }
	t.Logf("new namespace → default ServiceAccount and kube-root-ca.crt, %d namespaces (%d created during the 3→4 scale-out, %d of them in a moving partition; assignment converged %s after the 4th shard started; %d load writes over %d load namespaces): p50 %s, p99 %s, max %s (%s)",
		len(lat), min(during.Load(), handoffMax), len(moving), converged.Round(time.Millisecond), loadWrites.Load(), loadNamespaces,
		p(0.50).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), worst)
	if len(moving) > 0 {
		t.Logf("created in a moving partition: %v", moving)
	}
	if len(lat) < 100 {
		t.Errorf("measured %d namespaces, want at least 100", len(lat))
	}
	if len(moving) == 0 {
		t.Errorf("no namespace was created while its partition was handed over: the handoff was not measured")
	}
	return latencyResult{p50: p(0.50), p99: p(0.99), max: lat[len(lat)-1], moving: len(moving)}
}

// createNamespace creates a namespace of the run (deleted when the test ends).
func createNamespace(t testing.TB, f *framework.Framework, name string) string {
	t.Helper()
	_, err := f.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{framework.RunLabel: f.RunID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("creating namespace %s: %v", name, err)
		return name
	}
	t.Cleanup(func() { f.DeleteNamespace(t, name) })
	return name
}

func createdSnapshot(mu *sync.Mutex, created map[string]time.Time) []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(created))
	for n := range created {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// arrivals records when the watches first saw each namespace's objects.
type arrivals struct {
	mu sync.Mutex
	at map[string]map[string]time.Time // kind → namespace → first seen
}

func newArrivals() *arrivals { return &arrivals{at: map[string]map[string]time.Time{}} }

func (a *arrivals) add(kind, ns string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at[kind] == nil {
		a.at[kind] = map[string]time.Time{}
	}
	if _, ok := a.at[kind][ns]; !ok {
		a.at[kind][ns] = at
	}
}

func (a *arrivals) has(kind, ns string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.at[kind][ns]
	return ok
}

// both returns when ns had both objects (the later arrival).
func (a *arrivals) both(ns string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sa, ok1 := a.at["serviceaccounts"][ns]
	cm, ok2 := a.at["configmaps"][ns]
	if !ok1 || !ok2 {
		return time.Time{}, false
	}
	if sa.After(cm) {
		return sa, true
	}
	return cm, true
}

// watchFirst watches objects named name of a kind cluster-wide from now on, recording the
// first ADDED of each namespace, until ctx ends; a closed watch is resumed.
func watchFirst(t testing.TB, ctx context.Context, a *arrivals, kind string,
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), name string) {
	t.Helper()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	w, err := watchFn(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: "0", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		rv := ""
		for {
			for ev := range w.ResultChan() {
				m, err := metaOf(ev.Object)
				if err != nil {
					continue
				}
				rv = m.GetResourceVersion()
				if ev.Type == watch.Added {
					a.add(kind, m.GetNamespace(), time.Now())
				}
			}
			if ctx.Err() != nil {
				return
			}
			if w, err = watchFn(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true}); err != nil {
				return
			}
		}
	}()
}

func metaOf(o any) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

// waitNamespacesGone waits until no namespace whose name starts with prefix is left.
func waitNamespacesGone(t testing.TB, f *framework.Framework, prefix string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	framework.Eventually(t, timeout, "namespaces "+prefix+"* gone", func(ctx context.Context) (bool, error) {
		list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: framework.RunLabel + "=" + f.RunID})
		if err != nil {
			return false, err
		}
		left := 0
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, prefix) {
				left++
			}
		}
		if left > 0 {
			return false, fmt.Errorf("%d left", left)
		}
		return true, nil
	})
	t.Logf("the test's namespaces were gone %s after its end", time.Since(start).Round(100*time.Millisecond))
}

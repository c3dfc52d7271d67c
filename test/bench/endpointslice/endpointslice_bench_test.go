package endpointslice

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/bench/benchkit"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// measured is the controller the benchmark compares, as kube-controller-manager names it.
var measured = []string{"endpointslice"}

const (
	// qps and burst are kube-controller-manager's default --kube-api-qps and
	// --kube-api-burst; workers its --concurrent-service-endpoint-syncs.
	qps        = 20
	burst      = 30
	workers    = 5
	pollEvery  = 250 * time.Millisecond
	probeLimit = 5 * time.Minute
	goneLimit  = 30 * time.Minute
	mib        = 1 << 20
)

// controlPlane are the cluster's processes whose CPU is reported beside each phase.
var controlPlane = []string{"kube-apiserver", "etcd"}

// sizes are the benchmark's knobs (doc.go).
type sizes struct {
	nodes, namespaces, services, pods int
	saturation, latency               int // flips per second
	phase, drain, takeover            time.Duration
	reps                              int
}

func readSizes() sizes {
	return sizes{
		nodes:      framework.EnvInt("KSHARD_BENCH_ES_NODES", 500),
		namespaces: framework.EnvInt("KSHARD_BENCH_ES_NAMESPACES", 200),
		services:   framework.EnvInt("KSHARD_BENCH_ES_SERVICES", 10),
		pods:       framework.EnvInt("KSHARD_BENCH_ES_PODS", 50),
		saturation: framework.EnvInt("KSHARD_BENCH_ES_SATURATION", 100),
		latency:    framework.EnvInt("KSHARD_BENCH_ES_LATENCY", 10),
		phase:      time.Duration(framework.EnvInt("KSHARD_BENCH_ES_PHASE_SECONDS", 120)) * time.Second,
		drain:      time.Duration(framework.EnvInt("KSHARD_BENCH_ES_DRAIN_SECONDS", 300)) * time.Second,
		takeover:   time.Duration(framework.EnvInt("KSHARD_BENCH_ES_TAKEOVER_SECONDS", 900)) * time.Second,
		reps:       framework.EnvInt("KSHARD_BENCH_ES_REPS", 1),
	}
}

// controllerArgs are the flags kube-controller-manager and a shard both take for the
// measured controller at kube-controller-manager's defaults.
func controllerArgs() []string {
	return []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(burst),
		"--concurrent-service-endpoint-syncs=" + strconv.Itoa(workers), "--endpointslice-updates-batch-period=0s"}
}

type config = benchkit.Config

// BenchmarkEndpointSlice compares the EndpointSlice controller of upstream
// kube-controller-manager with kshard's at 1 and 3 shards, on one control plane; see doc.go.
func BenchmarkEndpointSlice(b *testing.B) {
	f := framework.Get(b)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	f.RequireKCMWithout(b, measured...)
	s := readSizes()
	configs := benchkit.Configs(os.Getenv("KSHARD_BENCH_ES_UPSTREAM") != "0", framework.EnvInts("KSHARD_BENCH_ES_SHARDS", "1,3"))
	b.Logf("%d nodes; %d namespaces x %d headless Services x %d pods; flips %d/s (saturation) and %d/s (latency) for %s each; %d repetition(s); every controller process: %s",
		s.nodes, s.namespaces, s.services, s.pods, s.saturation, s.latency, s.phase, s.reps, strings.Join(controllerArgs(), " "))

	client := f.LoadClient(b)
	run := strings.ToLower("es-" + f.RunID)
	nodes := createNodes(b, client, run, s.nodes)
	defer f.DeleteNamespaces(b, framework.Burst{Run: run, Label: label}, client, goneLimit)
	w := createWorkload(b, client, run, s, nodes)
	// No kubelet finishes the pods' deletion: they go at once, before their namespaces.
	defer w.forceDeletePods(b, client)
	watch := watchSlices(b, client, run+"-")
	prime(b, f, w, watch, s)

	var results []result
	for rep := 1; rep <= s.reps; rep++ {
		for _, c := range configs {
			b.Run(fmt.Sprintf("%s/rep-%d", c.Name, rep), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					r := runConfig(b, f, s, c, w, watch, fmt.Sprintf("%s-%s-%d-%d", run, c.Name, rep, i))
					r.rep = rep
					results = append(results, r)
					report(b, r)
				}
			})
		}
	}
	summary(b, s, configs, results)
}

// prime has a kube-controller-manager build every Service's slices, so that every
// configuration starts on the same complete slices.
func prime(b *testing.B, f *framework.Framework, w *workload, watch *sliceWatch, s sizes) {
	b.Helper()
	start := time.Now()
	kcm := f.StartKCM(b, "kcm-es-prime", framework.KCMOptions{Controllers: measured, NoHousekeeping: true,
		Args: []string{"--kube-api-qps=200", "--kube-api-burst=300", "--concurrent-service-endpoint-syncs=20"}})
	waitConverged(b, w, watch, s.takeover, "the prime's slices")
	kcm.Kill()
	writes, _ := watch.counters()
	b.Logf("prime: every Service's slices written in %s (%d slice writes seen)", time.Since(start).Round(time.Second), writes)
}

// waitConverged waits until the slices show every pod as the benchmark last set it.
func waitConverged(b *testing.B, w *workload, watch *sliceWatch, limit time.Duration, what string) {
	b.Helper()
	want := w.want()
	framework.Eventually(b, limit, what+" show every pod's readiness", func(context.Context) (bool, error) {
		n, example := watch.diff(want)
		if n > 0 {
			return false, fmt.Errorf("%d of %d pods differ, e.g. %s", n, len(want), example)
		}
		return true, nil
	})
}

// runConfig starts c's controllers, waits for their takeover, runs both phases and stops
// them.
func runConfig(b *testing.B, f *framework.Framework, s sizes, c config, w *workload, watch *sliceWatch, run string) result {
	b.StopTimer()
	ctx := context.Background()
	client := f.LoadClient(b)
	r := result{config: c}
	plane := benchkit.ControlPlane(b, f, controlPlane...)
	writes0, _ := watch.counters()
	takeoverStart := time.Now()
	side := benchkit.Start(b, f, benchkit.SideOptions{Config: c, Run: run, Controllers: measured, Args: controllerArgs(), ReadyLimit: probeLimit})
	defer side.Stop()
	r.perShard, r.share = side.Share(ctx, b, w.namespaces)
	if side.KShard != nil {
		b.Logf("%s: namespaces per shard %v (busiest share %.3f)", c.Name, r.perShard, r.share)
	}
	meter := framework.StartMeter(b, append(side.Metered(), plane...)...)
	// A probe of its own per run: the cluster runs no garbage collector, so an earlier
	// run's probe slice outlives its Service and would be found at once (it was, in the
	// thirteenth session's repetitions 2 and 3 of upstream: "takeover" 0.3 s).
	waitProbe(ctx, b, client, w.namespaces[0], probePrefix+"-"+run)
	waitConverged(b, w, watch, s.takeover, c.Name+"'s takeover")
	writes1, _ := watch.counters()
	r.takeoverWrites = writes1 - writes0
	r.takeover = time.Since(takeoverStart)
	b.Logf("%s: takeover done in %s with %d slice writes", c.Name, r.takeover.Round(100*time.Millisecond), r.takeoverWrites)

	for _, ph := range []struct {
		name string
		rate int
	}{{"saturation", s.saturation}, {"latency", s.latency}} {
		r.phases = append(r.phases, runPhase(ctx, b, s, c, w, watch, client, ph.name, ph.rate, side, plane))
	}
	r.usage = benchkit.SplitUsage(meter.Stop(b))
	return r
}

// probePrefix begins the names of the probe Services, whose slices the watch leaves out.
const probePrefix = "probe"

// waitProbe creates a probe Service (selecting nothing) named name in ns and waits until
// the controller has written its placeholder slice: informers synced, workers running. It
// deletes the Service again (no garbage collector runs: its slice stays, uncounted).
func waitProbe(ctx context.Context, b *testing.B, client kubernetes.Interface, ns, name string) {
	b.Helper()
	svc := newService(0)
	svc.Name, svc.Spec.Selector = name, map[string]string{"svc": "none"}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := client.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			b.Error(err)
		}
	}()
	framework.Eventually(b, probeLimit, "the controller writes the probe Service's slice", func(ctx context.Context) (bool, error) {
		l, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return false, err
		}
		return len(l.Items) > 0, nil
	})
}

// runPhase flips readiness at perSecond for s.phase, waits until every flip shows in the
// slices, and returns what it took.
func runPhase(ctx context.Context, b *testing.B, s sizes, c config, w *workload, watch *sliceWatch, client kubernetes.Interface,
	name string, perSecond int, side *benchkit.Side, plane []framework.Metered) phaseResult {
	b.Helper()
	p := phaseResult{name: name, rate: perSecond}
	req0 := sliceRequests(ctx, b, client)
	meter := benchkit.StartPhase(ctx, b, side.Controllers, append(side.Metered(), plane...)...)
	watch.takeLatencies()
	writes0, _ := watch.counters()
	fl := &flipper{w: w, watch: watch, client: client}
	b.StartTimer()
	start := time.Now()
	fl.run(ctx, perSecond, s.phase)
	sent := time.Since(start)
	p.sending = sent
	deadline := time.Now().Add(s.drain)
	for {
		if _, unseen := watch.counters(); unseen == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(pollEvery)
	}
	p.took = time.Since(start)
	b.StopTimer()
	p.unseen = watch.dropUnseen()
	writes1, _ := watch.counters()
	p.writes = writes1 - writes0
	p.flips, p.flipErrors = fl.sent, fl.errs
	if fl.errs > 0 {
		b.Logf("%s: %s: %d flips failed, the last: %v", c.Name, name, fl.errs, fl.errLast)
	}
	p.requests = sliceRequests(ctx, b, client) - req0
	lat := watch.takeLatencies()
	xs := make([]float64, len(lat))
	for i, d := range lat {
		xs[i] = d.Seconds()
	}
	slices.Sort(xs)
	p.p50, p.p99, p.max = quantile(xs, 0.5), quantile(xs, 0.99), quantile(xs, 1)
	p.use = meter.Stop(b)
	top, use := p.use.TopClient()
	b.Logf("%s: %s: %d flips sent in %s (%d failed), all seen after %s (%d never); %d slice writes (%.1f/s, %.2f per flip), %.0f write requests; flip to slice p50 %.2fs p99 %.2fs max %.2fs; %s sent %.1f req/s, waited %.0f s in rate limiters; apiserver %.2f cores, machine %.2f busy cores (load %.1f)",
		c.Name, name, p.flips, sent.Round(time.Millisecond), p.flipErrors, p.took.Round(100*time.Millisecond), p.unseen, p.writes, p.writesPerSecond(), p.writesPerFlip(),
		p.requests, p.p50, p.p99, p.max, top, use.Requests/p.took.Seconds(), use.LimiterWait, p.cores("kube-apiserver"), p.use.Busy, p.use.Load)
	return p
}

// quantile of sorted xs (0 when empty).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

// sliceRequests reads the API server's count of endpointslices write requests (every
// code: failed and no-op writes count too).
func sliceRequests(ctx context.Context, b *testing.B, client kubernetes.Interface) float64 {
	b.Helper()
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("kube-apiserver /metrics: %v", err)
	}
	m := framework.ParseMetrics(string(raw))
	sum := 0.0
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		sum += m.Value("apiserver_request_total", `resource="endpointslices"`, `verb="`+verb+`"`)
	}
	return sum
}

// cores is the machine's core count, for the busy-cores column.
var cores = runtime.NumCPU()

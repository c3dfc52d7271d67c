package statefuldaemon

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

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/bench/benchkit"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// measured are the controllers the benchmark compares, as kube-controller-manager names them.
var measured = []string{"daemonset", "statefulset"}

const (
	// qps and burst are kube-controller-manager's default --kube-api-qps and
	// --kube-api-burst, given to every controller process (per controller client, events
	// included, in both).
	qps   = 20
	burst = 30
	// kube-controller-manager's default --concurrent-daemonset-syncs and
	// --concurrent-statefulset-syncs.
	dsWorkers  = 2
	stsWorkers = 5
	pollEvery  = 250 * time.Millisecond
	// probeLimit bounds the wait until the started controllers have synced a probe
	// namespace's objects; goneLimit the deletion of a run's namespaces.
	probeLimit = 2 * time.Minute
	goneLimit  = 20 * time.Minute
	mib        = 1 << 20
)

// controlPlane are the cluster's processes whose CPU is reported beside each phase, so
// that a reader sees when the control plane rather than the controllers' rate limits
// bounded it. kube-controller-manager is the cluster's own (every other controller).
var controlPlane = []string{"kube-apiserver", "etcd", "kube-scheduler", "kwok", "kube-controller-manager"}

// sizes are the benchmark's knobs (doc.go).
type sizes struct {
	nodes, daemonSets, stsNamespaces int
	stsReplicas                      int32
	maxUnavailable                   intstr.IntOrString
	policy                           appsv1.PodManagementPolicyType
	kinds                            []string
	reps                             int
	timeout                          time.Duration
}

func readSizes(b *testing.B) sizes {
	s := sizes{
		nodes:          framework.EnvInt("KSHARD_BENCH_SD_NODES", 500),
		daemonSets:     framework.EnvInt("KSHARD_BENCH_SD_DAEMONSETS", 6),
		stsNamespaces:  framework.EnvInt("KSHARD_BENCH_SD_STATEFULSETS", 200),
		stsReplicas:    int32(framework.EnvInt("KSHARD_BENCH_SD_STS_REPLICAS", 5)),
		maxUnavailable: intstr.Parse(envString("KSHARD_BENCH_SD_MAX_UNAVAILABLE", "10%")),
		policy:         appsv1.PodManagementPolicyType(envString("KSHARD_BENCH_SD_STS_POLICY", string(appsv1.OrderedReadyPodManagement))),
		kinds:          framework.EnvList("KSHARD_BENCH_SD_KINDS", "daemonsets,statefulsets"),
		reps:           framework.EnvInt("KSHARD_BENCH_SD_REPS", 1),
		timeout:        time.Duration(framework.EnvInt("KSHARD_BENCH_SD_TIMEOUT_SECONDS", 1800)) * time.Second,
	}
	if s.policy != appsv1.OrderedReadyPodManagement && s.policy != appsv1.ParallelPodManagement {
		b.Fatalf("KSHARD_BENCH_SD_STS_POLICY=%q: want %s or %s", s.policy, appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)
	}
	for _, k := range s.kinds {
		if k != "daemonsets" && k != "statefulsets" {
			b.Fatalf("KSHARD_BENCH_SD_KINDS: %q is neither daemonsets nor statefulsets", k)
		}
	}
	return s
}

func (s sizes) has(kind string) bool { return slices.Contains(s.kinds, strings.ToLower(kind)) }

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// controllerArgs are the flags kube-controller-manager and a kshard shard both take for
// the measured controllers at kube-controller-manager's defaults.
func controllerArgs() []string {
	return []string{"--kube-api-qps=" + strconv.Itoa(qps), "--kube-api-burst=" + strconv.Itoa(burst),
		"--concurrent-daemonset-syncs=" + strconv.Itoa(dsWorkers), "--concurrent-statefulset-syncs=" + strconv.Itoa(stsWorkers)}
}

type config = benchkit.Config

// phaseResult is one timed phase of a run: a kind's objects created, or their template
// changed, until every one has rolled out.
type phaseResult struct {
	kind   string
	update bool
	took   time.Duration
	// p50 is the median of the objects' own times to rolled out (from the phase's start).
	p50 time.Duration
	use benchkit.PhaseUsage
}

func (p phaseResult) name() string {
	if p.update {
		return p.kind + " updated"
	}
	return p.kind + " created"
}

func (p phaseResult) cores(proc string) float64 { return p.use.Cores(proc, p.took) }

// result is one run's figures.
type result struct {
	config
	rep    int
	phases []phaseResult
	usage  benchkit.RunUsage // over the whole run
	// share is, by kind, the share of its objects whose namespace the busiest shard owned
	// (1 for upstream and one shard): its inverse is the speedup over one shard that an
	// even split of the work over the shards' rate limits would give.
	share map[string]float64
	// perShard is, by kind, how many of its objects each shard owned.
	perShard map[string]map[string]int
}

func (r result) phase(kind string, update bool) (phaseResult, bool) {
	for _, p := range r.phases {
		if p.kind == kind && p.update == update {
			return p, true
		}
	}
	return phaseResult{}, false
}

// BenchmarkStatefulDaemon compares the DaemonSet and StatefulSet controllers of upstream
// kube-controller-manager with kshard's at 1 and 3 shards, on one control plane; see doc.go.
func BenchmarkStatefulDaemon(b *testing.B) {
	f := framework.Get(b)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	f.RequireKCMWithout(b, measured...)
	s := readSizes(b)
	configs := benchkit.Configs(os.Getenv("KSHARD_BENCH_SD_UPSTREAM") != "0", framework.EnvInts("KSHARD_BENCH_SD_SHARDS", "1,3"))
	b.Logf("%d kwok nodes; %d DaemonSets (one a namespace, RollingUpdate maxUnavailable %s, maxSurge 0); %d StatefulSets of %d replicas (one a namespace, %s, RollingUpdate); kinds %v; %d repetitions; every controller process: %s",
		s.nodes, s.daemonSets, s.maxUnavailable.String(), s.stsNamespaces, s.stsReplicas, s.policy, s.kinds, s.reps, strings.Join(controllerArgs(), " "))
	if s.has(daemonSets) {
		createNodes(b, f.LoadClient(b), f.RunID, s.nodes)
	}

	var results []result
	for rep := 1; rep <= s.reps; rep++ {
		for _, c := range configs {
			b.Run(fmt.Sprintf("%s/rep-%d", c.Name, rep), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					run := strings.ToLower(fmt.Sprintf("sd-%s-%s-%d-%d", f.RunID, c.Name, rep, i))
					r := runConfig(b, f, s, c, run)
					r.rep = rep
					results = append(results, r)
					report(b, r)
				}
			})
		}
	}
	summary(b, s, configs, results)
}

// runConfig runs every phase with c's controllers and deletes the run's namespaces after.
func runConfig(b *testing.B, f *framework.Framework, s sizes, c config, run string) result {
	b.StopTimer()
	ctx := context.Background()
	client := f.LoadClient(b)
	var kinds []kind
	var all []string
	if s.has(daemonSets) {
		nss := nsNames(run+"-ds", s.daemonSets)
		kinds = append(kinds, daemonSetKind(client, run, f.RunID, nss, s.nodes, s.maxUnavailable))
		all = append(all, nss...)
	}
	if s.has(statefulSets) {
		nss := nsNames(run+"-sts", s.stsNamespaces)
		kinds = append(kinds, statefulSetKind(client, run, nss, s.stsReplicas, s.policy))
		all = append(all, nss...)
	}
	probe := run + "-probe"
	// Deferred first, so it runs last: after the run's controllers are stopped.
	defer f.DeleteNamespaces(b, framework.Burst{Run: run, Label: label}, client, goneLimit)
	createNamespaces(b, client, run, append(all, probe))

	r := result{config: c, share: map[string]float64{}, perShard: map[string]map[string]int{}}
	plane := benchkit.ControlPlane(b, f, controlPlane...)
	// Both sides run exactly the measured controllers (no housekeeping: the benchmark
	// makes the namespaces' ServiceAccounts, and the garbage collector's caches of every
	// resource would swamp the figures of one side's memory).
	side := benchkit.Start(b, f, benchkit.SideOptions{Config: c, Run: run, Controllers: measured, Args: controllerArgs(), ReadyLimit: probeLimit})
	defer side.Stop()
	if side.KShard != nil {
		for _, kd := range kinds {
			r.perShard[kd.name], r.share[kd.name] = side.Share(ctx, b, kd.namespaces)
			b.Logf("%s: %s per shard %v (busiest share %.3f)", c.Name, kd.name, r.perShard[kd.name], r.share[kd.name])
		}
	}
	// The controllers work before the clock starts: a probe namespace's DaemonSet (on no
	// node) and StatefulSet (0 replicas) get their status written.
	waitProbe(ctx, b, client, run, probe)
	for _, kd := range kinds {
		if _, ok := r.share[kd.name]; !ok {
			r.share[kd.name] = 1
		}
	}

	meter := framework.StartMeter(b, append(side.Metered(), plane...)...)
	for _, kd := range kinds {
		for _, update := range []bool{false, true} {
			p := runPhase(ctx, b, s, c, kd, update, side, plane)
			r.phases = append(r.phases, p)
		}
	}
	r.usage = benchkit.SplitUsage(meter.Stop(b))
	return r
}

func nsNames(stem string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", stem, i)
	}
	return out
}

// runPhase creates kd's objects (or, with update, changes their template) and times
// until every one has rolled out, with what the processes used meanwhile.
func runPhase(ctx context.Context, b *testing.B, s sizes, c config, kd kind, update bool, side *benchkit.Side, plane []framework.Metered) phaseResult {
	b.Helper()
	p := phaseResult{kind: kd.name, update: update}
	// CPU only: the peaks are the run's (reset once, when the run's meter started).
	meter := benchkit.StartPhase(ctx, b, side.Controllers, append(side.Metered(), plane...)...)
	act := kd.create
	if update {
		act = kd.update
	}
	b.StartTimer()
	start := time.Now()
	if err := framework.Parallel(len(kd.namespaces), createWorkers, func(i int) error { return act(ctx, kd.namespaces[i]) }); err != nil {
		b.Fatalf("%s: %s: %v", c.Name, p.name(), err)
	}
	sent := time.Since(start)
	done, took := waitRolledOut(ctx, b, kd, start, s.timeout)
	b.StopTimer()
	p.took = took
	p.use = meter.Stop(b)
	times := make([]float64, 0, len(done))
	for _, d := range done {
		times = append(times, d.Seconds())
	}
	p.p50 = time.Duration(framework.SpreadOf(times).Median * float64(time.Second))
	top, use := p.use.TopClient()
	b.Logf("%s: %s: %d sent in %s, all rolled out after %s (per object p50 %s); %s sent %.0f requests (%.1f/s), waited %.0f s in rate limiters; apiserver %.2f cores, machine %.2f busy cores (load %.1f)",
		c.Name, p.name(), len(kd.namespaces), sent.Round(time.Millisecond), took.Round(100*time.Millisecond), p.p50.Round(100*time.Millisecond),
		top, use.Requests, use.Requests/took.Seconds(), use.LimiterWait, p.cores("kube-apiserver"), p.use.Busy, p.use.Load)
	return p
}

// waitProbe creates, in the probe namespace, a DaemonSet selecting no node and a
// StatefulSet of 0 replicas, and waits until the controllers have written the status of
// both: their informers are synced and their workers run.
func waitProbe(ctx context.Context, b *testing.B, client kubernetes.Interface, run, ns string) {
	b.Helper()
	// Labelled apart from the run's objects (label=<run>-probe), so no phase counts them.
	ds := newDaemonSet(run+"-probe", "none", intstr.FromInt32(1)) // nodeSelector nodeLabel=none: no node
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, newStatefulSet(run+"-probe", 0, appsv1.OrderedReadyPodManagement), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, probeLimit, "the controllers write the probe's statuses", func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().DaemonSets(ns).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s, err := client.AppsV1().StatefulSets(ns).Get(ctx, stsName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration < d.Generation || s.Status.ObservedGeneration < s.Generation {
			return false, fmt.Errorf("daemonset observed %d of %d, statefulset %d of %d", d.Status.ObservedGeneration, d.Generation, s.Status.ObservedGeneration, s.Generation)
		}
		return true, nil
	})
}

// cores is the machine's core count, for the busy-cores column.
var cores = runtime.NumCPU()

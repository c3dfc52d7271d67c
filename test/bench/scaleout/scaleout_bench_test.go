package scaleout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// kube-controller-manager's defaults, given to every controller process.
const (
	// qps and burst are kube-controller-manager's default --kube-api-qps and
	// --kube-api-burst: each controller's client (and, in kshard as upstream, its events)
	// gets this budget.
	qps   = "20"
	burst = "30"
	// workers is kube-controller-manager's default --concurrent-deployment-syncs and
	// --concurrent-replicaset-syncs.
	workers  = "5"
	label    = "kshard.io/bench-scaleout"
	complete = 30 * time.Minute
	gone     = 15 * time.Minute
)

// controlPlane are the processes whose CPU the benchmark reports beside each run, so a
// reader sees when the API server, not the controllers' rate limits, was the bound.
var controlPlane = []string{"kube-apiserver", "etcd", "kube-scheduler", "kwok", "kube-controller-manager"}

// config is one column of the comparison: upstream (shards == 0) or kshard with shards,
// its coordinators placing partitions by placement ("count" or "load", the coordinator's
// --placement).
type config struct {
	name      string
	shards    int
	placement string
}

// placements reads KSHARD_BENCH_PLACEMENT, the coordinator placements to run (def when
// unset): a comma-separated list of "count" and "load". Anything else panics before the
// benchmark starts, as framework.EnvInt does.
func placements(def string) []string {
	ps := framework.EnvList("KSHARD_BENCH_PLACEMENT", def)
	for _, p := range ps {
		if p != "count" && p != "load" {
			panic(fmt.Sprintf("KSHARD_BENCH_PLACEMENT: %q is neither count nor load", p))
		}
	}
	return ps
}

// kshardConfigs returns the kshard columns for shard counts ns and placements ps: one per
// shard count and placement, named kshard-N (count) or kshard-N-load, except that one
// shard, which every placement gives the same owner, runs once (with ps[0]).
func kshardConfigs(ns []int, ps []string) []config {
	var out []config
	for _, n := range ns {
		for i, p := range ps {
			if n == 1 && i > 0 {
				break
			}
			name := fmt.Sprintf("kshard-%d", n)
			if p == "load" && n > 1 {
				name += "-load"
			}
			out = append(out, config{name: name, shards: n, placement: p})
		}
	}
	return out
}

// coordinatorArgsEnv names the flags added to every coordinator of every benchmark of the
// package (e.g. a shorter --balance-interval, --load-report-interval and
// --load-half-life, so that a small run of BenchmarkCapacitySkewed or
// BenchmarkBalancerSteady sees the balancer act within minutes).
const coordinatorArgsEnv = "KSHARD_BENCH_COORDINATOR_ARGS"

// coordinatorArgs are the flags a config's coordinators get: its --placement and
// KSHARD_BENCH_COORDINATOR_ARGS.
func (c config) coordinatorArgs() []string {
	var out []string
	if c.placement != "" {
		out = append(out, "--placement="+c.placement)
	}
	return append(out, strings.Fields(os.Getenv(coordinatorArgsEnv))...)
}

// extraCoordinatorArgs is KSHARD_BENCH_COORDINATOR_ARGS for a log line: empty when unset,
// else " and " followed by the flags.
func extraCoordinatorArgs() string {
	if args := strings.Fields(os.Getenv(coordinatorArgsEnv)); len(args) > 0 {
		return " and " + strings.Join(args, " ")
	}
	return ""
}

// usage is one process's figures over a run.
type usage struct {
	name    string
	peakRSS float64 // bytes
	cpu     float64 // seconds
}

// result is one run's figures.
type result struct {
	config
	rep         int
	took        time.Duration
	controllers []usage // the processes that ran the deployment and replicaset controllers
	coordinator []usage
	plane       map[string]usage // by controlPlane name
	// busiest is the share of the burst's Deployments whose namespace the busiest shard
	// owned (1 for upstream and one shard): its inverse is the speedup an even split of the
	// work over the shards' rate limits would give.
	busiest float64
}

func (r result) cpu() float64 {
	s := 0.0
	for _, u := range r.controllers {
		s += u.cpu
	}
	return s
}

func (r result) maxPeakRSS() float64 {
	m := 0.0
	for _, u := range r.controllers {
		m = max(m, u.peakRSS)
	}
	return m
}

// cores is the CPU a control plane process used over the run, in cores.
func (r result) cores(name string) float64 { return r.plane[name].cpu / r.took.Seconds() }

// workload is what a scale-out run bursts: the controllers that work it, as
// kube-controller-manager names them (each runs its default worker count, workers), and
// how the burst is created and waited for.
type workload struct {
	controllers []string
	objects     string // what the burst is made of, for logs: "Deployments", "Jobs"
	create      func(b *testing.B, load framework.Burst, client kubernetes.Interface, nss []string)
	wait        func(ctx context.Context, b *testing.B, load framework.Burst, client kubernetes.Interface)
}

// controllerArgs are the flags both kube-controller-manager and a kshard shard take for
// w's controllers at kube-controller-manager's defaults.
func (w workload) controllerArgs() []string {
	args := []string{"--kube-api-qps=" + qps, "--kube-api-burst=" + burst}
	for _, c := range w.controllers {
		args = append(args, fmt.Sprintf("--concurrent-%s-syncs=%s", c, workers))
	}
	return args
}

// BenchmarkScaleOut is the throughput-vs-shards benchmark: a burst of Deployments
// worked at kube-controller-manager's own client limits by upstream kube-controller-manager
// and by kshard with 1, 2 and 4 shards, repeated, on one control plane. See doc.go.
func BenchmarkScaleOut(b *testing.B) {
	load := framework.Burst{Label: label, Namespaces: framework.EnvInt("KSHARD_BENCH_SCALEOUT_NAMESPACES", 300),
		PerNamespace: framework.EnvInt("KSHARD_BENCH_SCALEOUT_DEPLOYMENTS", 2), Replicas: int32(framework.EnvInt("KSHARD_BENCH_SCALEOUT_REPLICAS", 3))}
	b.Logf("burst: %d namespaces x %d Deployments x %d replicas = %d pods", load.Namespaces, load.PerNamespace, load.Replicas, load.Deployments()*int(load.Replicas))
	scaleOut(b, load, "so", "1,2,4", workload{
		controllers: []string{"deployment", "replicaset"}, objects: "Deployments",
		create: func(b *testing.B, load framework.Burst, client kubernetes.Interface, nss []string) {
			load.CreateDeployments(b, client, nss)
		},
		wait: func(ctx context.Context, b *testing.B, load framework.Burst, client kubernetes.Interface) {
			load.WaitComplete(ctx, b, client, load.Deployments(), complete)
		},
	})
}

// BenchmarkScaleOutJobs is the Job benchmark, the same comparison for a burst of
// Jobs (2,000 Jobs of 5 completions, parallelism 5, over 200 namespaces by default)
// worked by the job controller: upstream kube-controller-manager against kshard with 1
// and 3 shards.
func BenchmarkScaleOutJobs(b *testing.B) {
	load := framework.Burst{Label: label, Namespaces: framework.EnvInt("KSHARD_BENCH_JOBS_NAMESPACES", 200),
		PerNamespace: framework.EnvInt("KSHARD_BENCH_JOBS_PER_NAMESPACE", 10)}
	completions := int32(framework.EnvInt("KSHARD_BENCH_JOBS_COMPLETIONS", 5))
	b.Logf("burst: %d namespaces x %d Jobs x %d completions (parallelism %d) = %d pods",
		load.Namespaces, load.PerNamespace, completions, completions, load.Objects()*int(completions))
	scaleOut(b, load, "sj", "1,3", workload{
		controllers: []string{"job"}, objects: "Jobs",
		create: func(b *testing.B, load framework.Burst, client kubernetes.Interface, nss []string) {
			load.CreateJobs(b, client, nss, completions)
		},
		wait: func(ctx context.Context, b *testing.B, load framework.Burst, client kubernetes.Interface) {
			load.WaitJobsComplete(ctx, b, client, load.Objects(), complete)
		},
	})
}

// scaleOut runs w's burst with upstream (unless KSHARD_BENCH_SCALEOUT_UPSTREAM=0) and
// kshard at each shard count (KSHARD_BENCH_SCALEOUT_SHARDS, default shards), for
// KSHARD_BENCH_REPS repetitions, and logs the summary.
func scaleOut(b *testing.B, load framework.Burst, stem, shards string, w workload) {
	kf := framework.Get(b)
	kf.RequireKCMWithout(b, w.controllers...)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	reps := framework.EnvInt("KSHARD_BENCH_REPS", 3)
	var configs []config
	if os.Getenv("KSHARD_BENCH_SCALEOUT_UPSTREAM") != "0" {
		configs = append(configs, config{name: "upstream"})
	}
	configs = append(configs, kshardConfigs(framework.EnvInts("KSHARD_BENCH_SCALEOUT_SHARDS", shards), placements("count"))...)
	b.Logf("%d repetitions; every controller process: %s", reps, strings.Join(w.controllerArgs(), " "))

	var results []result
	for rep := 1; rep <= reps; rep++ {
		for _, c := range configs {
			b.Run(fmt.Sprintf("%s/rep-%d", c.name, rep), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					l := load
					l.Run = strings.ToLower(fmt.Sprintf("%s-%s-%s-%d-%d", stem, kf.RunID, c.name, rep, i))
					r := runBurst(b, kf, l, c, w)
					r.rep = rep
					results = append(results, r)
					report(b, r)
				}
			})
		}
	}
	summary(b, configs, results, w)
}

// runBurst runs one burst of w with c's controllers on f's control plane.
func runBurst(b *testing.B, f *framework.Framework, load framework.Burst, c config, w workload) result {
	b.StopTimer()
	ctx := context.Background()
	client := f.LoadClient(b)
	nss := load.CreateNamespaces(b, client)
	defer f.DeleteNamespaces(b, load, client, gone)

	r := result{config: c, busiest: 1, plane: map[string]usage{}}
	var procs []framework.Metered
	for _, name := range controlPlane {
		pid, err := f.ComponentPid(name)
		if err != nil {
			b.Fatal(err)
		}
		procs = append(procs, framework.Metered{Name: name, Role: "plane", Pid: pid})
	}
	var (
		shards []*framework.Shard
		kcm    *framework.KCM
	)
	if c.shards == 0 {
		kcm = f.StartKCM(b, "kcm-"+load.Run, framework.KCMOptions{Controllers: w.controllers, Args: w.controllerArgs()})
		defer kcm.Kill()
		waitSynced(b, kcm, w.controllers...)
		procs = append(procs, framework.Metered{Name: fmt.Sprintf("kube-controller-manager (%s)", strings.Join(w.controllers, ", ")), Role: "controller", Pid: kcm.Pid(), ResetPeak: true})
	} else {
		k := f.NewKShard(b, framework.KShardOptions{ShardArgs: append([]string{"--controllers", strings.Join(w.controllers, ",")}, w.controllerArgs()...),
			CoordinatorArgs: c.coordinatorArgs(), KCMTimings: true})
		shards = k.StartSet(b, c.shards)
		defer k.KillAll()
		for _, s := range shards {
			procs = append(procs, framework.Metered{Name: s.Name, Role: "controller", Pid: s.Pid(), ResetPeak: true})
		}
		procs = append(procs, framework.Metered{Name: "coordinator", Role: "coordinator", Pid: k.Coordinators[0].Pid(), ResetPeak: true})
		r.busiest = busiestShare(ctx, b, k, nss)
	}
	// The clock starts once every namespace has its default ServiceAccount, which the
	// controllers just started create (the cluster's kube-controller-manager does not run
	// serviceaccount): a pod created before it is refused, and the job controller backs
	// that Job off. (A loaded run of kshard-1 logged 29 such refusals.)
	for _, ns := range nss {
		f.WaitDefaultServiceAccount(b, ns)
	}
	meter := framework.StartMeter(b, procs...)

	b.StartTimer()
	start := time.Now()
	w.create(b, load, client, nss)
	b.Logf("%s: %d %s created in %s", c.name, load.Objects(), w.objects, time.Since(start).Round(time.Millisecond))
	w.wait(ctx, b, load, client)
	r.took = time.Since(start)
	b.StopTimer()
	for _, s := range shards {
		if m, err := framework.Scrape(ctx, s.HTTPURL); err != nil {
			b.Logf("%s: metrics: %v", s.Name, err)
		} else {
			logClientUse(b, s.Name, m, "kshard_", r.took)
		}
	}
	if kcm != nil {
		if m, err := kcm.Metrics(ctx); err != nil {
			b.Logf("kube-controller-manager: metrics: %v", err)
		} else {
			logClientUse(b, "kube-controller-manager", m, "", r.took)
		}
	}
	for _, u := range meter.Stop(b) {
		pu := usage{name: u.Name, peakRSS: u.PeakRSSBytes, cpu: u.CPUSeconds}
		switch u.Role {
		case "controller":
			r.controllers = append(r.controllers, pu)
		case "coordinator":
			r.coordinator = append(r.coordinator, pu)
		default:
			r.plane[u.Name] = pu
		}
	}
	return r
}

// waitSynced waits until kube-controller-manager's log shows each named controller
// started and, after the last of them, its informers synced ("Caches are synced", which
// 1.37 logs without the controller's name), and one second more: on the cluster the
// burst has not yet filled, syncing takes milliseconds. kshard's timer likewise starts
// once every partition is owned and warm.
func waitSynced(b *testing.B, k *framework.KCM, names ...string) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		raw, err := os.ReadFile(k.LogPath)
		if err != nil {
			b.Fatal(err)
		}
		log := string(raw)
		last := 0
		for _, n := range names {
			i := max(strings.Index(log, `"Starting controller" controller="`+n+`"`), strings.Index(log, `"Starting controller" name="`+n+`"`),
				strings.Index(log, `"Starting `+n+` controller"`)) // the job controller's own words
			if i < 0 {
				last = -1
				break
			}
			last = max(last, i)
		}
		if last >= 0 && strings.Contains(log[last:], `"Caches are synced"`) {
			time.Sleep(time.Second)
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("kube-controller-manager's %v controllers not started and synced after 60s (see %s)", names, k.LogPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logClientUse logs what a controller process's API clients did over the run (which
// includes the few requests of its warm-up before the timer): requests sent, their rate,
// and the time they waited in the client-side rate limiters, so a reader can tell a
// process bound by its QPS (waits add up to the run) from one waiting on the cluster
// (pods to turn Ready). prefix is "kshard_" for a shard and "" for kube-controller-manager,
// whose client-go metrics are not prefixed.
func logClientUse(b *testing.B, name string, m framework.Samples, prefix string, took time.Duration) {
	requests := m.Value(prefix + "rest_client_requests_total")
	reconciles := ""
	if prefix != "" {
		reconciles = fmt.Sprintf(", %.0f reconciles", m.Value("kshard_controller_reconciles_total"))
	}
	b.Logf("%s: %.0f API requests (%.1f/s over the run), %.0f s waited in rate limiters over %.0f requests%s",
		name, requests, requests/took.Seconds(), m.Value(prefix+"rest_client_rate_limiter_duration_seconds_sum"),
		m.Value(prefix+"rest_client_rate_limiter_duration_seconds_count"), reconciles)
}

// busiestShare returns the share of the burst's objects (the same number in each of nss)
// whose namespace the busiest shard owns, from the leading coordinator's assignment.
func busiestShare(ctx context.Context, b *testing.B, k *framework.KShard, nss []string) float64 {
	per := k.NamespacesPerShard(ctx, b, nss)
	b.Logf("burst namespaces per shard: %v", per)
	return framework.BusiestShare(per)
}

func report(b *testing.B, r result) {
	b.ReportMetric(r.took.Seconds(), "s-to-complete")
	b.ReportMetric(r.cpu(), "controller-cpu-s")
	b.ReportMetric(r.maxPeakRSS()/(1<<20), "max-process-peak-RSS-MiB")
	b.ReportMetric(r.cores("kube-apiserver"), "apiserver-cores")
	b.ReportMetric(r.cores("etcd"), "etcd-cores")
	b.ReportMetric(r.busiest, "busiest-shard-share")
}

// summary logs one table row per configuration (median and range over the repetitions)
// and writes it to the artifacts folder.
func summary(b *testing.B, configs []config, results []result, w workload) {
	if len(results) == 0 {
		return
	}
	byConfig := map[string][]result{}
	for _, r := range results {
		byConfig[r.name] = append(byConfig[r.name], r)
	}
	// ratio returns, per repetition, a's time over b's time (pairing the runs of a
	// repetition, which ran back to back).
	ratio := func(num, den string) []float64 {
		var out []float64
		for _, n := range byConfig[num] {
			for _, d := range byConfig[den] {
				if d.rep == n.rep {
					out = append(out, n.took.Seconds()/d.took.Seconds())
				}
			}
		}
		return out
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\treps\tto complete (s)\tvs upstream\tspeedup vs kshard-1\tbusiest shard's share (ideal speedup)\tcontroller CPU-s\tpeak RSS per process (MiB)\tapiserver cores\tetcd cores\tscheduler+kwok cores\tkcm (others) cores")
	for _, c := range configs {
		rs := byConfig[c.name]
		if len(rs) == 0 {
			continue
		}
		col := func(f func(result) float64) framework.Spread {
			out := make([]float64, len(rs))
			for i, r := range rs {
				out[i] = f(r)
			}
			return framework.SpreadOf(out)
		}
		speedup := "-"
		if c.shards > 0 {
			speedup = framework.SpreadOf(invert(ratio(c.name, "kshard-1"))).Format("%.2f")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s (%s)\t%s\t%s\t%s\t%s\t%s\t%s\n", c.name, len(rs),
			col(func(r result) float64 { return r.took.Seconds() }).Format("%.1f"),
			framework.SpreadOf(ratio(c.name, "upstream")).Format("%.2f"), speedup,
			col(func(r result) float64 { return r.busiest }).Format("%.3f"),
			col(func(r result) float64 { return 1 / r.busiest }).Format("%.2f"),
			col(result.cpu).Format("%.1f"),
			col(func(r result) float64 { return r.maxPeakRSS() / (1 << 20) }).Format("%.0f"),
			col(func(r result) float64 { return r.cores("kube-apiserver") }).Format("%.2f"),
			col(func(r result) float64 { return r.cores("etcd") }).Format("%.2f"),
			col(func(r result) float64 { return r.cores("kube-scheduler") + r.cores("kwok") }).Format("%.2f"),
			col(func(r result) float64 { return r.cores("kube-controller-manager") }).Format("%.2f"))
	}
	_ = tw.Flush()
	sb.WriteString("\nmedian [min–max] over the repetitions; ratios pair the runs of one repetition. " +
		"kube-controller-manager (others) is the cluster's own, running every controller but " + strings.Join(w.controllers, " and ") + ", in every run.\n")
	b.Logf("summary:\n%s", sb.String())
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	b.Logf("summary written to %s", path)
}

func invert(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = 1 / x
	}
	return out
}

// Package workloads measures kshard's ReplicaSet and Deployment controllers against
// upstream kube-controller-manager's, in one run on one machine: a burst of 200
// namespaces × 10 Deployments × 3 replicas (6,000 pods), and the time until every
// Deployment is Available, for
//
//   - upstream: the reference control plane (hack/cluster-upstream.sh), whose
//     kube-controller-manager runs every upstream controller;
//   - kshard-1 and kshard-3: kshard with one and with three shards on the default control
//     plane, whose kube-controller-manager runs without deployment and replicaset.
//
// Every controller process gets the same client rate limits (--kube-api-qps 500,
// --kube-api-burst 1000, what hack/cluster.sh gives kube-controller-manager) and the same
// worker counts (5 deployment and 5 replicaset workers, kube-controller-manager's
// defaults), which the benchmark checks on kube-controller-manager's command line.
// Besides the time it reports the peak RSS (VmHWM) and CPU-seconds (utime+stime) of each
// controller process over the run, and the ratios to upstream. kube-controller-manager
// also runs other controllers (garbage collector, namespace, quota, …): on the reference
// cluster its figures include theirs, and for the kshard runs the default cluster's
// kube-controller-manager, which runs those others, is reported beside the shards.
//
// Run it with
//
//	go test ./test/bench/workloads -run '^$' -bench . -benchtime=1x -timeout 60m -v
//
// (bin/coordinator and bin/shard must be built: make build). The namespaces of a run are
// deleted, and their deletion waited for, before the next run starts.
package workloads

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	namespaces       = 200
	deploymentsPerNS = 10
	replicas         = 3
	// qps and burst are every controller process's client limits: kube-controller-manager
	// gets them from hack/cluster.sh, the shards from their flags.
	qps   = "500"
	burst = "1000"
	// workers is kube-controller-manager's default --concurrent-deployment-syncs and
	// --concurrent-replicaset-syncs; the shards get it explicitly.
	workers = "5"
	// createWorkers bounds the parallel creates of the burst.
	createWorkers = 32
	// available bounds one run's wait for every Deployment; gone the namespace cleanup.
	available = 20 * time.Minute
	gone      = 15 * time.Minute
	benchLbl  = "kshard.io/bench-workloads"
)

// usage is one process's figures over a run.
type usage struct {
	name    string
	peakRSS float64 // bytes
	cpu     float64 // seconds
}

// result is one run's figures.
type result struct {
	name        string
	toAvailable time.Duration
	controllers []usage // the processes that ran the deployment and replicaset controllers
	others      []usage // kube-controller-manager beside the shards (other controllers)
	coordinator []usage
}

func (r result) cpu() float64 {
	s := 0.0
	for _, u := range r.controllers {
		s += u.cpu
	}
	return s
}

func (r result) rss() (total, max float64) {
	for _, u := range r.controllers {
		total += u.peakRSS
		max = maxF(max, u.peakRSS)
	}
	return total, max
}

func maxF(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

func BenchmarkWorkloads(b *testing.B) {
	kf := framework.Get(b)
	uf := framework.Upstream(b)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	kf.RequireKCMWithout(b, "replicaset", "deployment")
	for _, f := range []*framework.Framework{uf, kf} {
		checkKCMFlags(b, f)
	}
	b.Logf("burst: %d namespaces x %d Deployments x %d replicas = %d pods; every controller process: --kube-api-qps %s --kube-api-burst %s, %s deployment and %s replicaset workers",
		namespaces, deploymentsPerNS, replicas, namespaces*deploymentsPerNS*replicas, qps, burst, workers, workers)

	var results []result
	run := func(name string, f *framework.Framework, shards int) {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := runBurst(b, name, f, kf, shards)
				results = append(results, r)
				report(b, r, results[0])
			}
		})
	}
	run("upstream", uf, 0)
	run("kshard-1", kf, 1)
	run("kshard-3", kf, 3)
	summary(b, results)
}

// checkKCMFlags makes sure the cluster's kube-controller-manager runs with the client
// limits and worker counts the shards are given, so the comparison is fair.
func checkKCMFlags(b *testing.B, f *framework.Framework) {
	b.Helper()
	pid, err := f.ComponentPid("kube-controller-manager")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		b.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	flags := map[string]string{}
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		flags[k] = v
	}
	want := map[string]string{"kube-api-qps": qps, "kube-api-burst": burst, "concurrent-deployment-syncs": "", "concurrent-replicaset-syncs": ""}
	for k, v := range want {
		if flags[k] != v {
			b.Fatalf("%s: kube-controller-manager runs --%s=%q, the benchmark gives the shards %q (empty: kube-controller-manager's default, %s)", f.ClusterDir(), k, flags[k], v, workers)
		}
	}
}

// runBurst runs one burst on f: with shards > 0 kshard's controllers (on the default
// cluster), else the cluster's own kube-controller-manager.
func runBurst(b *testing.B, name string, f, kf *framework.Framework, shards int) result {
	b.StopTimer()
	ctx := context.Background()
	client := f.LoadClient(b)
	load := framework.Burst{Run: "wl-" + strings.ToLower(f.RunID+"-"+name), Label: benchLbl,
		Namespaces: namespaces, PerNamespace: deploymentsPerNS, Replicas: replicas, Workers: createWorkers}
	nss := load.CreateNamespaces(b, client)
	defer f.DeleteNamespaces(b, load, client, gone)

	kcmPid, err := f.ComponentPid("kube-controller-manager")
	if err != nil {
		b.Fatal(err)
	}
	var procs []framework.Metered
	if shards == 0 {
		procs = append(procs, framework.Metered{Name: "kube-controller-manager (all controllers)", Pid: kcmPid, Role: "controller", ResetPeak: true})
	} else {
		procs = append(procs, framework.Metered{Name: "kube-controller-manager (others)", Pid: kcmPid, Role: "other", ResetPeak: true})
		k := kf.NewKShard(b, framework.KShardOptions{ShardArgs: []string{
			"--controllers", "replicaset,deployment", "--kube-api-qps", qps, "--kube-api-burst", burst,
			"--concurrent-deployment-syncs", workers, "--concurrent-replicaset-syncs", workers,
		}, KCMTimings: true})
		for _, s := range k.StartSet(b, shards) {
			procs = append(procs, framework.Metered{Name: s.Name, Pid: s.Pid(), Role: "controller", ResetPeak: true})
		}
		procs = append(procs, framework.Metered{Name: "coordinator", Pid: k.Coordinators[0].Pid(), Role: "coordinator", ResetPeak: true})
		defer k.KillAll()
	}
	meter := framework.StartMeter(b, procs...)

	b.StartTimer()
	start := time.Now()
	load.CreateDeployments(b, client, nss)
	b.Logf("%s: %d Deployments created in %s", name, load.Deployments(), time.Since(start).Round(time.Millisecond))
	load.WaitComplete(ctx, b, client, load.Deployments(), available)
	took := time.Since(start)
	b.StopTimer()

	r := result{name: name, toAvailable: took}
	for _, u := range meter.Stop(b) {
		pu := usage{name: u.Name, peakRSS: u.PeakRSSBytes, cpu: u.CPUSeconds}
		switch u.Role {
		case "controller":
			r.controllers = append(r.controllers, pu)
		case "other":
			r.others = append(r.others, pu)
		default:
			r.coordinator = append(r.coordinator, pu)
		}
	}
	return r
}

func report(b *testing.B, r, upstream result) {
	total, peak := r.rss()
	b.ReportMetric(r.toAvailable.Seconds(), "s-to-available")
	b.ReportMetric(r.cpu(), "controller-cpu-s")
	b.ReportMetric(total/(1<<20), "controller-peak-RSS-MiB")
	b.ReportMetric(peak/(1<<20), "max-process-peak-RSS-MiB")
	if r.name == upstream.name {
		return
	}
	utotal, _ := upstream.rss()
	b.ReportMetric(r.toAvailable.Seconds()/upstream.toAvailable.Seconds(), "time-vs-upstream")
	b.ReportMetric(r.cpu()/upstream.cpu(), "cpu-vs-upstream")
	b.ReportMetric(total/utotal, "RSS-vs-upstream")
	b.ReportMetric(total/float64(len(r.controllers))/(1<<20), "RSS-per-shard-MiB")
	for _, o := range r.others {
		b.ReportMetric(o.cpu, "kcm-others-cpu-s")
		b.ReportMetric(o.peakRSS/(1<<20), "kcm-others-peak-RSS-MiB")
	}
}

// summary logs a table of every run and writes it to the artifacts folder.
func summary(b *testing.B, results []result) {
	if len(results) == 0 {
		return
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tto Available\tvs upstream\tcontroller CPU-s\tvs upstream\tpeak RSS (sum)\tvs upstream\tRSS per process\tprocesses")
	up := results[0]
	upTotal, _ := up.rss()
	for _, r := range results {
		total, _ := r.rss()
		var procs []string
		for _, u := range append(append(append([]usage{}, r.controllers...), r.others...), r.coordinator...) {
			procs = append(procs, fmt.Sprintf("%s %.0f MiB %.1f CPU-s", u.name, u.peakRSS/(1<<20), u.cpu))
		}
		sort.Strings(procs)
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.1f\t%.2f\t%.0f MiB\t%.2f\t%.0f MiB\t%s\n", r.name, r.toAvailable.Round(100*time.Millisecond),
			r.toAvailable.Seconds()/up.toAvailable.Seconds(), r.cpu(), r.cpu()/up.cpu(), total/(1<<20), total/upTotal,
			total/float64(len(r.controllers))/(1<<20), strings.Join(procs, "; "))
	}
	_ = tw.Flush()
	b.Logf("summary (upstream's kube-controller-manager also runs every other controller; for kshard, kube-controller-manager (others) runs them):\n%s", sb.String())
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	b.Logf("summary written to %s", path)
}

package largecluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	fixtureLabel = "kshard.io/bench-large"
	nsPrefix     = "lc-"
	image        = "registry.k8s.io/pause:3.10"
	// kube-controller-manager's defaults, given to every controller process.
	qps     = "20"
	burst   = "30"
	workers = "5"
	// The populating shards' settings: fast, not measured.
	populateQPS     = "1000"
	populateBurst   = "2000"
	populateWorkers = "20"
	createWorkers   = 32
	partitions      = partition.DefaultCount
	// The coordinator's defaults: --session-ttl, --fencing-margin, --membership-debounce,
	// --membership-max-debounce.
	sessionTTL  = 28 * time.Second
	margin      = 2 * time.Second
	debounce    = 3 * time.Second
	maxDebounce = 15 * time.Second
	pollEvery   = 100 * time.Millisecond
	mib         = 1 << 20
)

// Sizes and knobs; the defaults are the size the goals are set for (see doc.go).
var (
	namespaces       = framework.EnvInt("KSHARD_BENCH_NAMESPACES", 10000)
	deploymentsPerNS = framework.EnvInt("KSHARD_BENCH_DEPLOYMENTS_PER_NS", 1)
	replicas         = int32(framework.EnvInt("KSHARD_BENCH_REPLICAS", 5))
	churnRate        = envFloat("KSHARD_BENCH_CHURN_RATE", 2)
	churnFor         = time.Duration(framework.EnvInt("KSHARD_BENCH_CHURN_SECONDS", 120)) * time.Second
	settleFor        = time.Duration(framework.EnvInt("KSHARD_BENCH_SETTLE_SECONDS", 30)) * time.Second
	populateShards   = framework.EnvInt("KSHARD_BENCH_POPULATE_SHARDS", 2)
	repetitions      = framework.EnvInt("KSHARD_BENCH_REPETITIONS", 1)
	runs             = framework.EnvList("KSHARD_BENCH_RUNS", "upstream,kshard-1,kshard-2,kshard-4")
	profileDir       = os.Getenv("KSHARD_BENCH_PROFILE_DIR")
	extraShardArgs   = strings.Fields(os.Getenv("KSHARD_BENCH_SHARD_ARGS"))
	seed             = int64(framework.EnvInt("KSHARD_BENCH_SEED", int(time.Now().UnixNano()%1e9)))
	// readyLimit bounds a run's wait for Ready, convergeLimit a wait for Deployments to
	// be Available again, populateLimit the first population.
	readyLimit    = 20 * time.Minute
	convergeLimit = 10 * time.Minute
	populateLimit = 120 * time.Minute
)

func envFloat(name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		panic(fmt.Sprintf("%s=%q: want a positive number", name, v))
	}
	return f
}

func nsName(i int) string     { return fmt.Sprintf("%s%05d", nsPrefix, i) }
func deployName(j int) string { return fmt.Sprintf("app-%d", j) }

// procFigures is one process's figures over a run.
type procFigures struct {
	name, role string
	peakRSS    float64 // VmHWM at the end of the churn (bytes)
	steadyRSS  float64 // mean VmRSS during the churn (bytes)
	cpuStart   float64 // CPU-seconds from the start to Ready
	cpuChurn   float64 // CPU-seconds during the churn
	// wireStart and wireChurn are the bytes the API server sent the process (its proxy).
	wireStart, wireChurn float64
	// limiterWait is the client rate limiter's summed wait over the run (seconds), from
	// the process's own metrics; -1 when unknown.
	limiterWait float64
	ready       time.Duration // a shard's first Ready with partitions
}

// apiBytes are deltas of the API server's own metrics over a window.
type apiBytes struct {
	list, watch  map[string]float64 // bytes by resource
	watchEvents  float64
	listRequests float64
}

func (a apiBytes) total() (list, watch float64) {
	for _, v := range a.list {
		list += v
	}
	for _, v := range a.watch {
		watch += v
	}
	return
}

// result is one run's figures.
type result struct {
	name          string
	shards        int
	toReady       time.Duration
	firstNS       string
	firstRS       time.Duration // first change: until the ReplicaSet's spec.replicas followed
	firstObserved time.Duration // until the Deployment's observedGeneration caught up
	drained       time.Duration // from Ready until the controllers' queues were first empty
	churnChanges  int
	churnErrors   int
	churnCaughtUp time.Duration // after the churn's end, until every changed Deployment was Available
	controllers   []procFigures
	others        []procFigures // coordinator, kube-apiserver, etcd, the cluster's kube-controller-manager, scheduler, kwok
	apiStart      apiBytes
	apiChurn      apiBytes
	busyStart     float64 // machine busy cores, mean over the start
	busyChurn     float64
	apiserverRSS  float64
	// deletions: for each Deployment deleted, until its last pod was gone (the garbage
	// collector's runs only).
	deletions []time.Duration
}

func (r result) other(name string) procFigures {
	for _, o := range r.others {
		if o.name == name {
			return o
		}
	}
	return procFigures{}
}

func (r result) maxControllerRSS() (peak, steady float64) {
	for _, c := range r.controllers {
		peak = max(peak, c.peakRSS)
		steady = max(steady, c.steadyRSS)
	}
	return
}

func (r result) sumController(f func(procFigures) float64) float64 {
	s := 0.0
	for _, c := range r.controllers {
		s += f(c)
	}
	return s
}

// bench holds what the runs share.
type bench struct {
	f      *framework.Framework
	client kubernetes.Interface
	apiURL *url.URL
	rng    *rand.Rand
	// runStart is when the current run's controller processes started.
	runStart time.Time
	// depleted are the namespaces whose Deployment a run deleted or replaced (the garbage
	// collector's runs): without pods until the fixture is restored.
	depleted map[string]bool
}

func BenchmarkLargeCluster(b *testing.B) {
	f := framework.Get(b)
	f.RequireKCMWithout(b, benchMode.controllers...)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	cfg := rest.CopyConfig(f.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(f.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	bn := &bench{f: f, client: client, apiURL: u, rng: rand.New(rand.NewSource(seed)), depleted: map[string]bool{}}
	b.Logf("cluster %s: %d namespaces x %d Deployments x %d replicas = %d pods; controllers %s at --kube-api-qps %s --kube-api-burst %s %s; churn %.1f/s for %s after %s; seed %d",
		f.ClusterDir(), namespaces, deploymentsPerNS, replicas, namespaces*deploymentsPerNS*int(replicas), benchMode.key, qps, burst, strings.Join(benchMode.workerArgs, " "), churnRate, churnFor, settleFor, seed)
	bn.populate(b)

	cases := []struct {
		name   string
		shards int
	}{{"upstream", 0}, {"kshard-1", 1}, {"kshard-2", 2}, {"kshard-4", 4}}
	var results []result
	// Repetitions go round the cases (upstream, kshard-1, …, upstream, …), so that a drift of
	// the machine's load spreads over every case.
	for rep := 0; rep < repetitions; rep++ {
		for _, c := range cases {
			if !slices.Contains(runs, c.name) {
				continue
			}
			b.Run(c.name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					r := bn.run(b, c.name, c.shards)
					results = append(results, r)
					report(b, r)
				}
			})
			// Written after every run, so that a stopped benchmark leaves its figures.
			summary(b, results, false)
			if benchMode.gcQuota && restoreEach {
				// The run deleted Deployments' pods, and no Deployment controller ran.
				bn.populate(b)
				clear(bn.depleted)
			}
		}
	}
	summary(b, results, true)
}

// populate makes the fixture: what is missing of it is created, replica counts set, and
// kshard runs until every Deployment is Available.
func (bn *bench) populate(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	existing := map[string]bool{}
	nsl, err := bn.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: fixtureLabel})
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range nsl.Items {
		existing[ns.Name] = true
	}
	var missing []string
	for i := 0; i < namespaces; i++ {
		if !existing[nsName(i)] {
			missing = append(missing, nsName(i))
		}
	}
	parallel(b, len(missing), func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: missing[i], Labels: map[string]string{fixtureLabel: "fixture"}}}
		_, err := bn.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	deps := bn.listDeployments(b)
	have := map[string]*appsv1.Deployment{}
	for i := range deps {
		have[deps[i].Namespace+"/"+deps[i].Name] = &deps[i]
	}
	type key struct{ ns, name string }
	var create, rescale []key
	for i := 0; i < namespaces; i++ {
		for j := 0; j < deploymentsPerNS; j++ {
			k := key{nsName(i), deployName(j)}
			d, ok := have[k.ns+"/"+k.name]
			switch {
			case !ok:
				create = append(create, k)
			case d.Spec.Replicas == nil || *d.Spec.Replicas != replicas:
				rescale = append(rescale, k)
			}
		}
	}
	parallel(b, len(create), func(i int) error { return bn.createDeployment(ctx, create[i].ns, create[i].name) })
	parallel(b, len(rescale), func(i int) error {
		return bn.scale(ctx, rescale[i].ns, rescale[i].name, replicas)
	})
	b.Logf("fixture: %d namespaces and %d Deployments created, %d rescaled (%s)", len(missing), len(create), len(rescale), time.Since(start).Round(time.Second))
	populateControllers := "replicaset,deployment"
	var populateArgs []string
	if benchMode.gcQuota {
		bn.populateGCQuota(b)
		// The quotas' statuses are made by the populating shards too, so that no measured
		// run starts by writing 10,000 of them.
		populateControllers += ",resourcequota"
		populateArgs = []string{"--concurrent-resource-quota-syncs", populateWorkers}
	}
	if n, example := bn.incomplete(b); n == 0 {
		b.Logf("fixture: every Deployment is Available")
		return
	} else {
		b.Logf("fixture: %d Deployments not Available or quotas not up to date (e.g. %v): running %d populating shards at --kube-api-qps %s", n, example, populateShards, populateQPS)
	}
	// With kube-controller-manager's timings (a 15 s Lease, a 28 s session TTL): the
	// tests' short ones (4 s, 3 s renew deadline) lost the Lease every few minutes while an
	// API server loaded by making the fixture answered slowly, and each new leader waits
	// out its grace.
	k := bn.f.NewKShard(b, framework.KShardOptions{KCMTimings: true, ShardArgs: append([]string{
		"--controllers", populateControllers, "--kube-api-qps", populateQPS, "--kube-api-burst", populateBurst,
		"--concurrent-deployment-syncs", populateWorkers, "--concurrent-replicaset-syncs", populateWorkers,
	}, populateArgs...)})
	// No GuardAlone here: its check would run until the whole benchmark ends and take the
	// measured runs' coordinators for intruders. Each measured run has its own guard.
	coord := k.StartCoordinator("populate-coordinator")
	for i := 1; i <= populateShards; i++ {
		k.StartShard(fmt.Sprintf("populate-shard-%d", i))
	}
	defer k.KillAll()
	deadline := time.Now().Add(populateLimit)
	last := time.Now()
	for restarts := 1; ; {
		n, example := bn.incomplete(b)
		if n == 0 {
			break
		}
		if coord.Exited() {
			// A coordinator that cannot renew its Lease in time exits, as
			// kube-controller-manager does, and its pod is restarted; here nothing else
			// would restart it, and the shards would wait for it until populateLimit (an
			// API server slowed by making 10,000 namespaces on a loaded machine did that).
			b.Logf("fixture: the populating coordinator exited (see %s); starting it again at %s", coord.LogPath, coord.GRPCAddr)
			coord = k.StartCoordinatorAt(fmt.Sprintf("populate-coordinator-%d", restarts), coord.GRPCAddr)
			restarts++
		}
		if time.Now().After(deadline) {
			b.Fatalf("fixture: %d Deployments not Available or quotas not up to date after %s, e.g. %v", n, populateLimit, example)
		}
		if time.Since(last) > 30*time.Second {
			b.Logf("fixture: %d Deployments not Available or quotas not up to date yet (e.g. %v); kube-apiserver %s", n, example, bn.componentRSS("kube-apiserver"))
			last = time.Now()
		}
		time.Sleep(5 * time.Second)
	}
	b.Logf("fixture: every Deployment Available after %s; kube-apiserver %s, etcd %s", time.Since(start).Round(time.Second),
		bn.componentRSS("kube-apiserver"), bn.componentRSS("etcd"))
}

// createDeployment creates one of the fixture's Deployments (none when it exists).
func (bn *bench) createDeployment(ctx context.Context, ns, name string) error {
	d := framework.NewRollingDeployment(name, replicas, intstr.FromString("25%"), intstr.FromString("25%"), image, nil)
	d.Labels = map[string]string{fixtureLabel: "fixture"}
	_, err := bn.client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// incomplete counts what the populating shards still have to do: Deployments not
// Available and, for the garbage collector and ResourceQuota, quotas not up to date.
func (bn *bench) incomplete(b *testing.B) (int, error) {
	n, example := bn.notAvailable(b)
	if benchMode.gcQuota {
		q, qexample := bn.quotasBehind(b)
		if example == nil {
			example = qexample
		}
		n += q
	}
	return n, example
}

func (bn *bench) componentRSS(name string) string {
	pid, err := bn.f.ComponentPid(name)
	if err != nil {
		return "?"
	}
	u, err := framework.ReadProcUsage(pid)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("RSS %.0f MiB", u.RSSBytes/mib)
}

// listDeployments lists the fixture's Deployments (in pages).
func (bn *bench) listDeployments(b *testing.B) []appsv1.Deployment {
	b.Helper()
	return listFixture[appsv1.Deployment](b, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return bn.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, opts)
	})
}

// listFixture lists the fixture's objects of type T that list lists (eachFixtureObject).
func listFixture[T any](b *testing.B, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) []T {
	b.Helper()
	var out []T
	eachFixtureObject(b, list, func(o runtime.Object) { out = append(out, *any(o).(*T)) })
	return out
}

// eachFixtureObject calls fn with every object of the fixture (labelled fixtureLabel)
// that list lists, in pages of 5,000 (client-go's pager).
func eachFixtureObject(b *testing.B, list func(context.Context, metav1.ListOptions) (runtime.Object, error), fn func(runtime.Object)) {
	b.Helper()
	p := pager.New(list)
	p.PageSize = 5000
	err := p.EachListItem(context.Background(), metav1.ListOptions{LabelSelector: fixtureLabel}, func(o runtime.Object) error {
		fn(o)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// notAvailable counts the fixture's Deployments that are not Available at their replicas
// (framework.DeploymentComplete), and gives one reason.
func (bn *bench) notAvailable(b *testing.B) (int, error) {
	n := 0
	var example error
	deps := bn.listDeployments(b)
	for i := range deps {
		if err := framework.DeploymentComplete(&deps[i]); err != nil {
			n++
			if example == nil {
				example = err
			}
		}
	}
	if want := namespaces * deploymentsPerNS; len(deps) < want {
		return n + want - len(deps), fmt.Errorf("%d of %d Deployments exist", len(deps), want)
	}
	return n, example
}

func (bn *bench) scale(ctx context.Context, ns, name string, n int32) error {
	_, err := bn.scaleGen(ctx, ns, name, n)
	return err
}

// scaleGen sets a Deployment's spec.replicas and returns its new generation.
func (bn *bench) scaleGen(ctx context.Context, ns, name string, n int32) (int64, error) {
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	d, err := bn.client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return d.Generation, nil
}

func parallel(b *testing.B, n int, fn func(i int) error) {
	b.Helper()
	if err := framework.Parallel(n, createWorkers, fn); err != nil {
		b.Fatal(err)
	}
}

// proc is a process whose usage a run records.
type proc struct {
	name, role string
	pid        int
	proxy      *framework.ByteProxy // controller processes
	metrics    func(ctx context.Context) (framework.Samples, error)
	pprofURL   string // base URL serving /debug/pprof, when profiles are saved
	rss        []float64
	ready      time.Duration
}

// run starts one controller set (shards == 0: upstream kube-controller-manager), measures
// it and stops it.
func (bn *bench) run(b *testing.B, name string, shards int) result {
	b.StopTimer()
	ctx := context.Background()
	r := result{name: name, shards: shards}
	// The cluster's own processes, measured over the same windows.
	var procs []*proc
	for _, c := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok"} {
		pid, err := bn.f.ComponentPid(c)
		if err != nil {
			b.Fatal(err)
		}
		role := c
		if c == "kube-controller-manager" {
			name := "kube-controller-manager (others)"
			procs = append(procs, &proc{name: name, role: "other", pid: pid})
			continue
		}
		procs = append(procs, &proc{name: role, role: "other", pid: pid})
	}
	api0 := bn.apiMetrics(b)
	// Their peak RSS is reset, so that it is taken over the run.
	metered0 := len(procs)
	startMeter := framework.StartMeter(b, metered(procs, true)...)
	busy0 := machineBusy()

	// Start.
	start := time.Now()
	var ready func(ctx context.Context) (bool, error)
	var stop func()
	if shards == 0 {
		p := &proc{name: "kube-controller-manager (" + benchMode.key + ")", role: "controller"}
		p.proxy = framework.StartByteProxy(b, bn.apiURL.Host)
		kubeconfig := framework.ProxiedKubeconfig(b, filepath.Join(bn.f.ClusterDir(), "kube-controller-manager.kubeconfig"), "kcm", p.proxy)
		args := append([]string{"--kubeconfig=" + kubeconfig, "--kube-api-qps=" + qps, "--kube-api-burst=" + burst}, benchMode.workerArgs...)
		if profileDir != "" {
			args = append(args, "--profiling=true", "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof,/debug/pprof/*")
		}
		// Both sides run exactly the two measured controllers: the fixture's namespaces
		// already have their ServiceAccounts, and the housekeeping controllers would add
		// their caches (every ServiceAccount and ConfigMap) to one side's memory.
		k := bn.f.StartKCM(b, "kcm-"+name, framework.KCMOptions{Controllers: benchMode.controllers, Args: args, NoHousekeeping: true})
		p.pid = k.Pid()
		p.metrics = k.Metrics
		p.pprofURL = k.URL
		procs = append(procs, p)
		ready = func(ctx context.Context) (bool, error) { return benchMode.upstreamReady(ctx, k) }
		stop = k.Kill
	} else {
		shardArgs := append([]string{
			"--controllers", strings.Join(benchMode.controllers, ","), "--kube-api-qps", qps, "--kube-api-burst", burst,
		}, benchMode.workerArgs...)
		if profileDir != "" {
			shardArgs = append(shardArgs, "--enable-pprof")
		}
		shardArgs = append(shardArgs, extraShardArgs...)
		// The coordinator's defaults (the framework shortens them for tests).
		k := bn.f.NewKShard(b, framework.KShardOptions{Partitions: partitions, SessionTTL: sessionTTL, Margin: margin, ShardArgs: shardArgs, KCMTimings: true, NoHousekeeping: true,
			// --expected-shards as the chart sets it: the shard Deployment's replicas.
			CoordinatorArgs: []string{"--membership-debounce=" + debounce.String(), "--membership-max-debounce=" + maxDebounce.String(),
				"--expected-shards=" + strconv.Itoa(shards)}})
		k.GuardAlone(b)
		byName := map[string]*proc{}
		for i := 1; i <= shards; i++ {
			sn := fmt.Sprintf("shard-%d", i)
			p := &proc{name: sn, role: "controller", proxy: framework.StartByteProxy(b, bn.apiURL.Host)}
			byName[sn] = p
		}
		k.SetShardArgs(func(sn string) []string {
			return []string{"--kubeconfig", framework.ProxiedKubeconfig(b, bn.f.Kubeconfig, sn, byName[sn].proxy)}
		})
		c := k.StartCoordinator("coordinator")
		procs = append(procs, &proc{name: "coordinator", role: "other", pid: c.Pid()})
		// A new leader grants nothing for its grace period (session TTL + margin), in case
		// shards of an earlier leader still hold partitions. Coordinators are long-lived and
		// shards are what restarts, so the shards start once that has passed; a cold start
		// of both adds the rest of the grace (30 s with the defaults) to the figure.
		framework.Eventually(b, time.Minute, "the coordinator leads", func(ctx context.Context) (bool, error) {
			_, err := k.Leader(ctx)
			return err == nil, err
		})
		time.Sleep(sessionTTL + margin + time.Second)
		// The start window begins with the shards, as upstream's with its process: the
		// cluster's processes, the API server's counters and the machine's busy time are
		// taken again, so that the grace period does not dilute or inflate them.
		startMeter.Stop(b)
		api0 = bn.apiMetrics(b)
		startMeter = framework.StartMeter(b, metered(procs[:metered0], true)...)
		busy0 = machineBusy()
		start = time.Now()
		var ss []*framework.Shard
		for i := 1; i <= shards; i++ {
			s := k.StartShard(fmt.Sprintf("shard-%d", i))
			p := byName[s.Name]
			p.pid = s.Pid()
			url := s.HTTPURL
			p.metrics = func(ctx context.Context) (framework.Samples, error) { return framework.Scrape(ctx, url) }
			p.pprofURL = url
			procs = append(procs, p)
			ss = append(ss, s)
		}
		ready = func(ctx context.Context) (bool, error) {
			total, all := 0.0, true
			for _, s := range ss {
				code, _, err := framework.HTTPGet(ctx, s.HTTPURL+"/readyz")
				if err != nil {
					return false, err
				}
				m, err := framework.Scrape(ctx, s.HTTPURL)
				if err != nil {
					return false, err
				}
				acq := m.Value("kshard_shard_acquired_partitions")
				p := byName[s.Name]
				if code == http.StatusOK && acq > 0 && p.ready == 0 {
					p.ready = time.Since(start)
				}
				all = all && code == http.StatusOK
				total += acq
			}
			return all && total == partitions, nil
		}
		stop = k.KillAll
	}
	defer stop()

	bn.runStart = start
	peak := watchHeapPeak(b, name, procs, start)
	// A CPU profile of every controller process over the first 20 s of its start.
	var startProfile sync.WaitGroup
	if profileDir != "" {
		startProfile.Add(1)
		go func() {
			defer startProfile.Done()
			// The processes were just started: wait until each one's HTTP server answers.
			// A process that is still not up after 15 s gets no start profile (logged).
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
				for _, p := range procs {
					if p.pprofURL == "" {
						continue
					}
					if _, _, err := framework.HTTPGet(ctx, p.pprofURL+"/healthz"); err != nil {
						return false, nil
					}
				}
				return true, nil
			})
			bn.saveProfiles(b, name, procs, "cpu-start", "/debug/pprof/profile?seconds=20", time.Minute)
		}()
	}
	b.StartTimer()
	deadline := start.Add(readyLimit)
	var lastErr error
	for {
		ok, err := ready(ctx)
		if ok {
			break
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not Ready after %s (last error: %v)", name, readyLimit, lastErr)
		}
		time.Sleep(pollEvery)
	}
	r.toReady = time.Since(start)
	b.StopTimer()
	api1 := bn.apiMetrics(b)
	cpuStart := startCPU(b, startMeter, procs)
	busy1 := machineBusy()
	r.apiStart = apiDelta(api0, api1)
	r.busyStart = busy1.cores(busy0)
	wire1 := map[*proc]float64{}
	for _, p := range procs {
		if p.proxy != nil {
			wire1[p] = float64(p.proxy.Down())
		}
	}
	b.Logf("%s: Ready after %s", name, r.toReady.Round(10*time.Millisecond))
	// The heap as the last garbage collection before Ready left it: the start's transient,
	// which sets the peak RSS, where the settled profile below no longer shows it.
	bn.saveProfiles(b, name, procs, "heap-ready", "/debug/pprof/heap", 30*time.Second)

	// The first change, right after Ready.
	touched := map[string]int32{}
	if benchMode.gcQuota {
		r.firstNS, r.firstRS, r.firstObserved = bn.firstGCQuotaChange(b)
		b.Logf("%s: first change in %s: quota replenished after %s, dependent collected after %s", name, r.firstNS,
			r.firstRS.Round(time.Millisecond), r.firstObserved.Round(time.Millisecond))
	} else {
		r.firstNS, r.firstRS, r.firstObserved = bn.firstChange(b)
		b.Logf("%s: first change in %s: ReplicaSet after %s, Deployment observed after %s", name, r.firstNS,
			r.firstRS.Round(time.Millisecond), r.firstObserved.Round(time.Millisecond))
		touched[r.firstNS+"/"+deployName(0)] = replicas + 1
	}

	// The start leaves every Deployment and ReplicaSet in the queues: the churn starts once
	// they are worked off and the settle period has passed.
	r.drained = bn.waitDrained(b, procs) - r.toReady
	b.Logf("%s: the queues were empty %s after Ready", name, r.drained.Round(100*time.Millisecond))
	startProfile.Wait()
	time.Sleep(settleFor)
	bn.saveProfiles(b, name, procs, "heap", "/debug/pprof/heap?gc=1", 30*time.Second)
	if benchMode.gcQuota {
		// Before the churn, on a quiet cluster: Deployments deleted, until their last pod is gone.
		r.deletions = bn.deletionLatency(b)
		d := framework.SpreadOf(durationsSeconds(r.deletions))
		b.Logf("%s: %d Deployments deleted, last pod gone after %s s (median [min–max])", name, len(r.deletions), d.Format("%.2f"))
	}

	// The steady churn.
	api2 := bn.apiMetrics(b)
	churnMeter := framework.StartMeter(b, metered(procs, false)...)
	busy2 := machineBusy()
	wire2 := map[*proc]float64{}
	for _, p := range procs {
		if p.proxy != nil {
			wire2[p] = float64(p.proxy.Down())
		}
	}
	var profWG sync.WaitGroup
	if profileDir != "" && churnFor >= 40*time.Second {
		profWG.Add(1)
		go func() {
			defer profWG.Done()
			time.Sleep(churnFor/2 - 15*time.Second)
			bn.saveProfiles(b, name, procs, "cpu", "/debug/pprof/profile?seconds=30", 60*time.Second)
		}()
	}
	var gcChurn *gcQuotaChurn
	step := bn.scaleStep(b, touched)
	if benchMode.gcQuota {
		gcChurn = bn.newGCQuotaChurn(b)
		step = gcChurn.step
	}
	r.churnChanges, r.churnErrors = bn.churn(b, procs, step)
	profWG.Wait()
	api3 := bn.apiMetrics(b)
	churnUse := churnMeter.Stop(b)
	peak.finish(b, procs)
	busy3 := machineBusy()
	r.apiChurn = apiDelta(api2, api3)
	r.busyChurn = busy3.cores(busy2)
	for i, p := range procs {
		f := procFigures{name: p.name, role: p.role, peakRSS: churnUse[i].PeakRSSBytes, ready: p.ready,
			cpuStart: cpuStart[i], cpuChurn: churnUse[i].CPUSeconds, limiterWait: -1}
		for _, v := range p.rss {
			f.steadyRSS += v / float64(len(p.rss))
		}
		if p.proxy != nil {
			f.wireStart = wire1[p]
			f.wireChurn = float64(p.proxy.Down()) - wire2[p]
		}
		if p.metrics != nil {
			if m, err := p.metrics(ctx); err == nil {
				f.limiterWait = m.Value("rest_client_rate_limiter_duration_seconds_sum") + m.Value("kshard_rest_client_rate_limiter_duration_seconds_sum")
			}
		}
		if p.role == "controller" {
			r.controllers = append(r.controllers, f)
		} else {
			r.others = append(r.others, f)
		}
	}
	r.apiserverRSS = r.other("kube-apiserver").peakRSS

	if benchMode.gcQuota {
		// Catch up (the churn's dependents and the replaced Deployments' pods collected),
		// then stop; the benchmark makes the fixture whole again after the run (not
		// measured), once the run's guard against other kshard instances is gone.
		r.churnCaughtUp = gcChurn.finish(b)
		stop()
		b.Logf("%s: churn of %d steps (%d errors) caught up %s after its end", name, r.churnChanges, r.churnErrors,
			r.churnCaughtUp.Round(100*time.Millisecond))
		return r
	}
	// Catch up, then put the changed Deployments back so the next run starts from the same
	// state; neither is measured.
	caught := time.Now()
	bn.waitAvailable(b, touched)
	r.churnCaughtUp = time.Since(caught)
	var back []string
	for k, n := range touched {
		if n != replicas {
			back = append(back, k)
			touched[k] = replicas // before the parallel writes: a map is not safe for them
		}
	}
	parallel(b, len(back), func(i int) error {
		ns, dn, _ := strings.Cut(back[i], "/")
		return bn.scale(ctx, ns, dn, replicas)
	})
	bn.waitAvailable(b, touched)
	stop()
	b.Logf("%s: churn of %d changes (%d errors) caught up %s after its end; %d Deployments put back", name, r.churnChanges, r.churnErrors,
		r.churnCaughtUp.Round(100*time.Millisecond), len(back))
	return r
}

// waitDrained waits until the deployment and replicaset work queues of every controller
// process are empty (workqueue_depth, kshard_workqueue_depth) and returns the time since
// the run's start.
func (bn *bench) waitDrained(b *testing.B, procs []*proc) time.Duration {
	b.Helper()
	deadline := time.Now().Add(convergeLimit)
	for {
		depth, known := 0.0, 0
		for _, p := range procs {
			if p.role != "controller" || p.metrics == nil {
				continue
			}
			m, err := p.metrics(context.Background())
			if err != nil {
				known = -1000
				continue
			}
			if benchMode.queues == nil {
				depth += m.Value("workqueue_depth") + m.Value("kshard_workqueue_depth")
				known++
			}
			for _, q := range benchMode.queues {
				depth += m.Value("workqueue_depth", `name="`+q+`"`) + m.Value("kshard_workqueue_depth", `name="`+q+`"`)
				known++
			}
		}
		if known > 0 && depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the controllers' queues still hold %.0f keys after %s", depth, convergeLimit)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(bn.runStart)
}

// firstChange scales the first Deployment of a random namespace by one and times the
// controllers' reactions.
func (bn *bench) firstChange(b *testing.B) (string, time.Duration, time.Duration) {
	b.Helper()
	ctx := context.Background()
	ns := nsName(bn.rng.Intn(namespaces))
	name := deployName(0)
	want := replicas + 1
	start := time.Now()
	gen, err := bn.scaleGen(ctx, ns, name, want)
	if err != nil {
		b.Fatal(err)
	}
	var rsAfter, observedAfter time.Duration
	deadline := start.Add(convergeLimit)
	for rsAfter == 0 || observedAfter == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("first change in %s not acted on after %s", ns, convergeLimit)
		}
		if rsAfter == 0 {
			rss, err := bn.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, rs := range rss.Items {
					if owned(rs.OwnerReferences, name) && rs.Spec.Replicas != nil && *rs.Spec.Replicas == want {
						rsAfter = time.Since(start)
					}
				}
			}
		}
		if observedAfter == 0 {
			d, err := bn.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && d.Status.ObservedGeneration >= gen {
				observedAfter = time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ns, rsAfter, observedAfter
}

func owned(refs []metav1.OwnerReference, name string) bool {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller && r.Kind == "Deployment" && r.Name == name {
			return true
		}
	}
	return false
}

// churn runs step churnRate times a second for churnFor and samples the processes' RSS
// every second; step returns false when it changed nothing (an error, logged by step).
func (bn *bench) churn(b *testing.B, procs []*proc, step func(ctx context.Context) bool) (changes, errors int) {
	b.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			for _, p := range procs {
				if u, err := framework.ReadProcUsage(p.pid); err == nil {
					p.rss = append(p.rss, u.RSSBytes)
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	interval := time.Duration(float64(time.Second) / churnRate)
	end := time.Now().Add(churnFor)
	next := time.Now()
	for next.Before(end) {
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		changes++
		if !step(ctx) {
			errors++
		}
	}
	close(done)
	wg.Wait()
	return changes, errors
}

// scaleStep is the Deployment controllers' churn step: a Deployment in a random namespace
// scaled between replicas and replicas+1; touched records the replicas it was left at.
func (bn *bench) scaleStep(b *testing.B, touched map[string]int32) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		ns := nsName(bn.rng.Intn(namespaces))
		dn := deployName(bn.rng.Intn(deploymentsPerNS))
		k := ns + "/" + dn
		n, ok := touched[k]
		if !ok {
			n = replicas
		}
		if n == replicas {
			n = replicas + 1
		} else {
			n = replicas
		}
		if err := bn.scale(ctx, ns, dn, n); err != nil {
			b.Logf("churn: %s: %v", k, err)
			return false
		}
		touched[k] = n
		return true
	}
}

// waitAvailable waits until every Deployment in touched is Available at its replicas.
func (bn *bench) waitAvailable(b *testing.B, touched map[string]int32) {
	b.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(convergeLimit)
	for {
		left := 0
		var example error
		for k := range touched {
			ns, dn, _ := strings.Cut(k, "/")
			d, err := bn.client.AppsV1().Deployments(ns).Get(ctx, dn, metav1.GetOptions{})
			if err == nil {
				err = framework.DeploymentComplete(d)
			}
			if err != nil {
				left++
				example = err
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d changed Deployments not Available after %s, e.g. %v", left, convergeLimit, example)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// metered returns procs as a framework.Meter takes them; resetPeak resets their peak RSS
// when the meter starts.
func metered(procs []*proc, resetPeak bool) []framework.Metered {
	out := make([]framework.Metered, len(procs))
	for i, p := range procs {
		out[i] = framework.Metered{Name: p.name, Role: p.role, Pid: p.pid, ResetPeak: resetPeak}
	}
	return out
}

// startCPU stops m, the meter of the processes that ran before the run (the first ones of
// procs), and returns the CPU-seconds of every process of procs over the start: for those
// since m started, for the ones the run started since they started.
func startCPU(b *testing.B, m *framework.Meter, procs []*proc) []float64 {
	b.Helper()
	var out []float64
	for _, u := range m.Stop(b) {
		out = append(out, u.CPUSeconds)
	}
	for _, p := range procs[len(out):] {
		u, err := framework.ReadProcUsage(p.pid)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		out = append(out, u.CPUSeconds)
	}
	return out
}

// apiMetrics scrapes kube-apiserver's /metrics.
func (bn *bench) apiMetrics(b *testing.B) framework.Samples {
	b.Helper()
	body, err := bn.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("kube-apiserver /metrics: %v", err)
	}
	return framework.ParseMetrics(string(body))
}

// apiDelta sums LIST response bytes and watch event bytes by resource between two scrapes.
func apiDelta(before, after framework.Samples) apiBytes {
	sum := func(s framework.Samples) (list, watch map[string]float64, events, lists float64) {
		list, watch = map[string]float64{}, map[string]float64{}
		for _, x := range s {
			switch x.Name {
			case "apiserver_response_sizes_sum":
				if x.Labels["verb"] == "LIST" {
					list[x.Labels["resource"]] += x.Value
				}
			case "apiserver_response_sizes_count":
				if x.Labels["verb"] == "LIST" {
					lists += x.Value
				}
			case "apiserver_watch_events_sizes_sum":
				res := x.Labels["resource"]
				if res == "" {
					res = strings.ToLower(x.Labels["kind"]) + "s"
				}
				watch[res] += x.Value
			case "apiserver_watch_events_total":
				events += x.Value
			}
		}
		return
	}
	l0, w0, e0, c0 := sum(before)
	l1, w1, e1, c1 := sum(after)
	d := apiBytes{list: map[string]float64{}, watch: map[string]float64{}, watchEvents: e1 - e0, listRequests: c1 - c0}
	for k, v := range l1 {
		if dv := v - l0[k]; dv > 0 {
			d.list[k] = dv
		}
	}
	for k, v := range w1 {
		if dv := v - w0[k]; dv > 0 {
			d.watch[k] = dv
		}
	}
	return d
}

// busy is the machine's CPU time from /proc/stat (jiffies).
type busy struct {
	at        time.Time
	busy, all float64
}

func machineBusy() busy {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return busy{at: time.Now()}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var all, idle float64
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		all += x
		if i == 3 || i == 4 { // idle, iowait
			idle += x
		}
	}
	return busy{at: time.Now(), busy: all - idle, all: all}
}

// cores is the mean number of busy cores between b0 and b.
func (b busy) cores(b0 busy) float64 {
	secs := b.at.Sub(b0.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return (b.busy - b0.busy) / 100 / secs
}

var pprofClient = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, kube-controller-manager's self-signed serving certificate
}}

// saveProfiles writes a profile of every controller process to profileDir as
// <run>-<process>.<kind>, fetched in parallel.
func (bn *bench) saveProfiles(b *testing.B, run string, procs []*proc, kind, path string, timeout time.Duration) {
	if profileDir == "" {
		return
	}
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		b.Error(err)
		return
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		if p.pprofURL == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			saveProfile(b, run, p, kind, path, timeout)
		}()
	}
	wg.Wait()
}

// saveProfile fetches one profile of p into profileDir as <run>-<process>.<kind>.
func saveProfile(b *testing.B, run string, p *proc, kind, path string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.pprofURL+path, nil)
	resp, err := pprofClient.Do(req)
	if err != nil {
		b.Logf("%s profile of %s: %v", kind, p.name, err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("%s profile of %s: HTTP %d %v", kind, p.name, resp.StatusCode, err)
		return
	}
	file := filepath.Join(profileDir, fmt.Sprintf("%s-%s.%s", run, strings.Fields(p.name)[0], kind))
	if err := os.WriteFile(file, body, 0o644); err != nil {
		b.Log(err)
	}
}

func report(b *testing.B, r result) {
	peak, steady := r.maxControllerRSS()
	b.ReportMetric(r.toReady.Seconds(), "s-to-ready")
	b.ReportMetric(r.firstRS.Seconds(), "s-first-change-rs")
	b.ReportMetric(r.firstObserved.Seconds(), "s-first-change-observed")
	b.ReportMetric(r.drained.Seconds(), "s-queues-empty-after-ready")
	b.ReportMetric(peak/mib, "max-process-peak-RSS-MiB")
	b.ReportMetric(steady/mib, "max-process-steady-RSS-MiB")
	b.ReportMetric(r.sumController(func(p procFigures) float64 { return p.peakRSS })/mib, "sum-peak-RSS-MiB")
	b.ReportMetric(r.sumController(func(p procFigures) float64 { return p.cpuStart }), "controller-cpu-s-start")
	b.ReportMetric(r.sumController(func(p procFigures) float64 { return p.cpuChurn }), "controller-cpu-s-churn")
	b.ReportMetric(r.sumController(func(p procFigures) float64 { return p.wireStart })/mib, "controller-wire-MiB-start")
	b.ReportMetric(r.sumController(func(p procFigures) float64 { return p.wireChurn })/mib, "controller-wire-MiB-churn")
	l, w := r.apiStart.total()
	b.ReportMetric((l+w)/mib, "apiserver-list+watch-MiB-start")
	l, w = r.apiChurn.total()
	b.ReportMetric((l+w)/mib, "apiserver-list+watch-MiB-churn")
	b.ReportMetric(r.other("kube-apiserver").cpuStart+r.other("etcd").cpuStart, "apiserver+etcd-cpu-s-start")
	b.ReportMetric(r.other("kube-apiserver").cpuChurn+r.other("etcd").cpuChurn, "apiserver+etcd-cpu-s-churn")
	if len(r.deletions) > 0 {
		b.ReportMetric(deletionMedian(r), "s-deletion-median")
		b.ReportMetric(deletionMax(r), "s-deletion-max")
	}
}

func deletionMedian(r result) float64 {
	return framework.SpreadOf(durationsSeconds(r.deletions)).Median
}

func deletionMax(r result) float64 {
	return framework.SpreadOf(durationsSeconds(r.deletions)).Max
}

// summary logs tables of every run (median and range over repetitions) with the goals'
// check, and writes them to the artifacts folder.
func summary(b *testing.B, results []result, log bool) {
	if len(results) == 0 {
		return
	}
	var order []string
	by := map[string][]result{}
	for _, r := range results {
		if _, ok := by[r.name]; !ok {
			order = append(order, r.name)
		}
		by[r.name] = append(by[r.name], r)
	}
	col := func(rs []result, f func(result) float64) framework.Spread {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return framework.SpreadOf(xs)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d namespaces x %d Deployments x %d replicas = %d pods; controllers %s at --kube-api-qps %s --kube-api-burst %s %s; churn %.1f changes/s for %s after %s; seed %d\n",
		namespaces, deploymentsPerNS, replicas, namespaces*deploymentsPerNS*int(replicas), benchMode.key, qps, burst, strings.Join(benchMode.workerArgs, " "), churnRate, churnFor, settleFor, seed)
	if benchMode.gcQuota {
		fmt.Fprintf(&sb, "and per namespace %d ConfigMaps, %d Secrets, 1 ResourceQuota; %d Deployments deleted per run\n", configMapsPerNS, secretsPerNS, deletions)
	}
	fmt.Fprintf(&sb, "median [min–max] over repetitions; RSS and CPU per controller process are the largest shard's unless 'sum'\n\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\treps\tstart to Ready s\tfirst change: %s s / %s s\tqueues empty after Ready s\tpeak RSS MiB (max proc / sum)\tsteady RSS MiB (max proc / sum)\tCPU-s start (sum)\tCPU-s churn (sum)\tCPU-s churn max proc\twire MiB start (max proc / sum)\twire MiB churn (max proc / sum)\tlimiter wait s (sum)\tdeletion to last pod gone s (median / max)\n",
		benchMode.firstLabels[0], benchMode.firstLabels[1])
	maxOf := func(r result, f func(procFigures) float64) float64 {
		m := 0.0
		for _, c := range r.controllers {
			m = max(m, f(c))
		}
		return m
	}
	for _, n := range order {
		rs := by[n]
		sum := func(f func(procFigures) float64) framework.Spread {
			return col(rs, func(r result) float64 { return r.sumController(f) })
		}
		mx := func(f func(procFigures) float64) framework.Spread {
			return col(rs, func(r result) float64 { return maxOf(r, f) })
		}
		peak := func(p procFigures) float64 { return p.peakRSS / mib }
		steady := func(p procFigures) float64 { return p.steadyRSS / mib }
		ws := func(p procFigures) float64 { return p.wireStart / mib }
		wc := func(p procFigures) float64 { return p.wireChurn / mib }
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s / %s\t%s\t%s / %s\t%s / %s\t%s\t%s\t%s\t%s / %s\t%s / %s\t%s\t%s / %s\n", n, len(rs),
			col(rs, func(r result) float64 { return r.toReady.Seconds() }).Format("%.1f"),
			col(rs, func(r result) float64 { return r.firstRS.Seconds() }).Format("%.2f"),
			col(rs, func(r result) float64 { return r.firstObserved.Seconds() }).Format("%.2f"),
			col(rs, func(r result) float64 { return r.drained.Seconds() }).Format("%.1f"),
			mx(peak).Format("%.0f"), sum(peak).Format("%.0f"), mx(steady).Format("%.0f"), sum(steady).Format("%.0f"),
			sum(func(p procFigures) float64 { return p.cpuStart }).Format("%.1f"),
			sum(func(p procFigures) float64 { return p.cpuChurn }).Format("%.1f"),
			mx(func(p procFigures) float64 { return p.cpuChurn }).Format("%.1f"),
			mx(ws).Format("%.1f"), sum(ws).Format("%.1f"), mx(wc).Format("%.1f"), sum(wc).Format("%.1f"),
			sum(func(p procFigures) float64 { return p.limiterWait }).Format("%.1f"),
			col(rs, deletionMedian).Format("%.2f"), col(rs, deletionMax).Format("%.2f"))
	}
	_ = tw.Flush()

	fmt.Fprintf(&sb, "\nthe API server's own metrics (every client; deltas over the window) and the cluster's processes\n\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\twindow\tLIST MiB (requests)\twatch MiB (events)\tpods / replicasets / deployments / namespaces MiB (list+watch)\tapiserver CPU-s\tetcd CPU-s\tkcm (others) CPU-s\tscheduler+kwok CPU-s\tcoordinator CPU-s\tmachine busy cores (of 2)\tapiserver peak RSS MiB")
	for _, n := range order {
		rs := by[n]
		for _, w := range []string{"start", "churn"} {
			pick := func(r result) apiBytes {
				if w == "start" {
					return r.apiStart
				}
				return r.apiChurn
			}
			cpu := func(name string) framework.Spread {
				return col(rs, func(r result) float64 {
					o := r.other(name)
					if w == "start" {
						return o.cpuStart
					}
					return o.cpuChurn
				})
			}
			res := func(name string) framework.Spread {
				return col(rs, func(r result) float64 { a := pick(r); return (a.list[name] + a.watch[name]) / mib })
			}
			sk := col(rs, func(r result) float64 {
				s, k := r.other("kube-scheduler"), r.other("kwok")
				if w == "start" {
					return s.cpuStart + k.cpuStart
				}
				return s.cpuChurn + k.cpuChurn
			})
			fmt.Fprintf(tw, "%s\t%s\t%s (%s)\t%s (%s)\t%s / %s / %s / %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, w,
				col(rs, func(r result) float64 { l, _ := pick(r).total(); return l / mib }).Format("%.1f"),
				col(rs, func(r result) float64 { return pick(r).listRequests }).Format("%.0f"),
				col(rs, func(r result) float64 { _, x := pick(r).total(); return x / mib }).Format("%.1f"),
				col(rs, func(r result) float64 { return pick(r).watchEvents }).Format("%.0f"),
				res("pods").Format("%.1f"), res("replicasets").Format("%.1f"), res("deployments").Format("%.1f"), res("namespaces").Format("%.1f"),
				cpu("kube-apiserver").Format("%.1f"), cpu("etcd").Format("%.1f"), cpu("kube-controller-manager (others)").Format("%.1f"),
				sk.Format("%.1f"), cpu("coordinator").Format("%.1f"),
				col(rs, func(r result) float64 {
					if w == "start" {
						return r.busyStart
					}
					return r.busyChurn
				}).Format("%.2f"),
				col(rs, func(r result) float64 { return r.apiserverRSS / mib }).Format("%.0f"))
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(&sb, "\nper run and process\n\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tprocess\tReady after s\tpeak RSS MiB\tsteady RSS MiB\tCPU-s start\tCPU-s churn\twire MiB start\twire MiB churn\tlimiter wait s\tfirst change ns\tchurn changes (errors), caught up after s")
	for _, r := range results {
		for _, c := range r.controllers {
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d (%d), %.1f\n", r.name, c.name, c.ready.Seconds(),
				c.peakRSS/mib, c.steadyRSS/mib, c.cpuStart, c.cpuChurn, c.wireStart/mib, c.wireChurn/mib, c.limiterWait,
				r.firstNS, r.churnChanges, r.churnErrors, r.churnCaughtUp.Seconds())
		}
	}
	_ = tw.Flush()

	if up, ok := by["upstream"]; ok {
		fmt.Fprintf(&sb, "\ngoals, medians: memory per shard <= 1.15 x upstream / N + 25 MiB; start to Ready <= upstream's\n\n")
		tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "run\tlargest shard peak RSS MiB\tbound (from upstream's peak)\tmet\tlargest shard steady RSS MiB\tbound (from upstream's steady)\tmet\tstart to Ready s\tupstream's s\tmet")
		upPeak := col(up, func(r result) float64 { p, _ := r.maxControllerRSS(); return p / mib }).Median
		upSteady := col(up, func(r result) float64 { _, s := r.maxControllerRSS(); return s / mib }).Median
		upReady := col(up, func(r result) float64 { return r.toReady.Seconds() }).Median
		yes := func(ok bool) string {
			if ok {
				return "yes"
			}
			return "NO"
		}
		for _, n := range order {
			rs := by[n]
			if rs[0].shards == 0 {
				continue
			}
			nShards := float64(rs[0].shards)
			peak := col(rs, func(r result) float64 { p, _ := r.maxControllerRSS(); return p / mib }).Median
			steady := col(rs, func(r result) float64 { _, s := r.maxControllerRSS(); return s / mib }).Median
			ready := col(rs, func(r result) float64 { return r.toReady.Seconds() }).Median
			pb, sbnd := 1.15*upPeak/nShards+25, 1.15*upSteady/nShards+25
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%.0f\t%.0f\t%s\t%.1f\t%.1f\t%s\n", n, peak, pb, yes(peak <= pb), steady, sbnd, yes(steady <= sbnd),
				ready, upReady, yes(ready <= upReady))
		}
		_ = tw.Flush()
		if benchMode.gcQuota {
			fmt.Fprintf(&sb, "\ngoals, medians: one shard's memory <= upstream's + 10 %%; deletion to last pod gone no worse than upstream's (median and max)\n\n")
			tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "run\tpeak RSS MiB\tbound\tmet\tsteady RSS MiB\tbound\tmet\tdeletion median s\tupstream's\tmet\tdeletion max s\tupstream's\tmet")
			upMed, upMax := col(up, deletionMedian).Median, col(up, deletionMax).Median
			for _, n := range order {
				rs := by[n]
				if rs[0].shards == 0 {
					continue
				}
				med, mx := col(rs, deletionMedian).Median, col(rs, deletionMax).Median
				memory := "\t-\t-\t-\t-\t-\t-"
				if rs[0].shards == 1 {
					peak := col(rs, func(r result) float64 { p, _ := r.maxControllerRSS(); return p / mib }).Median
					steady := col(rs, func(r result) float64 { _, s := r.maxControllerRSS(); return s / mib }).Median
					memory = fmt.Sprintf("\t%.0f\t%.0f\t%s\t%.0f\t%.0f\t%s", peak, 1.1*upPeak, yes(peak <= 1.1*upPeak), steady, 1.1*upSteady, yes(steady <= 1.1*upSteady))
				}
				fmt.Fprintf(tw, "%s%s\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%s\n", n, memory, med, upMed, yes(med <= upMed), mx, upMax, yes(mx <= upMax))
			}
			_ = tw.Flush()
		}
	}
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	if log {
		b.Logf("summary:\n%s", sb.String())
		b.Logf("summary written to %s", path)
	}
}

package scaleout

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/framework"
)

// The service level objectives a rate must hold to count as sustained.
const (
	queueWaitSLO = time.Second
	reconcileSLO = 5 * time.Second
	// drain bounds the wait, after a step's window, for every Deployment to complete; a
	// step that does not drain fails.
	drain = 3 * time.Minute
	// capacityControllers are the controllers whose SLOs are checked (each on its own).
	revAnnotation = "kshard.io/bench-rev"
)

var capacityControllers = []string{"deployment", "replicaset"}

// step is one offered rate's outcome for one shard count.
type step struct {
	shards       int
	rate         float64 // changes per second offered
	window       float64 // seconds changes were offered
	span         float64 // seconds from the first change to drained (or the drain bound)
	achieved     float64 // changes per second the client sent (patches that succeeded)
	queueWaitP99 float64 // seconds, the worst controller's
	reconcileP99 float64 // seconds, the worst controller's
	drained      bool
	apiserver    float64 // cores over the window and drain
	etcd         float64
	shardCPU     float64 // cores, all shards together
	// perShard is what each shard did over the window and drain (design-placement.md
	// step S0: how much of the gap to linear is placement, how much per-shard cost).
	perShard []shardWork
}

// shardWork is one shard's share of a step.
type shardWork struct {
	requests   float64 // API requests its controllers' clients sent
	limitWait  float64 // seconds those requests waited in the client rate limiters, summed
	reconciles float64 // completed reconciles of the capacity controllers
	namespaces float64 // namespaces of the partitions it worked at the step's end
}

// diagnosis summarises perShard: API requests per change sent (all shards), the busiest
// shard's share of the requests and of the namespaces, and the busiest shard's limiter
// wait per second of the step's span.
func (s step) diagnosis() (reqPerChange, busiestReqShare, busiestNSShare, busiestWait float64) {
	var req, ns, maxReq, maxNS float64
	for _, w := range s.perShard {
		req += w.requests
		ns += w.namespaces
		maxReq = math.Max(maxReq, w.requests)
		maxNS = math.Max(maxNS, w.namespaces)
		if s.span > 0 {
			busiestWait = math.Max(busiestWait, w.limitWait/s.span)
		}
	}
	if sent := s.achieved * s.window; sent > 0 {
		reqPerChange = req / sent
	}
	if req > 0 {
		busiestReqShare = maxReq / req
	}
	if ns > 0 {
		busiestNSShare = maxNS / ns
	}
	return reqPerChange, busiestReqShare, busiestNSShare, busiestWait
}

func (s step) ok() bool {
	return s.drained && s.queueWaitP99 <= queueWaitSLO.Seconds() && s.reconcileP99 <= reconcileSLO.Seconds() &&
		s.achieved >= 0.95*s.rate
}

// BenchmarkCapacity draws the capacity curve: for 1, 2, 3 and 4 shards at
// kube-controller-manager's client limits, the highest sustained rate of Deployment
// changes (scale changes and rollouts, half each, on Deployments picked at random over
// the namespaces) at which the deployment and replicaset controllers both hold a
// queue-wait p99 <= 1 s and a reconcile p99 <= 5 s. See doc.go.
func BenchmarkCapacity(b *testing.B) {
	kf := framework.Get(b)
	kf.RequireKCMWithout(b, "replicaset", "deployment")
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	shardCounts := framework.EnvInts("KSHARD_BENCH_CAPACITY_SHARDS", "1,2,3,4")
	rates := framework.EnvInts("KSHARD_BENCH_CAPACITY_RATES", "1,2,3,4,6,8,10,12,16,20,24,32")
	refine := framework.EnvInt("KSHARD_BENCH_CAPACITY_REFINE", 2)
	window := time.Duration(framework.EnvInt("KSHARD_BENCH_CAPACITY_WINDOW_SECONDS", 60)) * time.Second
	arrivals := strings.TrimSpace(os.Getenv(arrivalsEnv))
	if arrivals == "" {
		arrivals = arrivalsPoisson
	}
	if arrivals != arrivalsPoisson && arrivals != arrivalsRegular {
		b.Fatalf("%s=%q: want %s or %s", arrivalsEnv, arrivals, arrivalsPoisson, arrivalsRegular)
	}
	load := framework.Burst{Run: strings.ToLower("cap-" + kf.RunID), Label: label,
		Namespaces: framework.EnvInt("KSHARD_BENCH_CAPACITY_NAMESPACES", 400), PerNamespace: 1, Replicas: 2}
	ps := placements("count")
	if len(ps) != 1 {
		b.Fatalf("KSHARD_BENCH_PLACEMENT=%s: the capacity curve takes one placement per run", strings.Join(ps, ","))
	}
	placement := config{placement: ps[0]}
	b.Logf("%d namespaces x 1 Deployment x 2 replicas; offered rates %v changes/s, %s each, %s arrivals; shard counts %v; coordinators place by %s; SLOs: queue wait p99 <= %s, reconcile p99 <= %s",
		load.Namespaces, rates, window, arrivals, shardCounts, ps[0], queueWaitSLO, reconcileSLO)

	ctx := context.Background()
	client := kf.LoadClient(b)
	nss := load.CreateNamespaces(b, client)
	defer kf.DeleteNamespaces(b, load, client, gone)
	// In a sub-benchmark of its own, so that its kshard's GuardAlone ends with it.
	b.Run("populate", func(b *testing.B) { populate(b, kf, client, populateSet{load, nss}) })

	var steps []step
	for _, n := range shardCounts {
		b.Run(fmt.Sprintf("shards-%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				got := ladder(ctx, b, kf, client, load, nss, n, placement, rates, refine, window, arrivals == arrivalsPoisson)
				steps = append(steps, got...)
				b.ReportMetric(capacity(got), "sustained-changes/s")
			}
		})
	}
	writeCapacity(b, steps, shardCounts)
}

// populate fills the namespaces with their Deployments using a kshard of its own with
// high client limits, which it stops once every Deployment is complete: each of sets is a
// burst and the namespaces (of its run) its Deployments go to.
func populate(b *testing.B, f *framework.Framework, client kubernetes.Interface, sets ...populateSet) {
	b.Helper()
	start := time.Now()
	k := f.NewKShard(b, framework.KShardOptions{ShardArgs: []string{
		"--controllers", "replicaset,deployment", "--kube-api-qps", "500", "--kube-api-burst", "1000"}})
	k.StartSet(b, 1)
	want := 0
	for _, s := range sets {
		s.load.CreateDeployments(b, client, s.nss)
		want += len(s.nss) * s.load.PerNamespace
	}
	// Every set is of one run (one selector): wait for all of them at once.
	sets[0].load.WaitComplete(context.Background(), b, client, want, complete)
	k.KillAll()
	b.Logf("populated %d Deployments in %s", want, time.Since(start).Round(time.Second))
}

// populateSet is one burst's Deployments to create in nss.
type populateSet struct {
	load framework.Burst
	nss  []string
}

// ladder starts n shards at kube-controller-manager's limits, their coordinators placing
// as c says, and offers each rate in turn
// until one fails its SLOs, then narrows the capacity down between the last rate that held
// and the one that failed by refine bisection steps.
func ladder(ctx context.Context, b *testing.B, f *framework.Framework, client kubernetes.Interface, load framework.Burst, nss []string, n int, c config, rates []int, refine int, window time.Duration, poisson bool) []step {
	b.StopTimer()
	k := f.NewKShard(b, framework.KShardOptions{ShardArgs: capacityShardArgs(), CoordinatorArgs: c.coordinatorArgs(), KCMTimings: true})
	shards := k.StartSet(b, n)
	defer k.KillAll()
	apiPid, err := f.ComponentPid("kube-apiserver")
	if err != nil {
		b.Fatal(err)
	}
	etcdPid, err := f.ComponentPid("etcd")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 11))
	var out []step
	try := func(rate float64) step {
		current := resetReplicas(ctx, b, client, load.Selector(), load.Deployments(), load.Replicas)
		before := scrapeAll(ctx, b, shards)
		cpu0 := cpuOf(b, apiPid, etcdPid, shards)
		start := time.Now()
		b.StartTimer()
		sent := offer(ctx, b, client, nss, current, rate, window, poisson, rng)
		achieved := float64(sent) / time.Since(start).Seconds()
		drained := waitDrained(ctx, client, load.Selector(), load.Deployments())
		b.StopTimer()
		elapsed := time.Since(start).Seconds()
		after := scrapeAll(ctx, b, shards)
		cpu1 := cpuOf(b, apiPid, etcdPid, shards)
		s := step{shards: n, rate: rate, window: window.Seconds(), span: elapsed, achieved: achieved, drained: drained,
			apiserver: (cpu1[0] - cpu0[0]) / elapsed, etcd: (cpu1[1] - cpu0[1]) / elapsed, shardCPU: (cpu1[2] - cpu0[2]) / elapsed}
		for i := range shards {
			w := shardWork{
				requests:   after[i].Value("kshard_rest_client_requests_total") - before[i].Value("kshard_rest_client_requests_total"),
				limitWait:  after[i].Value("kshard_rest_client_rate_limiter_duration_seconds_sum") - before[i].Value("kshard_rest_client_rate_limiter_duration_seconds_sum"),
				namespaces: after[i].Value("kshard_shard_namespaces"),
			}
			for _, c := range capacityControllers {
				w.reconciles += after[i].Value("kshard_controller_reconcile_duration_seconds_count", "controller="+c) -
					before[i].Value("kshard_controller_reconcile_duration_seconds_count", "controller="+c)
			}
			s.perShard = append(s.perShard, w)
			b.Logf("  %s: %.0f requests (%.2f per change sent), limiter wait %.1f s (%.2f s/s), %.0f reconciles, %.0f namespaces",
				shards[i].Name, w.requests, w.requests/math.Max(1, float64(sent)), w.limitWait, w.limitWait/elapsed, w.reconciles, w.namespaces)
		}
		for _, c := range capacityControllers {
			s.queueWaitP99 = math.Max(s.queueWaitP99, p99(before, after, "kshard_workqueue_queue_duration_seconds", "name", c))
			s.reconcileP99 = math.Max(s.reconcileP99, p99(before, after, "kshard_controller_reconcile_duration_seconds", "controller", c))
		}
		b.Logf("%d shards, %.2f changes/s offered: %.2f/s sent, queue wait p99 %.2fs, reconcile p99 %.2fs, drained %v; apiserver %.2f cores, etcd %.2f, shards %.2f → %s",
			n, rate, s.achieved, s.queueWaitP99, s.reconcileP99, s.drained, s.apiserver, s.etcd, s.shardCPU, map[bool]string{true: "holds", false: "fails"}[s.ok()])
		out = append(out, s)
		return s
	}
	// Up the ladder to the first rate that fails, then halve the gap between the highest
	// rate that held and the lowest that failed refine times.
	held, failed := 0.0, 0.0
	for _, r := range rates {
		if try(float64(r)).ok() {
			held = float64(r)
			continue
		}
		failed = float64(r)
		break
	}
	for i := 0; i < refine && failed > 0; i++ {
		mid := (held + failed) / 2
		if try(mid).ok() {
			held = mid
		} else {
			failed = mid
		}
	}
	return out
}

// capacityShardArgs are the shard flags of the capacity benchmarks: the deployment and
// replicaset controllers (and extra ones) at kube-controller-manager's client limits and
// worker counts.
func capacityShardArgs(extra ...string) []string {
	return []string{"--controllers", strings.Join(append([]string{"replicaset", "deployment"}, extra...), ","),
		"--kube-api-qps", qps, "--kube-api-burst", burst, "--concurrent-deployment-syncs", workers, "--concurrent-replicaset-syncs", workers}
}

// offer sends rate changes per second for window: each picks a namespace's Deployment at
// random and either scales it (2 ↔ 3 replicas) or rolls it out (a new pod template
// annotation), alternately (planChanges; current holds the Deployments' sizes when the
// step starts), at the times arrivalTimes gives. It returns the number of changes the API
// server accepted.
func offer(ctx context.Context, b *testing.B, client kubernetes.Interface, nss []string, current map[string]int32, rate float64, window time.Duration, poisson bool, rng *rand.Rand) int64 {
	total := int(rate * window.Seconds())
	targets := make([]int, total)
	for i := range targets {
		targets[i] = rng.IntN(len(nss))
	}
	changes := planChanges(nss, targets, current)
	at := arrivalTimes(total, rate, window, poisson, rng)
	jobs := make(chan change, total)
	var (
		sent, failed atomic.Int64
		wg           sync.WaitGroup
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				if _, err := c.send(ctx, client); err != nil {
					failed.Add(1)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	start := time.Now()
	for i, c := range changes {
		time.Sleep(time.Until(start.Add(at[i])))
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Logf("%d of %d changes failed", n, total)
	}
	return sent.Load()
}

// The arrival processes of BenchmarkCapacity's changes (KSHARD_BENCH_CAPACITY_ARRIVALS).
const (
	arrivalsEnv = "KSHARD_BENCH_CAPACITY_ARRIVALS"
	// arrivalsPoisson: independent changes, as many users make them. Thinning a Poisson
	// process gives Poisson processes, so every shard of N sees the same kind of arrivals,
	// at 1/N the rate, as one shard sees at the whole rate, and the curve compares like
	// with like.
	arrivalsPoisson = "poisson"
	// arrivalsRegular: one change every 1/rate s, the benchmark's first runs (1 to 4).
	// One shard then gets a perfectly regular stream while each of N shards gets a random
	// subset of it, burstier at the same utilisation: the comparison favours one shard.
	arrivalsRegular = "regular"
)

// arrivalTimes are the send times, from the window's start, of n changes at rate per
// second: Poisson arrivals conditioned on n within window (n uniform times, sorted), so
// that every step offers its rate over its window; or one every 1/rate s.
func arrivalTimes(n int, rate float64, window time.Duration, poisson bool, rng *rand.Rand) []time.Duration {
	at := make([]time.Duration, n)
	for i := range at {
		if poisson {
			at[i] = time.Duration(rng.Float64() * float64(window))
		} else {
			at[i] = time.Duration(float64(i) / rate * float64(time.Second))
		}
	}
	slices.Sort(at)
	return at
}

// change is one offered change to Deployment name of namespace: a scale to replicas, or
// a rollout (replicas 0).
type change struct {
	namespace, name string
	replicas        int32
}

// capacityDeployment is the one Deployment of each of BenchmarkCapacity's namespaces.
const capacityDeployment = "app-0"

// deploymentKey names a Deployment in the maps of sizes (namespace/name).
func deploymentKey(namespace, name string) string { return namespace + "/" + name }

// patch is the change's strategic merge patch: the new replicas, or a new pod template
// annotation (a rollout).
func (c change) patch() []byte {
	if c.replicas == 0 {
		return fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:"%d"}}}}}`, revAnnotation, time.Now().UnixNano())
	}
	return fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, c.replicas)
}

// send patches the change and returns the Deployment as the API server stored it (its
// generation is the one the deployment controller must observe).
func (c change) send(ctx context.Context, client kubernetes.Interface) (*appsv1.Deployment, error) {
	return client.AppsV1().Deployments(c.namespace).Patch(ctx, c.name, types.StrategicMergePatchType, c.patch(), metav1.PatchOptions{})
}

// toggler makes the capacity workload's changes, alternately a scale and a rollout. A
// scale toggles the Deployment between 2 and 3 replicas from the size it has at that
// point (the sizes it was made with, by deploymentKey; a Deployment missing from them is
// at 2), so that no scale change is a no-op. A patch that sets the replicas a Deployment
// already has costs the controllers nothing but would still count as a change, which
// lowered the requests per change of later steps (issue 31: the toggle assumed every
// Deployment started each step at 2).
type toggler struct {
	n    int
	size map[string]int32
}

func newToggler(current map[string]int32) *toggler {
	size := make(map[string]int32, len(current))
	for k, r := range current {
		size[k] = r
	}
	return &toggler{size: size}
}

// next returns the next change, to Deployment name of namespace.
func (t *toggler) next(namespace, name string) change {
	c := change{namespace: namespace, name: name}
	t.n++
	if t.n%2 == 0 {
		return c
	}
	key := deploymentKey(namespace, name)
	c.replicas = 3
	if r, ok := t.size[key]; ok && r == 3 {
		c.replicas = 2
	}
	t.size[key] = c.replicas
	return c
}

// planChanges turns the namespaces picked (targets, indexes into nss) into changes of
// their capacityDeployment, alternately a scale and a rollout (toggler; current holds the
// Deployments' sizes when the step starts, by deploymentKey).
func planChanges(nss []string, targets []int, current map[string]int32) []change {
	t := newToggler(current)
	out := make([]change, len(targets))
	for i, n := range targets {
		out[i] = t.next(nss[n], capacityDeployment)
	}
	return out
}

// resetReplicas scales every Deployment selected by selector (want of them) that is not
// at replicas back to it and waits until all have completed, so that every step starts
// from the same state: a rollout of 3 replicas costs the controllers about half again as
// many requests as one of 2 (issue 31), and without the reset the share of 3-replica
// rollouts grew from step to step. It returns the Deployments' sizes (deploymentKey →
// spec.replicas) after the reset.
func resetReplicas(ctx context.Context, b *testing.B, client kubernetes.Interface, selector string, want int, replicas int32) map[string]int32 {
	b.Helper()
	list, err := client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]int32, len(list.Items))
	reset := 0
	for _, d := range list.Items {
		out[deploymentKey(d.Namespace, d.Name)] = replicas
		if d.Spec.Replicas != nil && *d.Spec.Replicas == replicas {
			continue
		}
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if _, err := client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		reset++
	}
	if reset > 0 && !waitDrained(ctx, client, selector, want) {
		b.Fatalf("%d Deployments scaled back to %d replicas did not complete within %s", reset, replicas, drain)
	}
	b.Logf("reset %d Deployments to %d replicas before the step", reset, replicas)
	return out
}

// waitDrained waits until every Deployment selected by selector (want of them) has
// completed its rollout, i.e. the window's changes are all worked.
func waitDrained(ctx context.Context, client kubernetes.Interface, selector string, want int) bool {
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		list, err := client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err == nil {
			done := 0
			for i := range list.Items {
				if framework.DeploymentComplete(&list.Items[i]) == nil {
					done++
				}
			}
			if done == want {
				return true
			}
		}
		time.Sleep(time.Second)
	}
	return false
}

func scrapeAll(ctx context.Context, b *testing.B, shards []*framework.Shard) []framework.Samples {
	var out []framework.Samples
	for _, s := range shards {
		m, err := framework.Scrape(ctx, s.HTTPURL)
		if err != nil {
			b.Fatalf("%s: %v", s.Name, err)
		}
		out = append(out, m)
	}
	return out
}

// cpuOf returns the CPU-seconds used so far by the API server, etcd and all shards.
func cpuOf(b *testing.B, apiPid, etcdPid int, shards []*framework.Shard) [3]float64 {
	var out [3]float64
	for i, pid := range []int{apiPid, etcdPid} {
		u, err := framework.ReadProcUsage(pid)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = u.CPUSeconds
	}
	for _, s := range shards {
		u, err := framework.ReadProcUsage(s.Pid())
		if err != nil {
			b.Fatal(err)
		}
		out[2] += u.CPUSeconds
	}
	return out
}

// p99 estimates the 99th percentile of histogram name (series with label=value, summed
// over the shards) from the increase of its buckets between two scrapes, interpolating
// linearly within a bucket as Prometheus's histogram_quantile does. An empty window is 0.
func p99(before, after []framework.Samples, name, label, value string) float64 {
	buckets := map[float64]float64{}
	for i := range after {
		for _, s := range after[i] {
			if s.Name != name+"_bucket" || s.Labels[label] != value {
				continue
			}
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err != nil {
				continue
			}
			buckets[le] += s.Value - before[i].Value(name+"_bucket", label+"="+value, "le="+s.Labels["le"])
		}
	}
	return quantile(0.99, buckets)
}

// quantile is histogram_quantile over cumulative buckets keyed by upper bound.
func quantile(q float64, buckets map[float64]float64) float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || buckets[les[len(les)-1]] == 0 {
		return 0
	}
	rank := q * buckets[les[len(les)-1]]
	lower, below := 0.0, 0.0
	for _, le := range les {
		count := buckets[le]
		if count >= rank {
			if math.IsInf(le, 1) {
				return lower // the highest finite bound, as histogram_quantile answers
			}
			return lower + (le-lower)*(rank-below)/(count-below)
		}
		lower, below = le, count
	}
	return lower
}

// capacity is the highest offered rate that held its SLOs.
func capacity(steps []step) float64 {
	best := 0.0
	for _, s := range steps {
		if s.ok() {
			best = math.Max(best, s.rate)
		}
	}
	return best
}

// writeCapacity logs the table of every step and the capacity per shard count, and writes
// capacity.csv, capacity.txt and the plot capacity.svg to the artifacts folder.
func writeCapacity(b *testing.B, steps []step, shardCounts []int) {
	if len(steps) == 0 {
		return
	}
	dir := framework.ArtifactsDir(b)
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shards\toffered changes/s\tsent/s\tqueue wait p99 (s)\treconcile p99 (s)\tdrained\tSLOs\tapiserver cores\tetcd cores\tshard cores (all)\trequests/change\tbusiest shard: requests\tnamespaces\tlimiter wait s/s")
	rows := [][]string{{"shards", "offered", "sent", "queue_wait_p99_s", "reconcile_p99_s", "drained", "holds", "apiserver_cores", "etcd_cores", "shard_cores",
		"requests_per_change", "busiest_request_share", "busiest_namespace_share", "busiest_limiter_wait"}}
	for _, s := range steps {
		rpc, rs, ns, wait := s.diagnosis()
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.2f\t%.2f\t%v\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f %%\t%.1f %%\t%.2f\n", s.shards, s.rate, s.achieved, s.queueWaitP99, s.reconcileP99,
			s.drained, map[bool]string{true: "hold", false: "fail"}[s.ok()], s.apiserver, s.etcd, s.shardCPU, rpc, 100*rs, 100*ns, wait)
		rows = append(rows, []string{strconv.Itoa(s.shards), fmt.Sprint(s.rate), fmt.Sprintf("%.3f", s.achieved), fmt.Sprintf("%.3f", s.queueWaitP99),
			fmt.Sprintf("%.3f", s.reconcileP99), strconv.FormatBool(s.drained), strconv.FormatBool(s.ok()),
			fmt.Sprintf("%.3f", s.apiserver), fmt.Sprintf("%.3f", s.etcd), fmt.Sprintf("%.3f", s.shardCPU),
			fmt.Sprintf("%.3f", rpc), fmt.Sprintf("%.4f", rs), fmt.Sprintf("%.4f", ns), fmt.Sprintf("%.3f", wait)})
	}
	_ = tw.Flush()
	sb.WriteString("\ncapacity (highest offered rate holding both SLOs):")
	var points []capacityPoint
	for _, n := range shardCounts {
		var mine []step
		for _, s := range steps {
			if s.shards == n {
				mine = append(mine, s)
			}
		}
		c := capacity(mine)
		points = append(points, capacityPoint{shards: n, rate: c})
		fmt.Fprintf(&sb, " %d shard(s) %.2f/s;", n, c)
	}
	sb.WriteString("\n")
	b.Logf("capacity:\n%s", sb.String())
	if err := os.WriteFile(filepath.Join(dir, "capacity.txt"), []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	f, err := os.Create(filepath.Join(dir, "capacity.csv"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := csv.NewWriter(f).WriteAll(rows); err != nil {
		b.Error(err)
	}
	svg := filepath.Join(dir, "capacity.svg")
	if err := plotCapacity(points, steps, svg); err != nil {
		b.Error(err)
	}
	b.Logf("capacity table, CSV and plot written to %s", dir)
}

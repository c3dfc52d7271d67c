package scaleout

// The skewed workload and what is measured of it, shared by BenchmarkCapacitySkewed and
// BenchmarkBalancerSteady: the capacity workload's namespaces plus one hot namespace of
// many Deployments, a stream of changes at fixed rates, the latency of each change as
// the client sees it, and the balancer's figures from the leading coordinator.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

// skewShards is the shard count both skewed benchmarks run: the goals are at 4.
const skewShards = 4

// target is one Deployment a stream of changes may pick.
type target struct{ namespace, name string }

// skewWorkload is the capacity workload (load: namespaces of one Deployment of 2
// replicas) plus one hot namespace of hot.PerNamespace Deployments of 2 replicas. Both
// are of one run: one label selector selects every namespace and Deployment, so that the
// reset, the drain and the deletion treat them as one.
type skewWorkload struct {
	load  framework.Burst
	nss   []string
	hot   framework.Burst
	hotNS string
}

// newSkewWorkload creates the namespaces of run: namespaces uniform ones (<run>-NNN) and
// the hot one (<run>-hot), whose hotDeployments Deployments populate creates.
func newSkewWorkload(b *testing.B, client kubernetes.Interface, run string, namespaces, hotDeployments int) skewWorkload {
	b.Helper()
	load := framework.Burst{Run: run, Label: label, Namespaces: namespaces, PerNamespace: 1, Replicas: 2}
	hot := load
	hot.Namespaces, hot.PerNamespace = 1, hotDeployments
	w := skewWorkload{load: load, hot: hot, hotNS: run + "-hot"}
	w.nss = load.CreateNamespaces(b, client)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.hotNS, Labels: map[string]string{label: run, framework.RunLabel: "bench"}}}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	return w
}

// populate creates every Deployment of w (see populate).
func (w skewWorkload) populate(b *testing.B, f *framework.Framework, client kubernetes.Interface) {
	b.Run("populate", func(b *testing.B) {
		populate(b, f, client, populateSet{w.load, w.nss}, populateSet{w.hot, []string{w.hotNS}})
	})
}

// createProbes creates in every namespace of w the ConfigMap the audit controller
// reconciles (audit.Label), so that the audit logs record who worked each namespace.
func (w skewWorkload) createProbes(b *testing.B, client kubernetes.Interface) {
	b.Helper()
	nss := w.namespaces()
	err := framework.Parallel(len(nss), 32, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{audit.Label: "true"}}}
		_, err := client.CoreV1().ConfigMaps(nss[i]).Create(context.Background(), cm, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func (w skewWorkload) selector() string { return w.load.Selector() }

// deployments counts every Deployment of w, the hot namespace's included.
func (w skewWorkload) deployments() int { return w.load.Deployments() + w.hot.Deployments() }

// namespaces are w's namespaces, the hot one last.
func (w skewWorkload) namespaces() []string { return append(slices.Clone(w.nss), w.hotNS) }

// others are the Deployments of the uniform namespaces.
func (w skewWorkload) others() []target {
	out := make([]target, len(w.nss))
	for i, ns := range w.nss {
		out[i] = target{ns, capacityDeployment}
	}
	return out
}

// hotTargets are the hot namespace's Deployments.
func (w skewWorkload) hotTargets() []target {
	out := make([]target, w.hot.PerNamespace)
	for i := range out {
		out[i] = target{w.hotNS, fmt.Sprintf("app-%d", i)}
	}
	return out
}

// rateSplit returns the rates (changes/s) at which the uniform namespaces and the hot
// one are changed: total × (1 − hotShare) and total × hotShare. Without the hot
// namespace (withHot false) its changes are not sent, so that the others keep the same
// per-namespace rate in every configuration.
func rateSplit(total, hotShare float64, withHot bool) (others, hot float64) {
	others = total * (1 - hotShare)
	if withHot {
		hot = total * hotShare
	}
	return others, hot
}

// sentChange is one change the API server accepted.
type sentChange struct {
	key        string // deploymentKey
	hot        bool
	generation int64     // the Deployment's metadata.generation after the patch
	at         time.Time // when the patch's response arrived
}

// part is one stream of changes: to Deployments of targets picked at random, at rate
// changes per second.
type part struct {
	targets []target
	hot     bool
	rate    float64
}

// stream sends the capacity workload's changes (toggler: scale 2 ↔ 3 and rollout,
// alternately) and keeps what the API server accepted. One toggler across every start,
// so that no scale change of a later phase is a no-op.
type stream struct {
	client kubernetes.Interface
	mu     sync.Mutex
	rng    *rand.Rand
	toggle *toggler
	sent   []sentChange
	failed int
}

func newStream(client kubernetes.Interface, current map[string]int32, seed uint64) *stream {
	return &stream{client: client, rng: rand.New(rand.NewPCG(seed, 31)), toggle: newToggler(current)}
}

// start sends the changes of parts, each at its rate from now on, until the returned
// stop is called; stop waits for the patches in flight. 32 senders patch, as offer's do,
// so a slow API server lowers the rate sent (which is reported) rather than queueing.
func (s *stream) start(parts ...part) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	type job struct {
		c   change
		hot bool
	}
	jobs := make(chan job)
	var senders, producers sync.WaitGroup
	for range 32 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for j := range jobs {
				// Not ctx: a patch once started completes, so that the toggler's sizes stay true.
				d, err := j.c.send(context.Background(), s.client)
				at := time.Now()
				s.mu.Lock()
				if err != nil {
					s.failed++
				} else {
					s.sent = append(s.sent, sentChange{key: deploymentKey(j.c.namespace, j.c.name), hot: j.hot, generation: d.Generation, at: at})
				}
				s.mu.Unlock()
			}
		}()
	}
	begin := time.Now()
	for _, p := range parts {
		if p.rate <= 0 || len(p.targets) == 0 {
			continue
		}
		producers.Add(1)
		go func() {
			defer producers.Done()
			for i := 0; ; i++ {
				t := time.NewTimer(time.Until(begin.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				s.mu.Lock()
				tg := p.targets[s.rng.IntN(len(p.targets))]
				c := s.toggle.next(tg.namespace, tg.name)
				s.mu.Unlock()
				select {
				case jobs <- job{c, p.hot}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return func() {
		cancel()
		producers.Wait()
		close(jobs)
		senders.Wait()
	}
}

// between returns the changes whose response arrived in [from, to), and how many patches
// failed in all so far.
func (s *stream) between(from, to time.Time) ([]sentChange, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentChange
	for _, c := range s.sent {
		if !c.at.Before(from) && c.at.Before(to) {
			out = append(out, c)
		}
	}
	return out, s.failed
}

// observation is a Deployment's status.observedGeneration reaching generation at a time.
type observation struct {
	generation int64
	at         time.Time
}

// observer keeps, per Deployment, when its status.observedGeneration rose: what the
// latency of a change is read from (docs/design-placement.md §6, "How skewed latency is
// measured": the shards' queue histograms are per controller, not per namespace).
type observer struct {
	mu   sync.Mutex
	seen map[string][]observation
}

func newObserver() *observer { return &observer{seen: map[string][]observation{}} }

// record notes that Deployment key was seen with observedGeneration generation at at;
// only rises are kept.
func (o *observer) record(key string, generation int64, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	obs := o.seen[key]
	if n := len(obs); n > 0 && obs[n-1].generation >= generation {
		return
	}
	o.seen[key] = append(obs, observation{generation, at})
}

// latency returns how long after at Deployment key's observedGeneration first reached
// generation, and whether it has. The watch event may beat the patch's response to the
// client: that counts as 0.
func (o *observer) latency(key string, generation int64, at time.Time) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ob := range o.seen[key] {
		if ob.generation >= generation {
			return max(0, ob.at.Sub(at)), true
		}
	}
	return 0, false
}

// startObserver watches the Deployments selected by selector (one informer, one watch)
// into a new observer; stop ends the watch.
func startObserver(b *testing.B, client kubernetes.Interface, selector string) (o *observer, stop func()) {
	b.Helper()
	o = newObserver()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	inf := factory.Apps().V1().Deployments().Informer()
	see := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			o.record(deploymentKey(d.Namespace, d.Name), d.Status.ObservedGeneration, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}); err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the Deployment informer did not sync")
	}
	return o, func() { cancel(); factory.Shutdown() }
}

// waitObserved waits until every change of sent has been observed, at most bound, and
// returns how many were not.
func waitObserved(o *observer, sent []sentChange, bound time.Duration) int {
	deadline := time.Now().Add(bound)
	for {
		missing := 0
		for _, c := range sent {
			if _, ok := o.latency(c.key, c.generation, c.at); !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// latencySummary is the distribution of the latencies of some changes, in seconds. A
// change never observed counts as +Inf, so that it shows in the tail and the max.
type latencySummary struct {
	changes, unobserved int
	p50, p99, max       float64
}

// summarize sorts ds (the latencies observed, seconds) and summarises them with
// unobserved more at +Inf.
func summarize(ds []float64, unobserved int) latencySummary {
	all := slices.Clone(ds)
	for range unobserved {
		all = append(all, math.Inf(1))
	}
	sort.Float64s(all)
	s := latencySummary{changes: len(all), unobserved: unobserved, p50: sampleQuantile(0.5, all), p99: sampleQuantile(0.99, all)}
	if len(all) > 0 {
		s.max = all[len(all)-1]
	}
	return s
}

func (s latencySummary) String() string {
	if s.changes == 0 {
		return "-"
	}
	out := fmt.Sprintf("%.2f / %.2f / %.2f", s.p50, s.p99, s.max)
	if s.unobserved > 0 {
		out += fmt.Sprintf(" (%d unobserved)", s.unobserved)
	}
	return out
}

// sampleQuantile is the q-quantile of sorted by nearest rank: the ⌈q·n⌉-th smallest
// (an observed value, never an interpolation); 0 for no samples.
func sampleQuantile(q float64, sorted []float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// latencies summarises the latencies of sent, those of the uniform namespaces (others)
// and the hot one's apart.
func latencies(o *observer, sent []sentChange) (others, hot latencySummary) {
	var ds [2][]float64
	var missing [2]int
	for _, c := range sent {
		i := 0
		if c.hot {
			i = 1
		}
		if d, ok := o.latency(c.key, c.generation, c.at); ok {
			ds[i] = append(ds[i], d.Seconds())
		} else {
			missing[i]++
		}
	}
	return summarize(ds[0], missing[0]), summarize(ds[1], missing[1])
}

// balancerStats are the leading coordinator's balancer figures
// (pkg/sharding/coordinatorrpc/metrics.go).
type balancerStats struct {
	moves  map[string]float64 // kshard_coordinator_balancer_moves_total by reason
	rounds map[string]float64 // kshard_coordinator_balancer_rounds_total by outcome
	hot    float64            // kshard_coordinator_hot_partitions
	// fair is the default domain's fair share of cost per shard (kshard_coordinator_load_fair
	// {group=""}): a partition above it is hot (docs/design-placement.md §2.5 rule 6).
	fair float64
	// gap is kshard_coordinator_ownership_gap_seconds's cumulative buckets by upper
	// bound, gapCount its count: one observation per partition acquired.
	gap      map[float64]float64
	gapCount float64
}

// balancerStatsOf reads the balancer figures from a coordinator's scrape.
func balancerStatsOf(m framework.Samples) balancerStats {
	s := balancerStats{moves: map[string]float64{}, rounds: map[string]float64{}, gap: map[float64]float64{}}
	for _, x := range m {
		switch x.Name {
		case "kshard_coordinator_balancer_moves_total":
			s.moves[x.Labels["reason"]] += x.Value
		case "kshard_coordinator_balancer_rounds_total":
			s.rounds[x.Labels["outcome"]] += x.Value
		case "kshard_coordinator_hot_partitions":
			s.hot = x.Value
		case "kshard_coordinator_load_fair":
			if x.Labels["group"] == "" {
				s.fair = x.Value
			}
		case "kshard_coordinator_ownership_gap_seconds_bucket":
			if le, err := strconv.ParseFloat(x.Labels["le"], 64); err == nil {
				s.gap[le] += x.Value
			}
		case "kshard_coordinator_ownership_gap_seconds_count":
			s.gapCount = x.Value
		}
	}
	return s
}

// since is s less the counters of an earlier scrape (the gauges stay s's).
func (s balancerStats) since(before balancerStats) balancerStats {
	out := balancerStats{moves: map[string]float64{}, rounds: map[string]float64{}, hot: s.hot, fair: s.fair, gap: map[float64]float64{},
		gapCount: s.gapCount - before.gapCount}
	for k, v := range s.moves {
		out.moves[k] = v - before.moves[k]
	}
	for k, v := range s.rounds {
		out.rounds[k] = v - before.rounds[k]
	}
	for k, v := range s.gap {
		out.gap[k] = v - before.gap[k]
	}
	return out
}

// scrapeBalancer scrapes the leading coordinator of k.
func scrapeBalancer(ctx context.Context, b *testing.B, k *framework.KShard) balancerStats {
	b.Helper()
	l, err := k.Leader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	m, err := framework.Scrape(ctx, l.HTTPURL)
	if err != nil {
		b.Fatalf("coordinator: %v", err)
	}
	return balancerStatsOf(m)
}

// formatCounts formats counts by key, in key order, leaving out zeros ("-" for none).
func formatCounts(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "-"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %g", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// hotPlacement is where the hot namespace's partition is and what else its shard holds.
type hotPlacement struct {
	partition uint32
	owner     string
	// load is the partition's last load its owner reported (requests/s), as the
	// coordinator accepted it.
	load float64
	// sharing are the other namespaces that hash to the hot partition (they share its
	// fate, docs/design-placement.md risk R4).
	sharing []string
	// alongside are the namespaces of the other partitions the owner holds.
	alongside []string
}

// isolated says whether the hot partition's shard holds no other partition with a
// namespace: the balancer's hot isolation (docs/design-placement.md §2.5 rule 6; empty
// partitions may stay).
func (h hotPlacement) isolated() bool { return h.owner != "" && len(h.alongside) == 0 }

func (h hotPlacement) String() string {
	if h.owner == "" {
		return fmt.Sprintf("partition %d unowned", h.partition)
	}
	s := fmt.Sprintf("partition %d (load %.2f/s) on %s, ", h.partition, h.load, h.owner)
	if h.isolated() {
		s += "isolated"
	} else {
		s += fmt.Sprintf("with %d other namespaces (e.g. %s)", len(h.alongside), strings.Join(h.alongside[:min(3, len(h.alongside))], ", "))
	}
	if len(h.sharing) > 0 {
		s += fmt.Sprintf("; %d namespaces share the partition", len(h.sharing))
	}
	return s
}

// placeHot finds hotNS's partition in owners (partition → shard) and sorts every other
// namespace of all by whether it shares that partition or another of the same shard.
func placeHot(owners map[uint32]string, pmap partition.Map, hotNS string, all []string) hotPlacement {
	p := uint32(pmap.For(hotNS))
	h := hotPlacement{partition: p, owner: owners[p]}
	for _, ns := range all {
		if ns == hotNS {
			continue
		}
		q := uint32(pmap.For(ns))
		switch {
		case q == p:
			h.sharing = append(h.sharing, ns)
		case h.owner != "" && owners[q] == h.owner:
			h.alongside = append(h.alongside, ns)
		}
	}
	sort.Strings(h.sharing)
	sort.Strings(h.alongside)
	return h
}

// hotPlacementOf reads hotNS's placement from the leading coordinator of k, against
// every namespace of the cluster.
func hotPlacementOf(ctx context.Context, k *framework.KShard, client kubernetes.Interface, hotNS string) (hotPlacement, error) {
	l, err := k.Leader(ctx)
	if err != nil {
		return hotPlacement{}, err
	}
	a, err := l.Assignments(ctx)
	if err != nil {
		return hotPlacement{}, err
	}
	pmap, err := partition.NewMap(a.PartitionCount)
	if err != nil {
		return hotPlacement{}, err
	}
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return hotPlacement{}, err
	}
	all := make([]string, len(list.Items))
	for i, ns := range list.Items {
		all[i] = ns.Name
	}
	h := placeHot(framework.Owners(a), pmap, hotNS, all)
	o, err := k.NamespaceOwner(ctx, hotNS)
	if err != nil {
		return hotPlacement{}, err
	}
	h.load = o.PartitionLoad
	return h, nil
}

// limiterWaits returns each shard's seconds waited in its clients' rate limiters per
// second of a window of seconds, between two scrapes of the shards.
func limiterWaits(before, after []framework.Samples, seconds float64) []float64 {
	out := make([]float64, len(after))
	const name = "kshard_rest_client_rate_limiter_duration_seconds_sum"
	for i := range after {
		out[i] = (after[i].Value(name) - before[i].Value(name)) / seconds
	}
	return out
}

// formatPerShard formats per-shard counts in shard order.
func formatPerShard(per map[string]int) string {
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			parts[i] = fmt.Sprintf("unowned %d", per[n])
			continue
		}
		parts[i] = fmt.Sprintf("%s %d", n, per[n])
	}
	return strings.Join(parts, ", ")
}

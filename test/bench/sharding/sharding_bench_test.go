// Package sharding measures the sharding core's headline figures on the real local
// control plane, with real coordinator and shard processes (mutual TLS between them) and
// the test-only kshard-audit controller recording every reconcile:
//
//   - Watches: open watch streams per shard at a small and at the full namespace count.
//   - ScaleOut3to4: fraction of namespaces and partitions that change owner when a 4th
//     shard joins 3, and the coordinator's handoff duration and ownership gap (p50, p99).
//   - KillShard: time until the namespaces of a SIGKILLed shard are reconciled by a live
//     shard again, with the coordinator's default session TTL and fencing margin.
//   - ScaleOut3to4Fenced, KillShardFenced: the same with the server-side fence on (pod
//     identities, owner Roles written and enforced before every Acquire, a killed
//     shard seized once its stream stayed closed for --seize-after), plus the fence's
//     owner record writes and its write and enforcement times.
//   - KillShard4Chart, StopShard4Chart: failover at the chart's defaults with 4 shards: a
//     SIGKILLed shard, and a SIGSTOPped shard cut off from the coordinator whose late
//     writes the API server must refuse (failover_bench_test.go).
//   - RSS: shard resident memory with 1, 2 and 4 shards over the same objects.
//
// Run it with
//
//	go test ./test/bench/sharding -run '^$' -bench . -benchtime=1x -timeout 30m -v
//
// (bin/coordinator and bin/shard must be built: make build). Every sub-benchmark runs its
// scenario once per b.N iteration; -benchtime=1x gives one. The figures are reported with
// b.ReportMetric and logged. The namespaces are shared by the sub-benchmarks, named
// kb-<run id>-NNNN, and deleted when the benchmark ends.
package sharding

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/partition"
	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// Scenario parameters.
const (
	// partitions is the coordinator's default partition count.
	partitions = partition.DefaultCount
	// smallNamespaces is the first step of the Watches scenario.
	smallNamespaces = 200
	configMapBytes  = 1024
	// ttl and margin are the coordinator's defaults (--session-ttl, --fencing-margin);
	// debounce and maxDebounce too (--membership-debounce, --membership-max-debounce).
	ttl         = 28 * time.Second
	margin      = 2 * time.Second
	debounce    = 3 * time.Second
	maxDebounce = 15 * time.Second
	// auditWork is how long each audit reconcile takes.
	auditWork = time.Millisecond
	// createWorkers bounds the parallel object creation.
	createWorkers = 32
)

// The fixture's size, 1000 namespaces × 10 ConfigMaps unless the environment says
// otherwise (KSHARD_BENCH_NAMESPACES, KSHARD_BENCH_CONFIGMAPS; e.g. 10000 × 1 for the
// 10,000-namespace handoff figures of docs/performance.md).
var (
	// namespaces is the full namespace count.
	namespaces = framework.EnvInt("KSHARD_BENCH_NAMESPACES", 1000)
	// configMapsPerNS ConfigMaps of configMapBytes each per namespace (at least 1), one
	// of them labelled for the audit controller. The shard caches ConfigMaps (the audit
	// controller's informer) and Namespaces; kube-controller-manager adds
	// kube-root-ca.crt to every namespace.
	configMapsPerNS = max(1, framework.EnvInt("KSHARD_BENCH_CONFIGMAPS", 10))
)

// auditResync is how often the audit controller reconciles each labelled ConfigMap
// again: 2s per 1000 namespaces, so that the audit logs, which the waits read whole,
// grow by about 500 records a second whatever the fixture's size. An acquired
// partition's namespaces are reconciled at once regardless.
var auditResync = time.Duration(max(1, namespaces/1000)) * 2 * time.Second

// waitLimit bounds each wait for the shards to converge: 3 minutes per 1000 namespaces
// (a slow warm-up at 10,000 namespaces takes minutes; only a failure waits this long).
var waitLimit = time.Duration(max(1, namespaces/1000)) * 3 * time.Minute

// extraShardArgs are flags added to every shard (KSHARD_BENCH_SHARD_ARGS, split on
// spaces), to measure a setting against the defaults in the same conditions, e.g.
// --warmup-cluster-list-threshold=0.
var extraShardArgs = strings.Fields(os.Getenv("KSHARD_BENCH_SHARD_ARGS"))

// extraCoordinatorArgs are flags added to the coordinator (KSHARD_BENCH_COORDINATOR_ARGS),
// e.g. --max-concurrent-moves=256.
var extraCoordinatorArgs = strings.Fields(os.Getenv("KSHARD_BENCH_COORDINATOR_ARGS"))

// env holds what the sub-benchmarks share: the namespaces and a fast client.
type env struct {
	f      *framework.Framework
	client kubernetes.Interface
	mu     sync.Mutex
	nss    []string
	pmap   partition.Map
	// fence runs the clusters with pod identities and the server-side fence
	// (KShardOptions.Fence); set by the *Fenced sub-benchmarks.
	fence bool
	// chart runs the coordinator as the chart does (see chartDefaults): its leader
	// election timings and --expected-shards; set by the *Chart sub-benchmarks.
	chart bool
}

// BenchmarkSharding runs the scenarios over one set of namespaces; select one with e.g.
// -bench 'Sharding/ScaleOut'.
func BenchmarkSharding(b *testing.B) {
	f := framework.Get(b)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	client := f.LoadClient(b)
	e := &env{f: f, client: client, pmap: partition.Map{Count: partitions}}
	b.Cleanup(e.deleteAll)
	b.Logf("extra flags: shards %q (KSHARD_BENCH_SHARD_ARGS), coordinator %q (KSHARD_BENCH_COORDINATOR_ARGS)", extraShardArgs, extraCoordinatorArgs)
	b.Logf("parameters: %d partitions, up to %d namespaces x %d ConfigMaps of %d B (1 audited), session TTL %s, fencing margin %s, debounce %s/%s, audit resync %s",
		partitions, namespaces, configMapsPerNS, configMapBytes, ttl, margin, debounce, maxDebounce, auditResync)

	b.Run("Watches", e.benchWatches)
	b.Run("ScaleOut3to4", e.benchScaleOut)
	b.Run("ScaleOut3to4Fenced", e.fenced(e.benchScaleOut))
	b.Run("KillShard", e.killShard(3))
	b.Run("KillShardFenced", e.fenced(e.killShard(3)))
	b.Run("KillShard4Chart", e.chartDefaults(e.killShard(4)))
	b.Run("StopShard4Chart", e.chartDefaults(e.benchStopShard))
	b.Run("RSS", e.benchRSS)
}

// fenced runs a scenario with the server-side fence on: shards with pod-bound tokens, the
// fence's policy installed, the coordinator writing owner Roles before every Acquire and
// seizing a shard whose stream stayed closed (--seize-after, 2s by default). Compared with
// the same scenario without it, in the same run, it gives the fence's cost per move and
// its failover time.
func (e *env) fenced(fn func(*testing.B)) func(*testing.B) {
	return func(b *testing.B) {
		e.fence = true
		defer func() { e.fence = false }()
		fn(b)
	}
}

// reportFence reports the owner record's cost from the coordinator's metrics: namespace
// label writes, batches, and the mean time to write a batch and to see it enforced.
func (c *cluster) reportFence(b *testing.B) {
	if !c.e.fence {
		return
	}
	ctx := context.Background()
	m, err := framework.Scrape(ctx, c.coord.HTTPURL)
	if err != nil {
		b.Fatal(err)
	}
	writes := m.Value("kshard_coordinator_owner_record_object_writes_total")
	batches := m.Value("kshard_coordinator_owner_record_batches_total")
	mean := func(name string) float64 {
		return 1000 * m.Value(name+"_sum") / max(m.Value(name+"_count"), 1)
	}
	b.Logf("  server-side fence: %.0f owner record writes in %.0f batches; mean batch write %.1fms, mean wait until enforced %.1fms",
		writes, batches, mean("kshard_coordinator_owner_record_write_seconds"), mean("kshard_coordinator_owner_record_enforce_seconds"))
	b.ReportMetric(writes, "fence-ns-writes")
	b.ReportMetric(batches, "fence-batches")
	b.ReportMetric(mean("kshard_coordinator_owner_record_write_seconds"), "fence-write-mean-ms")
	b.ReportMetric(mean("kshard_coordinator_owner_record_enforce_seconds"), "fence-enforce-mean-ms")
}

// ---------------------------------------------------------------------------------------
// Scenarios

// benchWatches counts the watch streams each shard holds open with the fixture at its
// small size and at its full size: they must not grow with the namespace count. It runs
// first so the fixture is still small; on later iterations (b.N > 1) or after another
// sub-benchmark both points are at the full size, as the logged counts say.
func (e *env) benchWatches(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e.ensure(b, smallNamespaces)
		ctx := context.Background()
		apiBefore := e.apiserverWatches(b)
		c := e.newCluster(b, fmt.Sprintf("w%d", i), 2)
		small := len(e.namespaces())
		c.settle("2 shards", small)
		lowPer, lowRes := c.shardWatches(ctx)
		apiLow := e.apiserverWatches(b)

		e.ensure(b, namespaces)
		full := len(e.namespaces())
		c.settle("2 shards, more namespaces", full)
		highPer, highRes := c.shardWatches(ctx)
		apiHigh := e.apiserverWatches(b)
		c.stop()

		avg := func(m map[string]float64) float64 {
			s := 0.0
			for _, v := range m {
				s += v
			}
			return s / float64(len(m))
		}
		b.Logf("open watches per shard (kshard_shard_cache_watches, filtered informers; +1 unfiltered Namespace informer not in the gauge):")
		b.Logf("  at %4d namespaces: %v by shard, %v by resource", small, lowPer, lowRes)
		b.Logf("  at %4d namespaces: %v by shard, %v by resource", full, highPer, highRes)
		dLow, dHigh := apiLow.sub(apiBefore), apiHigh.sub(apiBefore)
		b.Logf("apiserver_longrunning_requests{verb=WATCH} added by the coordinator and 2 shards (all clients; noisy if others use the apiserver):")
		b.Logf("  at %4d namespaces: total %+v, %s", small, dLow.total(), dLow)
		b.Logf("  at %4d namespaces: total %+v, %s", full, dHigh.total(), dHigh)
		b.ReportMetric(float64(small), "ns-low")
		b.ReportMetric(avg(lowPer), "watches/shard@low")
		b.ReportMetric(float64(full), "ns-high")
		b.ReportMetric(avg(highPer), "watches/shard@high")
		b.ReportMetric(dLow.total()/2, "apiserver-watches/shard@low")
		b.ReportMetric(dHigh.total()/2, "apiserver-watches/shard@high")
		b.ReportMetric(dHigh.scope("namespace"), "apiserver-ns-scoped-watches@high")
	}
}

// benchScaleOut adds a 4th shard to 3 and measures what moved and how long moves took.
func (e *env) benchScaleOut(b *testing.B) {
	e.ensure(b, namespaces)
	nss := e.namespaces()
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		c := e.newCluster(b, fmt.Sprintf("s%d", i), 3)
		c.settle("3 shards", len(nss))
		c.waitAllReconciled("3 shards", c.started, nss)

		before, err := c.coord.Assignments(ctx)
		if err != nil {
			b.Fatal(err)
		}
		mBefore := scrape(b, c.coord.HTTPURL)
		nonEmpty := e.occupiedPartitions(b)
		logOffset := fileSize(b, c.coord.LogPath)
		at := time.Now()
		joined := c.startShard()
		c.settle("4 shards", len(nss))
		// The joining shard's warm-up lists go through its client-side rate limiter
		// (--kube-api-qps); its wait explains the slow tail of the handoffs.
		mJoined := scrape(b, joined.HTTPURL)
		after, err := c.coord.Assignments(ctx)
		if err != nil {
			b.Fatal(err)
		}
		mAfter := scrape(b, c.coord.HTTPURL)
		converged := time.Since(at)
		c.waitAllReconciled("4 shards", at, nss)
		recs, err := auditlog.ReadDir(c.audit)
		if err != nil {
			b.Fatal(err)
		}
		overlaps := len(auditlog.Overlaps(recs))
		acq := acquiredSince(b, c.coord.LogPath, logOffset)
		c.checkPartitionMapping(ctx, nss[:5])
		c.reportFence(b)
		c.stop()

		// What moved.
		ob, oa := framework.Owners(before), framework.Owners(after)
		movedParts := 0
		for p := 0; p < partitions; p++ {
			if ob[uint32(p)] != oa[uint32(p)] {
				movedParts++
			}
		}
		movedNS := 0
		for _, ns := range nss {
			p := uint32(e.pmap.For(ns))
			if ob[p] != oa[p] {
				movedNS++
			}
		}
		// How long moves took: histograms from the coordinator's metrics.
		const hName, gName = "kshard_coordinator_handoff_duration_seconds", "kshard_coordinator_ownership_gap_seconds"
		hb, gb := buckets(mAfter, hName).sub(buckets(mBefore, hName)), buckets(mAfter, gName).sub(buckets(mBefore, gName))
		// And exactly, from the coordinator's "partition acquired" log lines of moves.
		// Moves of partitions that hold namespaces warm caches (namespace-scoped lists);
		// moves of empty partitions have nothing to warm.
		var handoffs, gaps, fullHandoffs, fullGaps []float64
		for _, a := range acq {
			if a.handoff > 0 {
				handoffs = append(handoffs, a.handoff.Seconds())
				gaps = append(gaps, a.gap.Seconds())
				if nonEmpty[uint32(a.partition)] {
					fullHandoffs = append(fullHandoffs, a.handoff.Seconds())
					fullGaps = append(fullGaps, a.gap.Seconds())
				}
			}
		}
		b.Logf("scale-out 3->4 with %d namespaces, %d partitions: converged %s after the 4th shard started; %d audit records, %d overlaps",
			len(nss), partitions, converged.Round(time.Millisecond), len(recs), overlaps)
		b.Logf("  moved partitions %d/%d = %.4f (ideal 1/4), moved namespaces %d/%d = %.4f",
			movedParts, partitions, float64(movedParts)/partitions, movedNS, len(nss), float64(movedNS)/float64(len(nss)))
		b.Logf("  handoff (histogram, %v moves): p50 %.4fs p99 %.4fs; buckets %s", hb.count(), hb.quantile(0.5), hb.quantile(0.99), hb)
		b.Logf("  gap     (histogram, %v moves): p50 %.4fs p99 %.4fs; buckets %s", gb.count(), gb.quantile(0.5), gb.quantile(0.99), gb)
		b.Logf("  handoff (log, %d moves): p50 %.4fs p99 %.4fs max %.4fs", len(handoffs), exact(handoffs, 0.5), exact(handoffs, 0.99), exact(handoffs, 1))
		b.Logf("  gap     (log, %d moves): p50 %.4fs p99 %.4fs max %.4fs", len(gaps), exact(gaps, 0.5), exact(gaps, 0.99), exact(gaps, 1))
		b.Logf("  of which %d moves of partitions holding namespaces: handoff p50 %.4fs p99 %.4fs, gap p50 %.4fs p99 %.4fs",
			len(fullHandoffs), exact(fullHandoffs, 0.5), exact(fullHandoffs, 0.99), exact(fullGaps, 0.5), exact(fullGaps, 0.99))
		const rl = "kshard_rest_client_rate_limiter_duration_seconds"
		b.Logf("  joining shard %s: %v API requests waited %.3fs in total in its client-side rate limiter, by wait %s",
			joined.Name, mJoined.Value(rl+"_count"), mJoined.Value(rl+"_sum"), buckets(mJoined, rl))
		b.Logf("  joining shard %s: requests by verb %v; warm-up lists: %s", joined.Name, byLabel(mJoined, rl+"_count", "verb"), warmupLists(mJoined))
		b.ReportMetric(float64(movedNS)/float64(len(nss)), "moved-ns-frac")
		b.ReportMetric(float64(movedParts)/partitions, "moved-partitions-frac")
		b.ReportMetric(hb.quantile(0.5), "handoff-p50-s")
		b.ReportMetric(hb.quantile(0.99), "handoff-p99-s")
		b.ReportMetric(gb.quantile(0.5), "gap-p50-s")
		b.ReportMetric(gb.quantile(0.99), "gap-p99-s")
		b.ReportMetric(exact(handoffs, 0.5), "handoff-log-p50-s")
		b.ReportMetric(exact(handoffs, 0.99), "handoff-log-p99-s")
		b.ReportMetric(exact(gaps, 0.5), "gap-log-p50-s")
		b.ReportMetric(exact(gaps, 0.99), "gap-log-p99-s")
		b.ReportMetric(exact(fullHandoffs, 0.5), "handoff-nonempty-log-p50-s")
		b.ReportMetric(exact(fullHandoffs, 0.99), "handoff-nonempty-log-p99-s")
		b.ReportMetric(converged.Seconds(), "converge-s")
		b.ReportMetric(float64(overlaps), "overlaps")
	}
}

// killShard SIGKILLs one of n shards and measures how soon each of its namespaces is
// reconciled by a live shard.
func (e *env) killShard(n int) func(*testing.B) {
	return func(b *testing.B) { e.benchKillShard(b, n) }
}

func (e *env) benchKillShard(b *testing.B, n int) {
	e.ensure(b, namespaces)
	nss := e.namespaces()
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		c := e.newCluster(b, fmt.Sprintf("k%d-%d", i, n), n)
		c.settle(fmt.Sprintf("%d shards", n), len(nss))
		c.waitAllReconciled(fmt.Sprintf("%d shards", n), c.started, nss)
		a, err := c.coord.Assignments(ctx)
		if err != nil {
			b.Fatal(err)
		}
		victim := c.shards[0]
		victimNS := e.ownedBy(a, nss, victim.Name)
		// The survivors' warm-up lists before the kill, to count the kill's.
		survivors := c.shards[1:]
		listsBefore := make([]framework.Samples, len(survivors))
		for j, s := range survivors {
			listsBefore[j] = scrape(b, s.HTTPURL)
		}
		logOffset := fileSize(b, c.coord.LogPath)
		mCoordBefore := scrape(b, c.coord.HTTPURL)
		tail := newAuditTail(c.audit)
		tail.skip(b)
		load := startLoad(b, e, c)
		at := time.Now()
		if err := victim.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		_, _ = victim.Wait(10 * time.Second)
		// Polled from the audit logs' new lines only: re-reading whole logs every 200ms
		// would take the CPU the shards being measured need.
		took := tail.waitAllReconciled(b, "after SIGKILL", at, victimNS, c.k.Live())
		usage := load.stop(b)
		mCoordAfter := scrape(b, c.coord.HTTPURL)
		c.settle(fmt.Sprintf("%d shards after SIGKILL", n-1), len(nss))
		recs, err := auditlog.ReadDir(c.audit)
		if err != nil {
			b.Fatal(err)
		}
		first := auditlog.FirstReconcileAfter(recs, at, c.k.Live())
		var per []float64
		for _, ns := range victimNS {
			per = append(per, first[ns].Sub(at).Seconds())
		}
		expired := expiredAt(b, c.coord.LogPath, logOffset, victim.Name)
		var gaps []float64
		for _, ac := range acquiredSince(b, c.coord.LogPath, logOffset) {
			if ac.from == victim.Name {
				gaps = append(gaps, ac.gap.Seconds())
			}
		}
		overlaps := len(auditlog.Overlaps(recs))
		var warmups []string
		for j, s := range survivors {
			warmups = append(warmups, fmt.Sprintf("%s %v", s.Name, listsSince(listsBefore[j], scrape(b, s.HTTPURL))))
		}
		c.reportFence(b)
		c.stop()

		detect := math.NaN()
		if !expired.IsZero() {
			detect = expired.Sub(at).Seconds()
		}
		b.Logf("SIGKILL of %s, one of %d shards (%d of %d namespaces), session TTL %s + fencing margin %s, heartbeat every 1s (the coordinator default), fence %v, chart timings %v:",
			victim.Name, n, len(victimNS), len(nss), ttl, margin, e.fence, e.chart)
		b.Logf("  coordinator expired (or, fenced, seized) it %.3fs after the kill; regrant gap (expiry -> Acquired) p50 %.3fs max %.3fs over %d partitions",
			detect, exact(gaps, 0.5), exact(gaps, 1), len(gaps))
		b.Logf("  its namespaces reconciled by a live shard after: p50 %.3fs, max %.3fs; %d overlaps in %d audit records",
			exact(per, 0.5), took.Seconds(), overlaps, len(recs))
		b.Logf("  the survivors' warm-up lists (calls, i.e. pages, by resource and kind) for the victim's partitions: %s", strings.Join(warmups, "; "))
		reportCoordinatorWindow(b, mCoordBefore, mCoordAfter)
		usage.log(b, "from the SIGKILL until the last namespace was reconciled")
		b.ReportMetric(took.Seconds(), "recovery-max-s")
		b.ReportMetric(exact(per, 0.5), "recovery-p50-s")
		b.ReportMetric(detect, "expiry-s")
		b.ReportMetric(ttl.Seconds(), "ttl-s")
		b.ReportMetric(margin.Seconds(), "margin-s")
		b.ReportMetric(float64(len(victimNS)), "victim-ns")
		b.ReportMetric(float64(overlaps), "overlaps")
	}
}

// benchRSS measures shard memory with 1, 2 and 4 fresh shards over the same objects.
func (e *env) benchRSS(b *testing.B) {
	e.ensure(b, namespaces)
	nss := e.namespaces()
	for i := 0; i < b.N; i++ {
		type row struct {
			n                        int
			rssAvg, rssTotal, rssMax float64 // MiB, VmRSS
			promAvg, heapAvg, hwmAvg float64 // MiB
			// retainedAvg: heap the Go runtime has freed but not yet returned to the
			// OS (heap idle - released), counted in RSS; it depends on when the
			// scavenger last ran, not on what the shard holds.
			retainedAvg float64
			// fileAvg: the part of VmRSS that is mapped files (the binary's code and
			// data pages touched), MiB.
			fileAvg                  float64
			cachedCMAvg, cachedNSAvg float64
		}
		var rows []row
		for _, n := range []int{1, 2, 4} {
			c := e.newCluster(b, fmt.Sprintf("m%d-%d", i, n), n)
			c.settle(fmt.Sprintf("%d shards", n), len(nss))
			c.waitAllReconciled(fmt.Sprintf("%d shards", n), c.started, nss)
			// Let the garbage of the initial lists be collected and returned.
			time.Sleep(5 * time.Second)
			r := row{n: n}
			for _, s := range c.shards {
				saveProfiles(b, s, fmt.Sprintf("rss-%d-%d", i, n))
				rss := median3(func() float64 { return procStatusKB(b, s.Pid(), "VmRSS") / 1024 })
				m := scrape(b, s.HTTPURL)
				r.rssTotal += rss
				r.rssMax = max(r.rssMax, rss)
				r.promAvg += m.Value("process_resident_memory_bytes") / (1 << 20)
				r.heapAvg += m.Value("go_memstats_heap_inuse_bytes") / (1 << 20)
				r.retainedAvg += (m.Value("go_memstats_heap_idle_bytes") - m.Value("go_memstats_heap_released_bytes")) / (1 << 20)
				r.hwmAvg += procStatusKB(b, s.Pid(), "VmHWM") / 1024
				r.fileAvg += procStatusKB(b, s.Pid(), "RssFile") / 1024
				r.cachedCMAvg += m.Value("kshard_shard_cached_objects", `resource="configmaps"`)
				r.cachedNSAvg += m.Value("kshard_shard_cached_objects", `resource="namespaces"`)
			}
			fn := float64(n)
			r.rssAvg = r.rssTotal / fn
			r.promAvg /= fn
			r.heapAvg /= fn
			r.retainedAvg /= fn
			r.fileAvg /= fn
			r.hwmAvg /= fn
			r.cachedCMAvg /= fn
			r.cachedNSAvg /= fn
			rows = append(rows, r)
			c.stop()
		}
		base := rows[0].rssAvg
		b.Logf("shard memory over %d namespaces x %d ConfigMaps of %d B (MiB; VmRSS median of 3 samples, 5s after convergence):",
			len(nss), configMapsPerNS, configMapBytes)
		b.Logf("  %-7s %10s %10s %10s %12s %12s %12s %11s %10s %13s %13s %11s", "shards", "RSS/shard", "RSS total", "RSS max", "prom RSS/sh", "heap inuse", "retained/sh", "RssFile/sh", "VmHWM/sh", "cached CM/sh", "cached NS/sh", "vs 1 shard")
		for _, r := range rows {
			b.Logf("  %-7d %10.1f %10.1f %10.1f %12.1f %12.1f %12.1f %11.1f %10.1f %13.0f %13.0f %10.2fx", r.n, r.rssAvg, r.rssTotal, r.rssMax, r.promAvg, r.heapAvg, r.retainedAvg, r.fileAvg, r.hwmAvg, r.cachedCMAvg, r.cachedNSAvg, r.rssAvg/base)
		}
		// RSS per shard = fixed + data/n, least squares over the shard counts.
		var xs, ys []float64
		for _, r := range rows {
			xs, ys = append(xs, 1/float64(r.n)), append(ys, r.rssAvg)
		}
		fixed, data := fitLine(xs, ys)
		b.Logf("  fit RSS/shard = %.1f MiB fixed + %.1f MiB / shards (the data part is what sharding divides)", fixed, data)
		b.ReportMetric(fixed, "rss-fit-fixed-MiB")
		b.ReportMetric(data, "rss-fit-data-MiB")
		for _, r := range rows {
			b.ReportMetric(r.rssAvg, fmt.Sprintf("rss-MiB/shard@%d", r.n))
			b.ReportMetric(r.rssTotal, fmt.Sprintf("rss-MiB-total@%d", r.n))
			b.ReportMetric(r.heapAvg, fmt.Sprintf("heap-MiB/shard@%d", r.n))
			b.ReportMetric(r.retainedAvg, fmt.Sprintf("heap-retained-MiB/shard@%d", r.n))
			b.ReportMetric(r.rssAvg/base, fmt.Sprintf("rss-ratio/shard@%d", r.n))
		}
	}
}

// ---------------------------------------------------------------------------------------
// Namespaces

// namespaces returns the namespaces created so far.
func (e *env) namespaces() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.nss...)
}

// ensure creates namespaces, each with its ConfigMaps, until there are n.
func (e *env) ensure(b *testing.B, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	from := len(e.nss)
	if from >= n {
		return
	}
	start := time.Now()
	data := strings.Repeat("x", configMapBytes)
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
		madeMu sync.Mutex
		made   []string
	)
	next.Store(int64(from))
	ctx := context.Background()
	create := func(i int) error {
		name := fmt.Sprintf("kb-%s-%04d", e.f.RunID, i)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{framework.RunLabel: e.f.RunID}}}
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		madeMu.Lock()
		made = append(made, name)
		madeMu.Unlock()
		for j := 0; j < configMapsPerNS; j++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-%d", j)},
				Data: map[string]string{"payload": data}}
			if j == 0 {
				cm.Name, cm.Labels = "probe", map[string]string{audit.Label: "true"}
			}
			if _, err := e.client.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
		return nil
	}
	for w := 0; w < createWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := create(i); err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	sort.Strings(made)
	e.nss = append(e.nss, made...)
	sort.Strings(e.nss)
	if len(errs) > 0 {
		b.Fatalf("creating namespaces: %d errors, first: %v", len(errs), errs[0])
	}
	took := time.Since(start)
	b.Logf("created %d namespaces with %d ConfigMaps each in %s (%.0f objects/s)", n-from, configMapsPerNS,
		took.Round(time.Millisecond), float64((n-from)*(1+configMapsPerNS))/took.Seconds())
}

// deleteAll deletes the namespaces in parallel, without waiting for their finalization,
// and the run's coordinator Leases.
func (e *env) deleteAll() {
	nss := e.namespaces()
	ch := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < createWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ns := range ch {
				err := e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					fmt.Fprintf(os.Stderr, "deleting namespace %s: %v\n", ns, err)
				}
			}
		}()
	}
	for _, ns := range nss {
		ch <- ns
	}
	close(ch)
	wg.Wait()
	// The coordinators' leader-election Leases of this run (framework.NewKShard names
	// them kshard-e2e-<run id>-…) are not deleted by the framework.
	ctx := context.Background()
	leases, err := e.client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "listing leases: %v\n", err)
		return
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "kshard-e2e-"+e.f.RunID+"-") {
			if err := e.client.CoordinationV1().Leases("kube-system").Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprintf(os.Stderr, "deleting lease %s: %v\n", l.Name, err)
			}
		}
	}
}

// occupiedPartitions returns the partitions that hold at least one namespace of the
// cluster.
func (e *env) occupiedPartitions(b testing.TB) map[uint32]bool {
	b.Helper()
	l, err := e.client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := map[uint32]bool{}
	for _, ns := range l.Items {
		out[uint32(e.pmap.For(ns.Name))] = true
	}
	return out
}

// configMapCount is the number of ConfigMaps in the cluster, read cheaply through a
// list with limit 1 and its remaining item count.
func (e *env) configMapCount(ctx context.Context) (int, error) {
	l, err := e.client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	n := len(l.Items)
	if l.RemainingItemCount != nil {
		n += int(*l.RemainingItemCount)
	}
	return n, nil
}

// ---------------------------------------------------------------------------------------
// Clusters of kshard processes

type cluster struct {
	b       *testing.B
	e       *env
	k       *framework.KShard
	prefix  string
	coord   *framework.Coordinator
	shards  []*framework.Shard
	audit   string
	started time.Time
}

// clusterOptions change a cluster of a scenario.
type clusterOptions struct {
	// shardArgs are added to every shard's flags.
	shardArgs []string
	// beforeShards runs once the coordinator is ready, before the shards start.
	beforeShards func(*cluster)
}

// newCluster starts a coordinator and n shards with the audit controller.
func (e *env) newCluster(b *testing.B, prefix string, n int) *cluster {
	return e.newClusterWith(b, prefix, n, clusterOptions{})
}

// newClusterWith is newCluster with options.
func (e *env) newClusterWith(b *testing.B, prefix string, n int, o clusterOptions) *cluster {
	b.Helper()
	dir := filepath.Join(framework.AuditDir(b), prefix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	coordArgs := []string{"--membership-debounce", debounce.String(), "--membership-max-debounce", maxDebounce.String()}
	if e.chart {
		// The chart passes the shard Deployment's replicas (here n).
		coordArgs = append(coordArgs, "--expected-shards", strconv.Itoa(n))
	}
	shardArgs := []string{"--controllers", "*,kshard-audit", "--audit-resync-interval", auditResync.String(),
		"--audit-work-duration", auditWork.String()}
	shardArgs = append(append(shardArgs, o.shardArgs...), append(profileArgs(), extraShardArgs...)...)
	k := e.f.NewKShard(b, framework.KShardOptions{
		Partitions: partitions, SessionTTL: ttl, Margin: margin, PodIdentity: e.fence, Fence: e.fence, KCMTimings: e.chart, Audit: true,
		CoordinatorArgs: append(coordArgs, extraCoordinatorArgs...),
		ShardArgs:       shardArgs,
	})
	k.SetShardArgs(func(name string) []string {
		return []string{"--audit-log-file", filepath.Join(dir, name+".jsonl")}
	})
	c := &cluster{b: b, e: e, k: k, prefix: prefix, audit: dir, started: time.Now()}
	c.coord = k.StartCoordinator(prefix + "-coordinator")
	framework.WaitHTTP(b, c.coord.HTTPURL+"/readyz", 60*time.Second)
	if o.beforeShards != nil {
		o.beforeShards(c)
	}
	for i := 0; i < n; i++ {
		c.startShard()
	}
	return c
}

func (c *cluster) startShard() *framework.Shard {
	s := c.k.StartShard(fmt.Sprintf("%s-shard-%d", c.prefix, len(c.shards)+1))
	c.shards = append(c.shards, s)
	return s
}

// stop kills the cluster's processes (shards first, so the coordinator sees nothing).
func (c *cluster) stop() {
	for _, s := range c.shards {
		s.Kill()
	}
	c.coord.Kill()
}

// settle waits until the assignment converged on the live shards, every live shard is
// ready (session welcomed, caches synced) and the shards' ConfigMap caches together hold
// every ConfigMap of the cluster exactly once.
func (c *cluster) settle(what string, nsCount int) {
	c.b.Helper()
	framework.Eventually(c.b, waitLimit, what+": assignment converged on the live shards", func(ctx context.Context) (bool, error) {
		a, err := c.coord.Assignments(ctx)
		if err != nil {
			return false, err
		}
		live := c.k.Live()
		if !a.Converged || a.MovesInFlight > 0 {
			return false, fmt.Errorf("not converged: %+v", a.ByState)
		}
		owners := map[string]bool{}
		for _, s := range a.Shards {
			if s.Partitions > 0 {
				if !live[s.Shard] {
					return false, fmt.Errorf("dead shard %s still owns %d partitions", s.Shard, s.Partitions)
				}
				owners[s.Shard] = true
			}
		}
		if len(owners) != len(live) {
			return false, fmt.Errorf("owners %v, live %v", owners, live)
		}
		return true, nil
	})
	for _, s := range c.liveShards() {
		framework.WaitHTTP(c.b, s.HTTPURL+"/readyz", waitLimit)
	}
	var last string
	err := pollUntil(waitLimit, func(ctx context.Context) (bool, error) {
		want, err := c.e.configMapCount(ctx)
		if err != nil {
			return false, err
		}
		got := 0.0
		for _, s := range c.liveShards() {
			v, err := framework.Metric(ctx, s.HTTPURL, "kshard_shard_cached_objects", `resource="configmaps"`)
			if err != nil {
				return false, err
			}
			got += v
		}
		last = fmt.Sprintf("shards cache %v ConfigMaps, the cluster has %d", got, want)
		return int(got) == want, nil
	})
	if err != nil {
		// Someone else may be creating ConfigMaps on the shared control plane.
		c.b.Logf("%s: WARNING caches not exactly complete: %s (%v)", what, last, err)
	}
	c.b.Logf("%s: settled with %d namespaces (%s)", what, nsCount, last)
}

func (c *cluster) liveShards() []*framework.Shard {
	var out []*framework.Shard
	for _, s := range c.shards {
		if !s.Exited() {
			out = append(out, s)
		}
	}
	return out
}

// waitAllReconciled waits until a live shard reconciled every namespace of nss since
// `since`, and returns how long after since the last one was first reconciled.
func (c *cluster) waitAllReconciled(what string, since time.Time, nss []string) time.Duration {
	c.b.Helper()
	var worst time.Duration
	framework.Eventually(c.b, waitLimit, what+": every namespace reconciled by a live shard", func(context.Context) (bool, error) {
		recs, err := auditlog.ReadDir(c.audit)
		if err != nil {
			return false, err
		}
		first := auditlog.FirstReconcileAfter(recs, since, c.k.Live())
		worst = 0
		missing := 0
		for _, ns := range nss {
			at, ok := first[ns]
			if !ok {
				missing++
				continue
			}
			worst = max(worst, at.Sub(since))
		}
		if missing > 0 {
			return false, fmt.Errorf("%d of %d namespaces not reconciled yet", missing, len(nss))
		}
		return true, nil
	})
	return worst
}

// checkPartitionMapping asks the coordinator for the partition of a few namespaces and
// compares with partition.Map.
func (c *cluster) checkPartitionMapping(ctx context.Context, nss []string) {
	for _, ns := range nss {
		_, body, err := framework.HTTPGet(ctx, c.coord.HTTPURL+"/assignments?namespace="+ns)
		if err != nil {
			c.b.Fatal(err)
		}
		var o coordinatorrpc.Owner
		if err := json.Unmarshal(body, &o); err != nil {
			c.b.Fatal(err)
		}
		if want := uint32(c.e.pmap.For(ns)); o.Partition != want {
			c.b.Fatalf("coordinator maps %s to partition %d, partition.Map to %d", ns, o.Partition, want)
		}
	}
}

// shardWatches returns the open watches of each live shard and their sum by resource.
func (c *cluster) shardWatches(ctx context.Context) (map[string]float64, map[string]float64) {
	perShard, perRes := map[string]float64{}, map[string]float64{}
	for _, s := range c.liveShards() {
		m := scrape(c.b, s.HTTPURL)
		for _, smp := range m {
			if smp.Name == "kshard_shard_cache_watches" {
				perShard[s.Name] += smp.Value
				perRes[smp.Labels["resource"]] += smp.Value
			}
		}
		if _, ok := perShard[s.Name]; !ok {
			c.b.Fatalf("%s exports no kshard_shard_cache_watches (rebuild the binaries: make build)", s.Name)
		}
	}
	return perShard, perRes
}

// ---------------------------------------------------------------------------------------
// Metrics

// scrape reads a process's /metrics.
func scrape(b testing.TB, baseURL string) framework.Samples {
	b.Helper()
	s, err := framework.Scrape(context.Background(), baseURL)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

type histogram []bucket

// buckets returns the cumulative buckets of histogram name, summed over its series
// (e.g. every verb), sorted by le.
func buckets(m framework.Samples, name string) histogram {
	byLE := map[float64]float64{}
	for _, s := range m {
		if s.Name != name+"_bucket" {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		byLE[le] += s.Value
	}
	var h histogram
	for le, n := range byLE {
		h = append(h, bucket{le: le, count: n})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].le < h[j].le })
	return h
}

// sub returns h - before, bucket by bucket (the observations in between).
func (h histogram) sub(before histogram) histogram {
	prev := map[float64]float64{}
	for _, bk := range before {
		prev[bk.le] = bk.count
	}
	out := make(histogram, len(h))
	for i, bk := range h {
		out[i] = bucket{le: bk.le, count: bk.count - prev[bk.le]}
	}
	return out
}

func (h histogram) count() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].count
}

// quantile estimates the q-quantile like Prometheus' histogram_quantile: linear
// interpolation within the bucket holding the rank, 0 as the lower bound of the first
// bucket, and the highest finite bound when the rank falls in the +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	total := h.count()
	if len(h) < 2 || total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, bk := range h {
		if bk.count >= rank {
			if math.IsInf(bk.le, 1) {
				return h[i-1].le
			}
			if bk.count == prevCount {
				return bk.le
			}
			return lower + (bk.le-lower)*(rank-prevCount)/(bk.count-prevCount)
		}
		lower, prevCount = bk.le, bk.count
	}
	return h[len(h)-2].le
}

func (h histogram) String() string {
	var parts []string
	prev := 0.0
	for _, bk := range h {
		if n := bk.count - prev; n > 0 {
			parts = append(parts, fmt.Sprintf("<=%g:%g", bk.le, n))
		}
		prev = bk.count
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// exact returns the q-quantile of xs by nearest rank (q=1 is the maximum).
func exact(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// fitLine returns the intercept and slope of the least-squares line through (xs, ys).
func fitLine(xs, ys []float64) (intercept, slope float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN(), math.NaN()
	}
	slope = (n*sxy - sx*sy) / d
	return (sy - slope*sx) / n, slope
}

// apiWatches is apiserver_longrunning_requests{verb="WATCH"} by resource and scope.
type apiWatches map[string]float64

func (e *env) apiserverWatches(b testing.TB) apiWatches {
	b.Helper()
	body, err := e.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("apiserver /metrics: %v", err)
	}
	out := apiWatches{}
	for _, s := range framework.ParseMetrics(string(body)) {
		if s.Name == "apiserver_longrunning_requests" && s.Labels["verb"] == "WATCH" {
			res := s.Labels["resource"]
			if g := s.Labels["group"]; g != "" {
				res += "." + g
			}
			out[res+"/"+s.Labels["scope"]] += s.Value
		}
	}
	return out
}

func (a apiWatches) sub(before apiWatches) apiWatches {
	out := apiWatches{}
	for k, v := range a {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := a[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

func (a apiWatches) total() float64 {
	s := 0.0
	for _, v := range a {
		s += v
	}
	return s
}

func (a apiWatches) scope(scope string) float64 {
	s := 0.0
	for k, v := range a {
		if strings.HasSuffix(k, "/"+scope) {
			s += v
		}
	}
	return s
}

func (a apiWatches) String() string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%+g", k, a[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// ---------------------------------------------------------------------------------------
// Coordinator logs

type acquired struct {
	partition    int
	from         string
	gap, handoff time.Duration
}

// acquiredSince parses the coordinator's JSON "partition acquired" lines written after
// offset.
func acquiredSince(b testing.TB, path string, offset int64) []acquired {
	var out []acquired
	readLogSince(b, path, offset, func(m map[string]any) {
		if m["msg"] != "partition acquired" {
			return
		}
		a := acquired{}
		if p, ok := m["partition"].(float64); ok {
			a.partition = int(p)
		}
		a.from, _ = m["from"].(string)
		if s, ok := m["gap"].(string); ok {
			a.gap, _ = time.ParseDuration(s)
		}
		if s, ok := m["handoff"].(string); ok {
			a.handoff, _ = time.ParseDuration(s)
		}
		out = append(out, a)
	})
	return out
}

// expiredAt returns when the coordinator logged shard's expiry after offset.
func expiredAt(b testing.TB, path string, offset int64, shard string) time.Time {
	var at time.Time
	readLogSince(b, path, offset, func(m map[string]any) {
		// Expired after its lease, or seized once its stream stayed closed (server-side fence).
		if ev := m["event"]; m["msg"] != "membership changed" || (ev != "member-expired" && ev != "member-seized") || m["shard"] != shard || !at.IsZero() {
			return
		}
		if s, ok := m["ts"].(string); ok {
			at, _ = time.Parse(time.RFC3339Nano, s)
		}
	})
	return at
}

func readLogSince(b testing.TB, path string, offset int64, fn func(map[string]any)) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			fn(m)
		}
	}
}

func fileSize(b testing.TB, path string) int64 {
	b.Helper()
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// ---------------------------------------------------------------------------------------
// Processes and HTTP

// procStatusKB reads a "Name:   N kB" field of /proc/<pid>/status.
func procStatusKB(b testing.TB, pid int, field string) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					return v
				}
			}
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// median3 samples fn three times, a second apart, and returns the median.
func median3(fn func() float64) float64 {
	var xs []float64
	for i := 0; i < 3; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		xs = append(xs, fn())
	}
	sort.Float64s(xs)
	return xs[1]
}

// pollUntil polls cond every 500ms until it is true or timeout passes.
func pollUntil(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = fmt.Errorf("not true after %s", timeout)
			}
			return last
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// profileDir is where the RSS scenario saves each shard's heap and goroutine profiles
// (KSHARD_BENCH_PROFILE_DIR; none when empty), to tell what a change in its memory is
// made of: go tool pprof -sample_index=inuse_space -base <before> <after>.
var profileDir = os.Getenv("KSHARD_BENCH_PROFILE_DIR")

// profileArgs serves /debug/pprof on the shards when profiles are to be saved.
func profileArgs() []string {
	if profileDir == "" {
		return nil
	}
	return []string{"--enable-pprof"}
}

// saveProfiles writes shard s's heap profile (after a GC) and its goroutines to
// profileDir as <prefix>-<shard>.{heap,goroutine}.
func saveProfiles(b *testing.B, s *framework.Shard, prefix string) {
	if profileDir == "" {
		return
	}
	b.Helper()
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for kind, path := range map[string]string{"heap": "/debug/pprof/heap?gc=1", "goroutine": "/debug/pprof/goroutine?debug=1"} {
		code, body, err := framework.HTTPGet(ctx, s.HTTPURL+path)
		if err != nil || code != 200 {
			b.Fatalf("%s profile of %s: code %d, %v", kind, s.Name, code, err)
		}
		if err := os.WriteFile(filepath.Join(profileDir, prefix+"-"+s.Name+"."+kind), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// byLabel sums the samples named name by the value of label.
func byLabel(m framework.Samples, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range m {
		if x.Name == name {
			out[x.Labels[label]] += x.Value
		}
	}
	return out
}

// listsSince returns the kshard_shard_cache_lists_total calls (pages) made between two
// scrapes of a shard, by "resource/kind", those that made none left out.
func listsSince(before, after framework.Samples) map[string]float64 {
	const name = "kshard_shard_cache_lists_total"
	out := map[string]float64{}
	for _, x := range after {
		if x.Name == name {
			out[x.Labels["resource"]+"/"+x.Labels["kind"]] += x.Value
		}
	}
	for _, x := range before {
		if x.Name == name {
			out[x.Labels["resource"]+"/"+x.Labels["kind"]] -= x.Value
		}
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// warmupLists summarises a shard's warm-up lists from kshard_shard_cache_lists_total.
func warmupLists(m framework.Samples) string {
	return fmt.Sprint(byLabel(m, "kshard_shard_cache_lists_total", "kind"))
}

// ownedBy returns the namespaces of nss whose partition the assignment a gives to shard.
func (e *env) ownedBy(a coordinatorrpc.Assignments, nss []string, shard string) []string {
	owners := framework.Owners(a)
	var out []string
	for _, ns := range nss {
		if owners[uint32(e.pmap.For(ns))] == shard {
			out = append(out, ns)
		}
	}
	return out
}

package scaleout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"

	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

// steadyGoal is the bound on load moves per hour after convergence under a
// steady load ("≤ a few"; docs/design-placement.md §6: 3).
const steadyGoal = 3.0

// steadyPhase is one phase of BenchmarkBalancerSteady: the load it offers for minutes.
type steadyPhase struct {
	name    string
	minutes int
	parts   []part
}

// steadySample is the leading coordinator's balancer figures at one minute of a phase.
type steadySample struct {
	phase   string
	minute  int
	elapsed time.Duration // since the shards started
	stats   balancerStats
	hot     hotPlacement
	hotErr  error
}

// phaseFigures are what BenchmarkBalancerSteady reports of one phase.
type phaseFigures struct {
	name                string
	minutes, settle     int
	settling, converged balancerStats // counters' increase over the settling minutes and after them
	loadPerHour         float64       // load moves per hour after convergence
	measured            bool          // there were minutes after convergence
	isolatedAt          int           // first minute the hot partition was isolated, -1 never
}

// BenchmarkBalancerSteady measures what placement by load costs under a steady load: 4
// audit shards running the deployment and replicaset controllers, the capacity workload
// at a fixed rate, uniform and then with the hot namespace's share; load moves per hour
// after convergence, rounds by outcome, the ownership gap of the moves, and the audit of
// every reconcile (no two shards may have worked one namespace at once). See doc.go.
func BenchmarkBalancerSteady(b *testing.B) {
	kf := framework.Get(b)
	kf.RequireKCMWithout(b, "replicaset", "deployment")
	for _, bin := range []string{"coordinator", framework.AuditShardBinary} {
		framework.Binary(b, bin)
	}
	rate := framework.EnvFloat("KSHARD_BENCH_STEADY_RATE", 2.5)
	hotShare := framework.EnvFloat("KSHARD_BENCH_SKEW_HOT_SHARE", 0.25)
	if hotShare >= 1 {
		b.Fatalf("KSHARD_BENCH_SKEW_HOT_SHARE=%v: want a share below 1", hotShare)
	}
	uniform := framework.EnvInt("KSHARD_BENCH_BALANCE_MINUTES", 60)
	skewed := framework.EnvInt("KSHARD_BENCH_STEADY_SKEWED_MINUTES", uniform)
	settle := framework.EnvInt("KSHARD_BENCH_STEADY_SETTLE_MINUTES", 20)
	resync := time.Duration(framework.EnvInt("KSHARD_BENCH_STEADY_AUDIT_RESYNC_SECONDS", 10)) * time.Second
	namespaces := framework.EnvInt("KSHARD_BENCH_SKEW_NAMESPACES", 400)
	hotDeployments := framework.EnvInt("KSHARD_BENCH_SKEW_HOT_DEPLOYMENTS", 100)
	b.Logf("%d namespaces x 1 Deployment x 2 replicas + 1 hot namespace x %d Deployments; %.2f changes/s uniform for %d min, then %.0f %% of them to the hot namespace for %d min; "+
		"converged %d min into each phase; %d audit shards (resync %s) at QPS %s / burst %s / %s workers; coordinators: %s",
		namespaces, hotDeployments, rate, uniform, 100*hotShare, skewed, settle, skewShards, resync, qps, burst, workers,
		strings.Join(config{placement: "load"}.coordinatorArgs(), " "))

	client := kf.LoadClient(b)
	w := newSkewWorkload(b, client, strings.ToLower("steady-"+kf.RunID), namespaces, hotDeployments)
	defer kf.DeleteNamespaces(b, w.load, client, gone)
	w.createProbes(b, client)
	w.populate(b, kf, client)

	others, hotRate := rateSplit(rate, hotShare, true)
	phases := []steadyPhase{
		{name: "uniform", minutes: uniform, parts: []part{{targets: w.others(), rate: rate}}},
		{name: "skewed", minutes: skewed, parts: []part{{targets: w.others(), rate: others}, {targets: w.hotTargets(), hot: true, rate: hotRate}}},
	}
	b.Run("balance", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			runSteady(b, kf, client, w, phases, settle, resync, uint64(i))
		}
	})
}

// runSteady starts the audit shards, offers each phase's load in turn while it samples
// the leading coordinator every minute, then checks the audit and reports.
func runSteady(b *testing.B, f *framework.Framework, client kubernetes.Interface, w skewWorkload, phases []steadyPhase, settle int, resync time.Duration, seed uint64) {
	b.StopTimer()
	ctx := context.Background()
	auditDir := framework.AuditDir(b)
	k := f.NewKShard(b, framework.KShardOptions{Audit: true,
		ShardArgs:       append(capacityShardArgs("kshard-audit"), "--audit-resync-interval", resync.String(), "--audit-work-duration", "10ms"),
		CoordinatorArgs: config{placement: "load"}.coordinatorArgs(), KCMTimings: true})
	// Each shard appends to its own file; the check reads them all.
	k.SetShardArgs(func(name string) []string {
		return []string{"--audit-log-file", filepath.Join(auditDir, name+".jsonl")}
	})
	started := time.Now()
	k.StartSet(b, skewShards)
	defer k.KillAll()
	current := resetReplicas(ctx, b, client, w.selector(), w.deployments(), w.load.Replicas)
	// The cold start's acquisitions are in the gap histogram already: the moves' gaps are
	// what it gains from here on.
	base := scrapeBalancer(ctx, b, k)
	st := newStream(client, current, seed)

	var samples []steadySample
	b.StartTimer()
	for _, ph := range phases {
		stop := st.start(ph.parts...)
		begin := time.Now()
		for m := 0; m <= ph.minutes; m++ {
			time.Sleep(time.Until(begin.Add(time.Duration(m) * time.Minute))) // sampled once a minute while the load runs
			s := steadySample{phase: ph.name, minute: m, elapsed: time.Since(started), stats: scrapeBalancer(ctx, b, k)}
			s.hot, s.hotErr = hotPlacementOf(ctx, k, client, w.hotNS)
			samples = append(samples, s)
			if m%10 == 0 || m == ph.minutes {
				b.Logf("%s minute %d (%s since the shards started): moves %s; rounds %s; hot partitions %g, fair share %.2f/s; hot namespace's %s",
					ph.name, m, s.elapsed.Round(time.Second), formatCounts(s.stats.moves), formatCounts(s.stats.rounds), s.stats.hot, s.stats.fair, s.hot)
			}
		}
		stop()
	}
	b.StopTimer()
	end := scrapeBalancer(ctx, b, k).since(base)
	sent, failed := st.between(started, time.Now())
	// Every shard stopped: the audit logs are complete.
	k.KillAll()
	recs, err := auditlog.ReadDir(auditDir)
	if err != nil {
		b.Fatal(err)
	}
	overlaps := auditlog.Overlaps(recs)
	for _, o := range overlaps[:min(10, len(overlaps))] {
		b.Errorf("overlap: %s", o)
	}
	if len(overlaps) > 0 {
		b.Errorf("%d overlapping reconciles by two shards (of %d records)", len(overlaps), len(recs))
	}

	var figs []phaseFigures
	for _, ph := range phases {
		figs = append(figs, phaseOf(ph, settle, samples))
	}
	gapP99 := quantile(0.99, end.gap)
	for _, fg := range figs {
		b.ReportMetric(fg.loadPerHour, fg.name+"-load-moves/h")
	}
	b.ReportMetric(float64(len(overlaps)), "overlaps")
	b.ReportMetric(gapP99, "gap-p99-s")
	writeSteady(b, figs, samples, end, gapP99, len(overlaps), len(recs), len(sent), failed, settle)
}

// phaseOf computes a phase's figures from the samples: the first settle minutes are the
// convergence (the load reports' moving average takes about 4 half-lives of the default
// 5 min to reflect a change of load to within 6 %, and a round needs a fresh report of
// every shard), the rest is measured.
func phaseOf(ph steadyPhase, settle int, samples []steadySample) phaseFigures {
	var mine []steadySample
	for _, s := range samples {
		if s.phase == ph.name {
			mine = append(mine, s)
		}
	}
	fg := phaseFigures{name: ph.name, minutes: ph.minutes, settle: min(settle, ph.minutes), isolatedAt: -1}
	if len(mine) == 0 {
		return fg
	}
	for _, s := range mine {
		if s.hotErr == nil && s.hot.isolated() {
			fg.isolatedAt = s.minute
			break
		}
	}
	last := len(mine) - 1
	mid := min(fg.settle, last)
	fg.settling = mine[mid].stats.since(mine[0].stats)
	fg.converged = mine[last].stats.since(mine[mid].stats)
	loads := make([]float64, len(mine))
	for i, s := range mine {
		loads[i] = s.stats.moves["load"]
	}
	fg.loadPerHour, fg.measured = movesPerHour(loads, mid, last)
	return fg
}

// movesPerHour is the rate per hour of a counter sampled once a minute (counts[i] at
// minute i) from minute from to minute to; false when that span is empty or out of the
// samples.
func movesPerHour(counts []float64, from, to int) (float64, bool) {
	if from < 0 || to >= len(counts) || to <= from {
		return 0, false
	}
	return (counts[to] - counts[from]) * 60 / float64(to-from), true
}

// writeSteady logs the summary and the goal line and writes steady.txt and the
// per-minute samples, steady.csv, to the artifacts folder.
func writeSteady(b *testing.B, figs []phaseFigures, samples []steadySample, end balancerStats, gapP99 float64, overlaps, records, sent, failed, settle int) {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tminutes\tconverging (min)\tmoves while converging\tmoves after\tload moves/h after\trounds after\thot partition isolated at minute")
	for _, fg := range figs {
		perHour := "n/a (no minutes after convergence)"
		if fg.measured {
			perHour = fmt.Sprintf("%.2f", fg.loadPerHour)
		}
		isolated := "never"
		if fg.isolatedAt >= 0 {
			isolated = strconv.Itoa(fg.isolatedAt)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", fg.name, fg.minutes, fg.settle, formatCounts(fg.settling.moves), formatCounts(fg.converged.moves),
			perHour, formatCounts(fg.converged.rounds), isolated)
	}
	_ = tw.Flush()
	fmt.Fprintf(&sb, "\nwhole run after the cold start: moves %s; rounds %s; ownership gap p99 %.3f s over %g acquisitions "+
		"(kshard_coordinator_ownership_gap_seconds, interpolated within its buckets); %d changes sent, %d failed; audit: %d reconciles, %d overlapping\n",
		formatCounts(end.moves), formatCounts(end.rounds), gapP99, end.gapCount, sent, failed, records, overlaps)
	fmt.Fprintf(&sb, "convergence: the first %d minutes of each phase (KSHARD_BENCH_STEADY_SETTLE_MINUTES) are not counted in the moves per hour\n", settle)
	sb.WriteString(steadyVerdict(figs, overlaps))
	b.Logf("balancer steady:\n%s", sb.String())
	dir := framework.ArtifactsDir(b)
	if err := os.WriteFile(filepath.Join(dir, "steady.txt"), []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	if err := writeCSV(filepath.Join(dir, "steady.csv"), steadyRows(samples)); err != nil {
		b.Error(err)
	}
	b.Logf("steady summary and per-minute CSV written to %s", dir)
}

// steadyVerdict is the goal line: load moves per hour after convergence in each phase
// against steadyGoal, and no overlapping reconcile.
func steadyVerdict(figs []phaseFigures, overlaps int) string {
	ok := overlaps == 0
	var parts []string
	for _, fg := range figs {
		if !fg.measured {
			parts = append(parts, fg.name+" n/a")
			continue
		}
		ok = ok && fg.loadPerHour <= steadyGoal
		parts = append(parts, fmt.Sprintf("%s %.2f", fg.name, fg.loadPerHour))
	}
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	return fmt.Sprintf("goal: <= %.0f load moves/hour after convergence (%s), 0 overlapping reconciles (%d): %s\n", steadyGoal, strings.Join(parts, ", "), overlaps, verdict)
}

// steadyRows are the per-minute samples as CSV rows: every move reason and round
// outcome seen, as columns.
func steadyRows(samples []steadySample) [][]string {
	reasons, outcomes := map[string]bool{}, map[string]bool{}
	for _, s := range samples {
		for k := range s.stats.moves {
			reasons[k] = true
		}
		for k := range s.stats.rounds {
			outcomes[k] = true
		}
	}
	rk, ok := sortedKeys(reasons), sortedKeys(outcomes)
	head := []string{"phase", "minute", "elapsed_s", "hot_partitions", "hot_owner", "hot_isolated"}
	for _, k := range rk {
		head = append(head, "moves_"+k)
	}
	for _, k := range ok {
		head = append(head, "rounds_"+k)
	}
	rows := [][]string{head}
	for _, s := range samples {
		row := []string{s.phase, strconv.Itoa(s.minute), fmt.Sprintf("%.0f", s.elapsed.Seconds()), fmt.Sprint(s.stats.hot), s.hot.owner, strconv.FormatBool(s.hotErr == nil && s.hot.isolated())}
		for _, k := range rk {
			row = append(row, fmt.Sprint(s.stats.moves[k]))
		}
		for _, k := range ok {
			row = append(row, fmt.Sprint(s.stats.rounds[k]))
		}
		rows = append(rows, row)
	}
	return rows
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

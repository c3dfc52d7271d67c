package scaleout

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

func TestRateSplit(t *testing.T) {
	tests := []struct {
		name            string
		total, share    float64
		withHot         bool
		wantOthers, hot float64
	}{
		{name: "with the hot namespace: a quarter to it", total: 2.5, share: 0.25, withHot: true, wantOthers: 1.875, hot: 0.625},
		{name: "without: the others keep their rate, the hot share is not sent", total: 2.5, share: 0.25, wantOthers: 1.875},
		{name: "no hot share", total: 4, share: 0, withHot: true, wantOthers: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			others, hot := rateSplit(tt.total, tt.share, tt.withHot)
			if math.Abs(others-tt.wantOthers) > 1e-12 || math.Abs(hot-tt.hot) > 1e-12 {
				t.Errorf("rateSplit = %v, %v; want %v, %v", others, hot, tt.wantOthers, tt.hot)
			}
		})
	}
}

func TestSampleQuantile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name   string
		q      float64
		sorted []float64
		want   float64
	}{
		{name: "none", q: 0.99, want: 0},
		{name: "one sample is every quantile", q: 0.5, sorted: []float64{3}, want: 3},
		{name: "median of an even count is the lower middle", q: 0.5, sorted: []float64{1, 2, 3, 4}, want: 2},
		{name: "p99 of 100 is the 99th", q: 0.99, sorted: hundred, want: 99},
		{name: "p99 of 10 is the largest", q: 0.99, sorted: hundred[:10], want: 10},
		{name: "q 0 is the smallest", q: 0, sorted: []float64{5, 6}, want: 5},
		{name: "q 1 is the largest", q: 1, sorted: []float64{5, 6}, want: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sampleQuantile(tt.q, tt.sorted); got != tt.want {
				t.Errorf("sampleQuantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name       string
		ds         []float64
		unobserved int
		want       latencySummary
	}{
		{name: "nothing", want: latencySummary{}},
		{name: "sorted on the way", ds: []float64{3, 1, 2}, want: latencySummary{changes: 3, p50: 2, p99: 3, max: 3}},
		{name: "an unobserved change is the max", ds: []float64{1, 1, 1}, unobserved: 1, want: latencySummary{changes: 4, unobserved: 1, p50: 1, p99: inf, max: inf}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(tt.ds, tt.unobserved); got != tt.want {
				t.Errorf("summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestObserverLatency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := newObserver()
	o.record("ns/a", 1, t0)
	o.record("ns/a", 3, t0.Add(2*time.Second))
	o.record("ns/a", 2, t0.Add(3*time.Second)) // a stale event: not a rise
	o.record("ns/a", 5, t0.Add(5*time.Second))
	tests := []struct {
		name       string
		key        string
		generation int64
		at         time.Time
		want       time.Duration
		ok         bool
	}{
		{name: "the first rise to or past the generation", key: "ns/a", generation: 2, at: t0.Add(time.Second), want: time.Second, ok: true},
		{name: "a rise past it counts", key: "ns/a", generation: 4, at: t0.Add(3 * time.Second), want: 2 * time.Second, ok: true},
		{name: "observed before the response arrived: 0", key: "ns/a", generation: 3, at: t0.Add(4 * time.Second), want: 0, ok: true},
		{name: "not reached yet", key: "ns/a", generation: 6, at: t0, ok: false},
		{name: "another Deployment", key: "ns/b", generation: 1, at: t0, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := o.latency(tt.key, tt.generation, tt.at)
			if got != tt.want || ok != tt.ok {
				t.Errorf("latency = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := newObserver()
	o.record("a/app-0", 2, t0.Add(time.Second))
	o.record("hot/app-1", 2, t0.Add(3*time.Second))
	sent := []sentChange{
		{key: "a/app-0", generation: 2, at: t0},
		{key: "hot/app-1", hot: true, generation: 2, at: t0},
		{key: "hot/app-2", hot: true, generation: 2, at: t0}, // never observed
	}
	others, hot := latencies(o, sent)
	if want := (latencySummary{changes: 1, p50: 1, p99: 1, max: 1}); others != want {
		t.Errorf("others = %+v, want %+v", others, want)
	}
	if hot.changes != 2 || hot.unobserved != 1 || hot.p50 != 3 || !math.IsInf(hot.max, 1) {
		t.Errorf("hot = %+v, want 2 changes, 1 unobserved, p50 3, max +Inf", hot)
	}
}

func TestPlaceHot(t *testing.T) {
	big, err := partition.NewMap(4096)
	if err != nil {
		t.Fatal(err)
	}
	one, err := partition.NewMap(1)
	if err != nil {
		t.Fatal(err)
	}
	p := func(ns string) uint32 { return uint32(big.For(ns)) }
	// The test's namespaces must fall in distinct partitions of big for its cases to mean
	// what they say.
	all := []string{"hot", "a", "b", "c"}
	seen := map[uint32]string{}
	for _, ns := range all {
		if other, dup := seen[p(ns)]; dup {
			t.Fatalf("%s and %s share partition %d: pick other names", ns, other, p(ns))
		}
		seen[p(ns)] = ns
	}
	empty := uint32(0)
	for seen[empty] != "" {
		empty++
	}
	tests := []struct {
		name     string
		pmap     partition.Map
		owners   map[uint32]string
		want     hotPlacement
		isolated bool
	}{
		{name: "alone but for an empty partition", pmap: big,
			owners: map[uint32]string{p("hot"): "s1", empty: "s1", p("a"): "s2", p("b"): "s2", p("c"): "s3"},
			want:   hotPlacement{partition: p("hot"), owner: "s1"}, isolated: true},
		{name: "with other namespaces' partitions", pmap: big,
			owners: map[uint32]string{p("hot"): "s1", p("a"): "s2", p("b"): "s1", p("c"): "s1"},
			want:   hotPlacement{partition: p("hot"), owner: "s1", alongside: []string{"b", "c"}}},
		{name: "unowned", pmap: big, owners: map[uint32]string{p("a"): "s1"},
			want: hotPlacement{partition: p("hot")}},
		{name: "namespaces sharing the hot partition are not alongside it", pmap: one, owners: map[uint32]string{0: "s1"},
			want: hotPlacement{partition: 0, owner: "s1", sharing: []string{"a", "b", "c"}}, isolated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := placeHot(tt.owners, tt.pmap, "hot", all)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("placeHot = %+v, want %+v", got, tt.want)
			}
			if got.isolated() != tt.isolated {
				t.Errorf("isolated = %v, want %v (%s)", got.isolated(), tt.isolated, got)
			}
		})
	}
}

func TestBalancerStats(t *testing.T) {
	scrape := func(load, balanced, gapLow, gapAll float64) framework.Samples {
		return framework.ParseMetrics(strings.Join([]string{
			`kshard_coordinator_balancer_moves_total{reason="membership"} 4096`,
			`kshard_coordinator_balancer_moves_total{reason="load"} ` + fmtF(load),
			`kshard_coordinator_balancer_rounds_total{outcome="balanced"} ` + fmtF(balanced),
			`kshard_coordinator_hot_partitions 1`,
			`kshard_coordinator_load_fair{group=""} 7.5`,
			`kshard_coordinator_load_fair{group="big"} 99`,
			`kshard_coordinator_ownership_gap_seconds_bucket{le="0.5"} ` + fmtF(gapLow),
			`kshard_coordinator_ownership_gap_seconds_bucket{le="+Inf"} ` + fmtF(gapAll),
			`kshard_coordinator_ownership_gap_seconds_count ` + fmtF(gapAll),
			`kshard_coordinator_moves_started_total 9999`,
		}, "\n"))
	}
	before, after := balancerStatsOf(scrape(1, 10, 4000, 4096)), balancerStatsOf(scrape(4, 12, 4002, 4100))
	tests := []struct {
		name string
		got  balancerStats
		want balancerStats
	}{
		{name: "read from a scrape", got: before, want: balancerStats{moves: map[string]float64{"membership": 4096, "load": 1}, rounds: map[string]float64{"balanced": 10},
			hot: 1, fair: 7.5, gap: map[float64]float64{0.5: 4000, math.Inf(1): 4096}, gapCount: 4096}},
		{name: "since an earlier scrape", got: after.since(before), want: balancerStats{moves: map[string]float64{"membership": 0, "load": 3}, rounds: map[string]float64{"balanced": 2},
			hot: 1, fair: 7.5, gap: map[float64]float64{0.5: 2, math.Inf(1): 4}, gapCount: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
		})
	}
	if got, want := formatCounts(after.since(before).moves), "load 3"; got != want {
		t.Errorf("formatCounts = %q, want %q", got, want)
	}
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func TestMovesPerHour(t *testing.T) {
	counts := []float64{0, 5, 9, 9, 10, 10, 12} // cumulative, one a minute
	tests := []struct {
		name     string
		from, to int
		want     float64
		ok       bool
	}{
		{name: "after convergence at minute 2", from: 2, to: 6, want: 45, ok: true},
		{name: "one minute", from: 3, to: 4, want: 60, ok: true},
		{name: "no moves", from: 4, to: 5, want: 0, ok: true},
		{name: "empty span", from: 6, to: 6},
		{name: "beyond the samples", from: 2, to: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := movesPerHour(counts, tt.from, tt.to)
			if got != tt.want || ok != tt.ok {
				t.Errorf("movesPerHour(%d, %d) = %v, %v; want %v, %v", tt.from, tt.to, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestPhaseOf(t *testing.T) {
	sample := func(phase string, minute int, load float64, isolated bool) steadySample {
		s := steadySample{phase: phase, minute: minute, stats: balancerStats{moves: map[string]float64{"load": load}, rounds: map[string]float64{}}}
		if isolated {
			s.hot = hotPlacement{owner: "s1"}
		} else {
			s.hot = hotPlacement{owner: "s1", alongside: []string{"x"}}
		}
		return s
	}
	samples := []steadySample{
		sample("uniform", 0, 0, false), sample("uniform", 1, 3, false), sample("uniform", 2, 4, false), sample("uniform", 3, 4, false), sample("uniform", 4, 5, false),
		sample("skewed", 0, 5, false), sample("skewed", 1, 8, true), sample("skewed", 2, 8, true),
	}
	tests := []struct {
		name         string
		ph           steadyPhase
		settle       int
		perHour      float64
		measured     bool
		isolatedAt   int
		settlingLoad float64
	}{
		{name: "settle 2 of 4 minutes", ph: steadyPhase{name: "uniform", minutes: 4}, settle: 2, perHour: 30, measured: true, isolatedAt: -1, settlingLoad: 4},
		{name: "the settling covers the phase", ph: steadyPhase{name: "skewed", minutes: 2}, settle: 5, isolatedAt: 1, settlingLoad: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fg := phaseOf(tt.ph, tt.settle, samples)
			if fg.loadPerHour != tt.perHour || fg.measured != tt.measured || fg.isolatedAt != tt.isolatedAt || fg.settling.moves["load"] != tt.settlingLoad {
				t.Errorf("phaseOf = %+v; want %v/h measured %v, isolated at %d, %v load moves settling", fg, tt.perHour, tt.measured, tt.isolatedAt, tt.settlingLoad)
			}
		})
	}
}

func TestSkewVerdict(t *testing.T) {
	isolated := hotPlacement{owner: "s1"}
	crowded := hotPlacement{owner: "s1", alongside: []string{"x"}}
	res := func(key string, p99 float64, at hotPlacement) skewResult {
		return skewResult{skewConfig: skewConfigs[indexOfSkewConfig(key)], others: latencySummary{changes: 1, p99: p99}, atStart: at}
	}
	tests := []struct {
		name    string
		results []skewResult
		want    []string // substrings of the verdict; none: empty
	}{
		{name: "without (a) there is nothing to compare", results: []skewResult{res("b", 1, isolated)}},
		{name: "met at 1.2x", results: []skewResult{res("a", 1, hotPlacement{}), res("b", 1.2, isolated)}, want: []string{"= 1.20x: met"}},
		{name: "missed, not isolated, (c) for contrast", results: []skewResult{res("a", 1, hotPlacement{}), res("b", 2, crowded), res("c", 3, crowded)},
			want: []string{"= 2.00x: MISSED", "NOT isolated", "(c) others' p99 3.00 s = 3.00x"}},
		{name: "an unobserved change misses", results: []skewResult{res("a", 1, hotPlacement{}), res("b", math.Inf(1), isolated)}, want: []string{"MISSED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := skewVerdict(tt.results)
			if len(tt.want) == 0 && got != "" {
				t.Errorf("skewVerdict = %q, want none", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("skewVerdict = %q, want it to contain %q", got, w)
				}
			}
		})
	}
}

func TestSteadyVerdict(t *testing.T) {
	tests := []struct {
		name     string
		figs     []phaseFigures
		overlaps int
		want     string
	}{
		{name: "met", figs: []phaseFigures{{name: "uniform", loadPerHour: 1, measured: true}, {name: "skewed", loadPerHour: 3, measured: true}}, want: "uniform 1.00, skewed 3.00), 0 overlapping reconciles (0): met"},
		{name: "too many moves", figs: []phaseFigures{{name: "uniform", loadPerHour: 4, measured: true}}, want: "MISSED"},
		{name: "an overlap", figs: []phaseFigures{{name: "uniform", measured: true}}, overlaps: 1, want: "(1): MISSED"},
		{name: "nothing measured is not a miss of the rate", figs: []phaseFigures{{name: "uniform"}}, want: "uniform n/a), 0 overlapping reconciles (0): met"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := steadyVerdict(tt.figs, tt.overlaps); !strings.Contains(got, tt.want) {
				t.Errorf("steadyVerdict = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

func TestPickSkewConfigs(t *testing.T) {
	tests := []struct {
		name  string
		keys  []string
		want  []string
		panic bool
	}{
		{name: "all, in the order given", keys: []string{"c", "a"}, want: []string{"c-hot-count", "a-without-hot"}},
		{name: "the reference on one shard fewer", keys: []string{"a", "d"}, want: []string{"a-without-hot", "d-without-hot-one-shard-fewer"}},
		{name: "unknown", keys: []string{"a", "e"}, panic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); (r != nil) != tt.panic {
					t.Errorf("panicked: %v, want a panic: %v", r, tt.panic)
				}
			}()
			if got := pickedNames(pickSkewConfigs(tt.keys)); !slices.Equal(got, tt.want) {
				t.Errorf("pickSkewConfigs = %v, want %v", got, tt.want)
			}
		})
	}
}

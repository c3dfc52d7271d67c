package sim

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("sim.seeds", 1000, "number of seeds per simulation test (soak: 100000 with -timeout 0)")
	flagSeed  = flag.Int64("sim.seed", -1, "run only this seed (reproduce a failure)")
	flagFirst = flag.Int64("sim.first", 0, "first seed of the range")
	flagV     = flag.Bool("sim.v", false, "print the full trace of a single -sim.seed run")
	flagAll   = flag.Bool("sim.all", false, "run every seed and list every failing one (the first still fails the test)")
)

// summary aggregates the results of many seeds.
type summary struct {
	mu        sync.Mutex
	seeds     int
	steps     int
	simTime   time.Duration
	worked    []time.Duration
	converged []time.Duration
	maxGap    time.Duration
	moves     uint64
	leaders   int
	faults    map[string]int
	// Runs with loads.
	loadMoves uint64
	byReason  map[string]uint64
	imbalance []float64
	balanced  []time.Duration
}

func (s *summary) add(r Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seeds++
	s.steps += r.Steps
	s.simTime += r.SimTime
	s.worked = append(s.worked, r.TimeToWorked)
	s.converged = append(s.converged, r.TimeToConverged)
	s.maxGap = max(s.maxGap, r.MaxGap)
	s.moves += r.Moves
	s.leaders += r.LeaderChanges
	if s.faults == nil {
		s.faults = map[string]int{}
	}
	for k, v := range r.Faults {
		s.faults[k] += v
	}
	if r.MovesByReason != nil {
		if s.byReason == nil {
			s.byReason = map[string]uint64{}
		}
		for k, v := range r.MovesByReason {
			s.byReason[k] += v
		}
		s.loadMoves += r.LoadMoves
		s.imbalance = append(s.imbalance, r.FinalImbalance)
		s.balanced = append(s.balanced, r.TimeToBalanced)
	}
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// runSeeds runs count seeds of a scenario on all CPUs and fails on the
// first violation, replaying that seed with a trace.
func runSeeds(t testing.TB, sc Scenario, count int) *summary {
	return runSeedsOf(t, Options{Scenario: sc}, count)
}

// runSeedsOf is runSeeds with options (the owner record) beyond the scenario.
func runSeedsOf(t testing.TB, base Options, count int) *summary {
	t.Helper()
	if *flagSeed >= 0 {
		var trace bytes.Buffer
		opts := base
		opts.Seed = *flagSeed
		if *flagV {
			opts.Trace = os.Stdout
		} else {
			opts.Trace = &trace
		}
		r, err := Run(opts)
		if err != nil {
			t.Fatalf("%v\nlast steps:\n%s", err, tail(trace.String(), 150))
		}
		t.Logf("seed %d: %d steps, %v simulated, worked after %v, converged after %v, faults %v",
			r.Seed, r.Steps, r.SimTime, r.TimeToWorked, r.TimeToConverged, r.Faults)
		if r.MovesByReason != nil {
			t.Logf("moves by reason %v, final imbalance %.3f, balanced after %v", r.MovesByReason, r.FinalImbalance, r.TimeToBalanced)
		}
		return nil
	}
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		sum    = &summary{}
		fails  []string
	)
	next.Store(*flagFirst)
	end := *flagFirst + int64(count)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				seed := next.Add(1) - 1
				if seed >= end {
					return
				}
				opts := base
				opts.Seed = seed
				r, err := Run(opts)
				if err != nil {
					mu.Lock()
					var v, fv *Violation
					if first == nil || (errors.As(err, &v) && errors.As(first, &fv) && v.Seed < fv.Seed) {
						first = err
					}
					fails = append(fails, err.Error())
					mu.Unlock()
					if *flagAll {
						continue
					}
					failed.Store(true)
					return
				}
				sum.add(r)
			}
		}()
	}
	wg.Wait()
	if *flagAll && len(fails) > 0 {
		slices.Sort(fails)
		t.Logf("%d of %d seeds failed:\n%s", len(fails), count, strings.Join(fails, "\n"))
	}
	if first != nil {
		var v *Violation
		seed := int64(-1)
		if errors.As(first, &v) {
			seed = v.Seed
		}
		var trace bytes.Buffer
		opts := base
		opts.Seed, opts.Trace = seed, &trace
		Run(opts)
		t.Fatalf("%v\nreproduce: go test ./pkg/sharding/sim -run '%s' -sim.seed=%d -sim.v\nlast steps:\n%s",
			first, t.Name(), seed, tail(trace.String(), 150))
	}
	return sum
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// TestSimulation is the chaos simulation: safety at every step, liveness
// after the faults stop. Soak: -sim.seeds=100000 -timeout 0.
func TestSimulation(t *testing.T) {
	start := time.Now()
	sum := runSeeds(t, Chaos, *flagSeeds)
	if sum == nil {
		return
	}
	el := time.Since(start)
	t.Logf("%d seeds in %v (%.0f seeds/s, %d CPUs): %d steps, %.0f simulated hours, %d leader changes, %d moves",
		sum.seeds, el.Round(time.Millisecond), float64(sum.seeds)/el.Seconds(), runtime.GOMAXPROCS(0),
		sum.steps, sum.simTime.Hours(), sum.leaders, sum.moves)
	t.Logf("faults: %v", sum.faults)
	t.Logf("after faults settled: all partitions worked p50 %v p99 %v max %v (bound %v); converged p50 %v p99 %v max %v",
		pct(sum.worked, 0.5), pct(sum.worked, 0.99), pct(sum.worked, 1), workedBound(),
		pct(sum.converged, 0.5), pct(sum.converged, 0.99), pct(sum.converged, 1))
}

// TestSimulationOwnerRecord is the chaos simulation with the server-side fence: the
// leader seizes shards whose stream stays closed and re-grants their partitions without
// waiting out their lease, so a partition may be held by two live shards at once; the
// invariant is then what the API server enforces: at most one shard the record names
// works it. The scenarios run with the record too.
func TestSimulationOwnerRecord(t *testing.T) {
	tests := []struct {
		name  string
		sc    Scenario
		seeds int
	}{
		{name: "chaos", sc: Chaos, seeds: *flagSeeds},
		{name: "leader change", sc: LeaderChange, seeds: scenarioSeeds()},
		{name: "graceful leave", sc: GracefulLeave, seeds: scenarioSeeds()},
		{name: "scale up", sc: ScaleUp, seeds: scenarioSeeds()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := runSeedsOf(t, Options{Scenario: tt.sc, OwnerRecord: true}, tt.seeds)
			if sum != nil {
				t.Logf("%d seeds: all partitions worked after faults settled p50 %v p99 %v max %v; longest gap %v; faults %v",
					sum.seeds, pct(sum.worked, 0.5), pct(sum.worked, 0.99), pct(sum.worked, 1), sum.maxGap, sum.faults)
			}
		})
	}
}

func scenarioSeeds() int { return max(1, *flagSeeds/5) }

// TestLeaderChangeMovesNothing: with stable membership, a new leader built
// only from hellos adopts every partition where it is, grants and moves
// nothing, and no partition is unworked at any instant.
func TestLeaderChangeMovesNothing(t *testing.T) {
	sum := runSeeds(t, LeaderChange, scenarioSeeds())
	if sum != nil {
		t.Logf("%d seeds: longest unworked partition %v", sum.seeds, sum.maxGap)
	}
}

// TestGracefulLeaveIsWarm: a leaving shard's partitions move warm (gap of a
// few message delays) and it exits on Farewell.
func TestGracefulLeaveIsWarm(t *testing.T) {
	sum := runSeeds(t, GracefulLeave, scenarioSeeds())
	if sum != nil {
		t.Logf("%d seeds: longest unworked partition %v (bound %v)", sum.seeds, sum.maxGap, maxWarmGap)
	}
}

// TestScaleUpIsWarm: partitions move warm to a new shard.
func TestScaleUpIsWarm(t *testing.T) {
	sum := runSeeds(t, ScaleUp, scenarioSeeds())
	if sum != nil {
		t.Logf("%d seeds: longest unworked partition %v (bound %v)", sum.seeds, sum.maxGap, maxWarmGap)
	}
}

// TestRunIsDeterministic: the same seed gives the same run.
func TestRunIsDeterministic(t *testing.T) {
	tests := []struct {
		name   string
		seed   int64
		sc     Scenario
		record bool
	}{
		{name: "chaos 7", seed: 7, sc: Chaos},
		{name: "leader change 3", seed: 3, sc: LeaderChange},
		{name: "owner record, scale-up 177", seed: 177, sc: ScaleUp, record: true},
		{name: "owner record, chaos 7", seed: 7, sc: Chaos, record: true},
		{name: "load shift 5", seed: 5, sc: LoadShift},
		{name: "liar 2", seed: 2, sc: Liar},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b bytes.Buffer
			ra, errA := Run(Options{Seed: tt.seed, Scenario: tt.sc, OwnerRecord: tt.record, Trace: &a})
			rb, errB := Run(Options{Seed: tt.seed, Scenario: tt.sc, OwnerRecord: tt.record, Trace: &b})
			if fmt.Sprint(errA) != fmt.Sprint(errB) || ra.Steps != rb.Steps || a.String() != b.String() {
				t.Fatalf("two runs of seed %d differ: %d vs %d steps", tt.seed, ra.Steps, rb.Steps)
			}
		})
	}
}

// BenchmarkSimulation reports chaos seeds per second.
func BenchmarkSimulation(b *testing.B) {
	seed := int64(0)
	start := time.Now()
	for b.Loop() {
		if _, err := Run(Options{Seed: seed}); err != nil {
			b.Fatal(err)
		}
		seed++
	}
	b.ReportMetric(float64(seed)/time.Since(start).Seconds(), "seeds/s")
}

// loadSeeds is the seeds per scenario with loads, which run minutes of simulated time
// each: at the default -sim.seeds=1000, 30 (4 under the race detector, as make test
// runs it); 200 in make soak (-sim.seeds=100000).
func loadSeeds() int {
	base := 30
	if raceEnabled {
		base = 4
	}
	return max(1, min(*flagSeeds*base/1000, max(base, *flagSeeds/500)))
}

// TestSimulationBalancer runs the scenarios with loads (docs/design-placement.md §4): a steady
// skewed load, a load shift, the chaos faults under load with and without the owner
// record, a shard lying about its load (0 and ×100), and a leader change, a join and a
// leave under load.
func TestSimulationBalancer(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{name: "skew steady", opts: Options{Scenario: SkewSteady}},
		{name: "skew steady, no noise", opts: Options{Scenario: SkewSteady, NoNoise: true}},
		{name: "load shift", opts: Options{Scenario: LoadShift}},
		{name: "load shift, no noise", opts: Options{Scenario: LoadShift, NoNoise: true}},
		{name: "skew chaos", opts: Options{Scenario: Chaos, Loads: true}},
		{name: "skew chaos, owner record", opts: Options{Scenario: Chaos, Loads: true, OwnerRecord: true}},
		{name: "liar reports 0", opts: Options{Scenario: Liar, LiarFactor: 0}},
		{name: "liar reports ×100", opts: Options{Scenario: Liar, LiarFactor: 100}},
		{name: "saturation", opts: Options{Scenario: Saturation}},
		{name: "saturation, no noise", opts: Options{Scenario: Saturation, NoNoise: true}},
		{name: "leader change with loads", opts: Options{Scenario: LeaderChange, Loads: true}},
		{name: "leader change with loads, no noise", opts: Options{Scenario: LeaderChange, Loads: true, NoNoise: true}},
		{name: "scale up with loads", opts: Options{Scenario: ScaleUp, Loads: true}},
		{name: "graceful leave with loads", opts: Options{Scenario: GracefulLeave, Loads: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			sum := runSeedsOf(t, tt.opts, loadSeeds())
			if sum == nil {
				return
			}
			t.Logf("%d seeds in %v: %.1f simulated hours; moves by reason %v (%.1f load moves per simulated hour); final imbalance p50 %.3f max %.3f; balanced after convergence (load shift: after the shift) p50 %v max %v; longest gap %v",
				sum.seeds, time.Since(start).Round(time.Millisecond), sum.simTime.Hours(), sum.byReason,
				float64(sum.loadMoves)/sum.simTime.Hours(), pctF(sum.imbalance, 0.5), pctF(sum.imbalance, 1),
				pct(sum.balanced, 0.5), pct(sum.balanced, 1), sum.maxGap)
		})
	}
}

func pctF(d []float64, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

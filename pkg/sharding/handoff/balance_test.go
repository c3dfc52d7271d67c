package handoff

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// loadConfig is testConfig with load placement, load rounds on, reports every 6s,
// rounds every 20s after a 30s warmup and a cooldown short enough not to matter unless
// a test sets it.
func loadConfig(p int) Config {
	cfg := testConfig(p)
	cfg.Load = LoadSettings{ReportInterval: 6 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.1}
	cfg.Balance = BalanceConfig{Placement: PlacementLoad, Enabled: true, Interval: 20 * time.Second, Warmup: 30 * time.Second, Cooldown: time.Second}
	return cfg
}

// reportSeq numbers the test's load heartbeats far above the shards' own, whose acks
// the shards refuse harmlessly.
var reportSeq uint64 = 1 << 40

// report sends shard id's load report of the partitions it owns now, each at the load
// load returns (requests/s), with objects 10 and age ageS. extra are added verbatim.
// It returns the heartbeat's error and whether it was acknowledged.
func (k *cluster) report(id string, load func(p partition.ID) float64, ageS uint32, extra ...PartitionLoad) (error, bool) {
	k.t.Helper()
	var sess Session
	for _, m := range k.c.Members() {
		if m.ID == id {
			sess = m.Session
		}
	}
	r := &LoadReport{LimiterWaitPermille: k.waits[id]}
	for _, a := range k.c.Assignments() {
		if a.Owner == id {
			r.Partitions = append(r.Partitions, PartitionLoad{Partition: a.Partition, LoadMilli: uint32(load(a.Partition) * 1000), Objects: 10, AgeSeconds: ageS})
		}
	}
	r.Partitions = append(r.Partitions, extra...)
	slices.SortFunc(r.Partitions, func(a, b PartitionLoad) int { return int(a.Partition) - int(b.Partition) })
	reportSeq++
	err := k.c.Step(k.now, Report{Kind: ReportHeartbeat, Shard: id, Session: sess, Seq: reportSeq, Load: r})
	acked := false
	for _, c := range k.c.Outbox() {
		acked = acked || (c.Kind == CmdAck && c.To == id && c.Seq == reportSeq)
		if c.Kind == CmdSessionEnded {
			k.t.Fatalf("%v after a load report", c)
		}
	}
	return err, acked
}

// runReporting runs the cluster for total, every shard reporting every 6s (the
// config's ReportInterval) with loads from load.
func (k *cluster) runReporting(total time.Duration, load func(p partition.ID) float64) {
	k.t.Helper()
	for end := k.now.Add(total); k.now.Before(end); {
		k.run(6*time.Second, 500*time.Millisecond)
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range k.shards {
				if !yield(id) {
					return
				}
			}
		}) {
			if !k.down[id] {
				k.report(id, load, 3600)
			}
		}
		k.pump()
	}
}

// movesBy returns the EventMoveStarted events drained from the coordinator, by reason.
func movesBy(c *Coordinator) map[balance.Reason]int {
	out := map[balance.Reason]int{}
	for _, e := range c.Events() {
		if e.Kind == EventMoveStarted {
			out[e.Reason]++
		}
	}
	return out
}

func TestBalanceConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{name: "count placement by default", mutate: func(c *Config) {}},
		{name: "load placement with rounds", mutate: func(c *Config) { *c = loadConfig(16) }},
		{name: "load placement without rounds or reports", mutate: func(c *Config) { c.Balance.Placement = PlacementLoad }},
		{name: "unknown placement", mutate: func(c *Config) { c.Balance.Placement = "weight" }, wantErr: "placement"},
		{name: "rounds without reports", mutate: func(c *Config) {
			*c = loadConfig(16)
			c.Load = LoadSettings{}
		}, wantErr: "load reports"},
		{name: "interval below two reports", mutate: func(c *Config) {
			*c = loadConfig(16)
			c.Balance.Interval = 11 * time.Second
		}, wantErr: "balance interval"},
		{name: "negative interval", mutate: func(c *Config) { c.Balance.Interval = -1 }, wantErr: "balance interval"},
		{name: "negative warmup", mutate: func(c *Config) { c.Balance.Warmup = -1 }, wantErr: "warmup"},
		{name: "negative cooldown", mutate: func(c *Config) { c.Balance.Cooldown = -1 }, wantErr: "cooldown"},
		{name: "negative max partition load", mutate: func(c *Config) { c.Balance.MaxPartitionLoad = -1 }, wantErr: "max partition load"},
		{name: "infinite max shard load", mutate: func(c *Config) { c.Balance.MaxShardLoad = math.Inf(1) }, wantErr: "max shard load"},
		{name: "margin of one", mutate: func(c *Config) { c.Balance.Params.Margin = 1 }, wantErr: "margin"},
		{name: "negative saturation wait", mutate: func(c *Config) { c.Balance.SaturationWait = -1 }, wantErr: "saturation wait"},
		{name: "saturation factor below one", mutate: func(c *Config) { c.Balance.Params.SaturationFactor = 0.5 }, wantErr: "saturation factor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(16)
			tc.mutate(&cfg)
			err := cfg.WithDefaults().Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
	if got := (Config{}).WithDefaults().Balance; got.Placement != PlacementCount || got.Interval != DefaultBalanceInterval ||
		got.Warmup != DefaultBalanceWarmup || got.Cooldown != DefaultBalanceCooldown || got.MaxPartitionLoad != DefaultMaxPartitionLoad || got.MaxShardLoad != DefaultMaxShardLoad ||
		got.SaturationWait != DefaultSaturationWait {
		t.Errorf("defaults %+v", got)
	}
}

// TestLoadReportHandling: a heartbeat's load report is always acknowledged; what it
// claims replaces the loads of the partitions the member holds (a held partition left
// out carries none), and what is wrong in it is dropped and counted: entries for
// partitions it does not hold (not_held), an entry above MaxPartitionLoad, a report
// summing above MaxShardLoad (absurd).
func TestLoadReportHandling(t *testing.T) {
	for _, placement := range []Placement{PlacementCount, PlacementLoad} {
		t.Run(string(placement), func(t *testing.T) {
			cfg := loadConfig(16)
			cfg.Balance.Placement = placement
			cfg.Balance.MaxPartitionLoad = 100
			cfg.Balance.MaxShardLoad = 300
			k := newCluster(t, cfg, 1)
			k.addShard("a", 1)
			k.addShard("b", 1)
			k.run(20*time.Second, 500*time.Millisecond)
			if !k.c.Converged() {
				t.Fatalf("setup did not converge: %+v", k.c.Stats())
			}
			held := map[string][]partition.ID{}
			for _, a := range k.c.Assignments() {
				held[a.Owner] = append(held[a.Owner], a.Partition)
			}
			mine, theirs := held["a"][0], held["b"][0]
			loadOf := func(p partition.ID) float64 {
				l, _, _ := k.c.PartitionLoad(p)
				return l
			}
			const base = 5.0
			tests := []struct {
				name          string
				load          func(p partition.ID) float64
				extra         []PartitionLoad
				wantMine      float64 // mine's load after
				wantOthers    float64 // a's other partitions' load after
				wantNotHeld   uint64
				wantAbsurd    uint64
				wantMemberAdd bool
			}{
				{name: "its own partitions", load: func(partition.ID) float64 { return base }, wantMine: base, wantOthers: base},
				{name: "an entry of another shard's partition", load: func(partition.ID) float64 { return 7 },
					extra: []PartitionLoad{{Partition: theirs, LoadMilli: 50_000}}, wantMine: 7, wantOthers: 7, wantNotHeld: 1},
				{name: "an entry out of range", load: func(partition.ID) float64 { return 6 },
					extra: []PartitionLoad{{Partition: 999, LoadMilli: 1}}, wantMine: 6, wantOthers: 6, wantNotHeld: 1},
				{name: "an entry above the partition bound", load: func(p partition.ID) float64 {
					if p == mine {
						return 150
					}
					return 8
				}, wantMine: 6, wantOthers: 8, wantAbsurd: 1},
				{name: "a sum above the shard bound", load: func(partition.ID) float64 { return 90 }, wantMine: 6, wantOthers: 8, wantAbsurd: 1},
				{name: "a held partition left out", load: func(p partition.ID) float64 {
					if p == mine {
						return -1 // left out below
					}
					return 3
				}, wantMine: 0, wantOthers: 3},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					k.run(cfg.Load.ReportInterval, 500*time.Millisecond) // at the cadence, not early
					before := k.c.Stats().Balance.ReportsRejected
					load := tc.load
					if load(mine) < 0 {
						// A report without mine's entry.
						sess := k.c.members["a"].session
						r := &LoadReport{}
						for _, p := range held["a"] {
							if p != mine {
								r.Partitions = append(r.Partitions, PartitionLoad{Partition: p, LoadMilli: uint32(load(p) * 1000)})
							}
						}
						reportSeq++
						if err := k.c.Step(k.now, Report{Kind: ReportHeartbeat, Shard: "a", Session: sess, Seq: reportSeq, Load: r}); err != nil {
							t.Fatalf("heartbeat refused: %v", err)
						}
						if out := k.c.Outbox(); !slices.ContainsFunc(out, func(c Command) bool { return c.Kind == CmdAck && c.Seq == reportSeq }) {
							t.Fatalf("heartbeat not acknowledged: %v", out)
						}
					} else if err, acked := k.report("a", load, 60, tc.extra...); err != nil || !acked {
						t.Fatalf("heartbeat refused (%v) or not acknowledged (%v)", err, acked)
					}
					after := k.c.Stats().Balance.ReportsRejected
					if got := after["not_held"] - before["not_held"]; got != tc.wantNotHeld {
						t.Errorf("not_held +%d, want +%d", got, tc.wantNotHeld)
					}
					if got := after["absurd"] - before["absurd"]; got != tc.wantAbsurd {
						t.Errorf("absurd +%d, want +%d", got, tc.wantAbsurd)
					}
					if got := loadOf(mine); got != tc.wantMine {
						t.Errorf("p%d (a's) load %v, want %v", mine, got, tc.wantMine)
					}
					want := 0.0
					for _, p := range held["a"] {
						if p != mine {
							if got := loadOf(p); got != tc.wantOthers {
								t.Errorf("p%d (a's) load %v, want %v", p, got, tc.wantOthers)
							}
							want += tc.wantOthers
						}
					}
					want += tc.wantMine
					if got := loadOf(theirs); got != 0 {
						t.Errorf("p%d (b's) load %v: another shard's report set it", theirs, got)
					}
					for _, m := range k.c.Members() {
						// No namespaces: a member's cost is its partitions' loads.
						if m.ID == "a" && (m.Load < want-1e-3 || m.Load > want+1e-3) {
							t.Errorf("member a's load %v, want %v", m.Load, want)
						}
					}
				})
			}
			for _, a := range k.c.Assignments() {
				if a.Owner == "" || a.State != StateOwned {
					t.Fatalf("after the reports partition %d is %s/%v", a.Partition, a.Owner, a.State)
				}
			}
		})
	}
}

// TestPlacementTargets: with count placement every target is ring.AssignFrom of the
// request's members and current owners, as before load placement existed; with load
// placement and neither loads nor namespaces known it is too (balance.Plan's cost-0
// property), through random joins, leaves and expiries. Both placements see the same
// changes and must reach the same targets.
func TestPlacementTargets(t *testing.T) {
	tests := []struct {
		name string
		seed uint64
	}{
		{name: "seed 1", seed: 1},
		{name: "seed 2", seed: 2},
		{name: "seed 3", seed: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var targets [2][][]string
			for i, placement := range []Placement{PlacementCount, PlacementLoad} {
				cfg := testConfig(64)
				cfg.Balance.Placement = placement
				c, err := New(cfg, 1, t0)
				if err != nil {
					t.Fatal(err)
				}
				c.OffloadRing()
				k := &cluster{t: t, now: t0, c: c, shards: map[string]*Shard{}, down: map[string]bool{}, record: map[partition.ID]string{}}
				r, err := ring.New(c.cfg.Ring)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(tc.seed, 7))
				next := 0
				take := func() {
					for {
						req, ok := k.c.TakeRingRequest()
						if !ok {
							return
						}
						if (req.plan != nil) != (placement == PlacementLoad) || req.Kind != balance.Membership {
							t.Fatalf("%s request with plan %v, kind %v", placement, req.plan != nil, req.Kind)
						}
						res, err := req.Compute()
						if err != nil {
							t.Fatal(err)
						}
						want, err := r.AssignFrom(req.Members, req.Current)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(res.Target, want) {
							t.Fatalf("%s target for %v differs from ring.AssignFrom", placement, req.Members)
						}
						k.c.RingComputed(k.now, req.Gen, res, nil)
						targets[i] = append(targets[i], slices.Clone(want))
						k.pump()
					}
				}
				for step := range 30 {
					switch n := len(k.shards); {
					case n < 2 || (n < 12 && rng.IntN(3) > 0):
						id := fmt.Sprintf("s%02d", next)
						next++
						k.addShard(id, 1)
					case rng.IntN(2) == 0:
						ids := slices.Sorted(mapKeys(k.shards))
						id := ids[rng.IntN(len(ids))]
						k.down[id] = true // silent: it expires
						delete(k.shards, id)
					default:
						ids := slices.Sorted(mapKeys(k.shards))
						k.shards[ids[rng.IntN(len(ids))]].Leave(k.now)
					}
					for range 40 {
						k.now = k.now.Add(500 * time.Millisecond)
						for _, s := range k.shards {
							s.Heartbeat(k.now)
						}
						k.c.Tick(k.now)
						k.pump()
						take()
					}
					for id, s := range k.shards {
						if s.Done() {
							delete(k.shards, id)
						}
					}
					_ = step
				}
			}
			if len(targets[0]) < 10 || !slices.EqualFunc(targets[0], targets[1], slices.Equal) {
				t.Fatalf("count placement reached %d targets, load placement without data %d; they differ or are too few", len(targets[0]), len(targets[1]))
			}
		})
	}
}

func mapKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestColdStartSpreadsNamespaces: with load placement and the namespace counts known
// before the shards arrive, a cold start (no load reported anywhere) spreads the
// namespaces, not the partitions: 300 namespaces over 4 shards, each at most 76 (the
// ideal is 75). Count placement spreads partitions and lands where the hash puts the
// namespaces.
func TestColdStartSpreadsNamespaces(t *testing.T) {
	const P, namespaces, shards = 256, 300, 4
	pm, err := partition.NewMap(P)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]uint32, P)
	for i := range namespaces {
		counts[pm.For(fmt.Sprintf("tenant-%03d", i))]++
	}
	tests := []struct {
		name      string
		placement Placement
		wantMax   int // 0: only logged
	}{
		{name: "load", placement: PlacementLoad, wantMax: 76},
		{name: "count", placement: PlacementCount},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(P)
			cfg.ExpectedMembers = shards
			cfg.Balance.Placement = tc.placement
			k := newCluster(t, cfg, 1)
			k.c.SetNamespaces(k.now, counts)
			for i := range shards {
				k.addShard(fmt.Sprintf("s%d", i), 1)
			}
			k.run(20*time.Second, 500*time.Millisecond)
			if !k.c.Converged() {
				t.Fatalf("did not converge: %+v", k.c.Stats())
			}
			per := map[string]int{}
			for _, a := range k.c.Assignments() {
				per[a.Owner] += int(counts[a.Partition])
			}
			most := 0
			for _, n := range per {
				most = max(most, n)
			}
			t.Logf("%s placement: namespaces per shard %v", tc.placement, per)
			if len(per) != shards || (tc.wantMax > 0 && most > tc.wantMax) {
				t.Fatalf("namespaces per shard %v, want %d shards each at most %d", per, shards, tc.wantMax)
			}
		})
	}
}

// TestBalanceRounds: load rounds run once per Interval with load placement and rounds
// enabled, are skipped (and counted) during the warmup, while a member has not reported
// and while moves are in flight; a round isolates a hot partition (its owner keeps no
// other partition holding a namespace), moves within the budget, tells why each move
// starts, and a steady load then stays put.
func TestBalanceRounds(t *testing.T) {
	const P = 32
	ones := make([]uint32, P)
	for p := range ones {
		ones[p] = 1
	}
	hot := partition.ID(5)
	load := func(p partition.ID) float64 {
		if p == hot {
			return 50
		}
		return 1
	}
	setup := func(t *testing.T, mutate func(*Config)) *cluster {
		cfg := loadConfig(P)
		if mutate != nil {
			mutate(&cfg)
		}
		k := newCluster(t, cfg, 1)
		k.c.SetNamespaces(k.now, ones)
		for i := range 4 {
			k.addShard(fmt.Sprintf("s%d", i), 1)
		}
		return k
	}
	hotIsolated := func(k *cluster) bool {
		owner := ""
		if a, _ := k.c.Assignment(hot); a.State == StateOwned {
			owner = a.Owner
		}
		for _, a := range k.c.Assignments() {
			if a.Owner == owner && a.Partition != hot {
				return false
			}
		}
		return owner != ""
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "warmup, then a round isolates the hot partition", run: func(t *testing.T) {
			k := setup(t, nil)
			k.runReporting(24*time.Second, load) // grace 12s, first round due at once: warmup
			st := k.c.Stats().Balance
			if st.Rounds["warmup"] == 0 || st.Moves["hot"] != 0 || hotIsolated(k) {
				t.Fatalf("before the warmup ended: rounds %v, moves %v, isolated %v", st.Rounds, st.Moves, hotIsolated(k))
			}
			movesBy(k.c) // drop the membership moves' events
			k.runReporting(60*time.Second, load)
			st = k.c.Stats().Balance
			if !hotIsolated(k) || st.Rounds["moved"] == 0 {
				t.Fatalf("after the warmup: rounds %v, moves %v, isolated %v", st.Rounds, st.Moves, hotIsolated(k))
			}
			ev := movesBy(k.c)
			if ev[balance.ReasonHot] == 0 || ev[balance.ReasonNone] != 0 || uint64(ev[balance.ReasonHot]) != st.Moves["hot"] {
				t.Fatalf("move-started events by reason %v, moves %v", ev, st.Moves)
			}
			if len(st.Domains) != 1 || st.Domains[0].Hot != 1 || st.Domains[0].Exclusive != 1 {
				t.Fatalf("domains %+v", st.Domains)
			}
			// What /assignments shows: the hot partition, and its owner alone exclusive.
			a, _ := k.c.Assignment(hot)
			for p := range partition.ID(P) {
				if got := k.c.PartitionHot(p); got != (p == hot) {
					t.Fatalf("PartitionHot(%d) = %v; the hot partition is %d", p, got, hot)
				}
			}
			if top := k.c.CostliestPartitions(2); len(top) != 2 || top[0].Partition != hot || !top[0].Hot || top[1].Hot {
				t.Fatalf("the costliest partitions %+v: want the hot partition %d first, hot, and the next not hot", top, hot)
			}
			for _, m := range k.c.Members() {
				if m.Exclusive != (m.ID == a.Owner) {
					t.Fatalf("member %s exclusive %v; the hot partition's owner is %s", m.ID, m.Exclusive, a.Owner)
				}
			}
			// Steady: later rounds move nothing.
			started, targets := k.c.Stats().MovesStarted, k.c.Stats().TargetChanges
			k.runReporting(90*time.Second, load)
			st = k.c.Stats().Balance
			if k.c.Stats().MovesStarted != started || k.c.Stats().TargetChanges != targets || st.Rounds["balanced"] == 0 {
				t.Fatalf("a steady load moved %d partitions, changed the target %d times; rounds %v",
					k.c.Stats().MovesStarted-started, k.c.Stats().TargetChanges-targets, st.Rounds)
			}
		}},
		{name: "a cold start's grants do not cool; the hot move does", run: func(t *testing.T) {
			// At the default cooldown: every partition was just given to its shard,
			// which must not hold the first round back for 30 minutes.
			k := setup(t, func(c *Config) { c.Balance.Cooldown = DefaultBalanceCooldown })
			k.runReporting(90*time.Second, load)
			st := k.c.Stats().Balance
			if !hotIsolated(k) || st.Moves["hot"] == 0 {
				t.Fatalf("90s after a cold start: rounds %v, moves %v, isolated %v", st.Rounds, st.Moves, hotIsolated(k))
			}
			var moved []partition.ID
			for _, e := range k.c.Events() {
				if e.Kind == EventMoveStarted && (e.Reason == balance.ReasonHot || e.Reason == balance.ReasonLoad) {
					moved = append(moved, e.Partition)
				}
			}
			if len(moved) == 0 {
				t.Fatal("no move for load")
			}
			for _, a := range k.c.Assignments() {
				_, _, cooling := k.c.PartitionLoad(a.Partition)
				if want := slices.Contains(moved, a.Partition); cooling != want {
					t.Errorf("p%d cooling %v, want %v (moved for load: %v)", a.Partition, cooling, want, want)
				}
			}
		}},
		{name: "a member that does not report holds rounds back", run: func(t *testing.T) {
			k := setup(t, nil)
			k.run(12*time.Second, 500*time.Millisecond)
			quiet := "s3"
			for end := k.now.Add(90 * time.Second); k.now.Before(end); {
				k.run(6*time.Second, 500*time.Millisecond)
				for id := range k.shards {
					if id != quiet {
						k.report(id, load, 3600)
					}
				}
				k.pump()
			}
			st := k.c.Stats().Balance
			if st.Rounds["incomplete_reports"] == 0 || st.Rounds["moved"]+st.Rounds["balanced"]+st.Rounds["budget_exhausted"] != 0 || st.Moves["hot"] != 0 {
				t.Fatalf("rounds %v, moves %v", st.Rounds, st.Moves)
			}
		}},
		{name: "moves in flight hold rounds back", run: func(t *testing.T) {
			k := setup(t, func(c *Config) {
				c.ReleaseTimeout = 10 * time.Minute
				c.Balance.Warmup = time.Minute
			})
			k.runReporting(30*time.Second, load)
			// A fifth shard joins before the warmup ends, and its moves stay in their
			// Release phase.
			k.holdDrain = true
			k.addShard("s4", 1)
			k.runReporting(90*time.Second, load)
			st := k.c.Stats()
			if st.MovesInFlight == 0 || st.Balance.Rounds["moving"] == 0 || st.Balance.Moves["hot"] != 0 || hotIsolated(k) {
				t.Fatalf("moves in flight %d, rounds %v, moves %v", st.MovesInFlight, st.Balance.Rounds, st.Balance.Moves)
			}
			k.holdDrain = false
			for _, s := range k.shards {
				for _, h := range s.Held() {
					if h.State == SlotReleasing {
						s.Drained(k.now, h.Partition)
					}
				}
			}
			k.pump()
			if st := k.c.Stats(); st.MovesInFlight != 0 {
				t.Fatalf("%d moves in flight after the drains", st.MovesInFlight)
			}
			k.runReporting(90*time.Second, load)
			if !hotIsolated(k) {
				t.Fatalf("once the moves finished, no round isolated the hot partition: %+v", k.c.Stats().Balance)
			}
		}},
		{name: "moves still to start hold rounds back", run: func(t *testing.T) {
			// A move the target asks for but not started yet (MaxConcurrentMoves, or a
			// join's moves after the first ended): a round planned now would start from
			// owners that move is about to change (the simulation's finding: such a round
			// put a joiner's partitions back). step runs the round before plan starts the
			// move, so the state is set up by hand and one Tick is taken.
			k := setup(t, nil)
			k.runReporting(120*time.Second, load)
			if !k.c.Converged() {
				t.Fatal("not converged after two minutes")
			}
			rounds := func() uint64 {
				r := k.c.Stats().Balance.Rounds
				return r["balanced"] + r["moved"] + r["budget_exhausted"]
			}
			planned, moving := rounds(), k.c.Stats().Balance.Rounds["moving"]
			a, _ := k.c.Assignment(hot + 1)
			for id := range k.shards {
				if id != a.Owner {
					k.c.target[hot+1] = id
					break
				}
			}
			k.c.bal.nextRound = k.now
			k.c.Tick(k.now)
			if got := rounds(); got != planned || k.c.Stats().Balance.Rounds["moving"] != moving+1 {
				t.Fatalf("a round was planned with a move still to start: rounds %v", k.c.Stats().Balance.Rounds)
			}
		}},
		{name: "the budget bounds each round", run: func(t *testing.T) {
			k := setup(t, func(c *Config) { c.Balance.Params.MaxMoves = 1 })
			k.runReporting(30*time.Second, load)
			movesBy(k.c)
			rounds := func() (n uint64) {
				for _, v := range k.c.Stats().Balance.Rounds {
					n += v
				}
				return n
			}
			// Step by step, reporting every 6s; the moves a round starts all start in
			// the call that applies its plan, before the next round.
			last, budgeted := rounds(), 0
			for i := 0; !hotIsolated(k); i++ {
				if i == 4000 {
					t.Fatalf("not isolated after %v: %+v", 4000*500*time.Millisecond, k.c.Stats().Balance)
				}
				k.run(500*time.Millisecond, 500*time.Millisecond)
				if i%12 == 11 {
					for id := range k.shards {
						k.report(id, load, 3600)
					}
					k.pump()
				}
				if n := rounds(); n != last {
					last, budgeted = n, 0
				}
				ev := movesBy(k.c)
				budgeted += ev[balance.ReasonHot] + ev[balance.ReasonLoad] + ev[balance.ReasonPin]
				if budgeted > 1 {
					t.Fatalf("a round started %d budgeted moves, the budget is 1 (rounds %v)", budgeted, k.c.Stats().Balance.Rounds)
				}
			}
			if k.c.Stats().Balance.Rounds["budget_exhausted"] == 0 {
				t.Fatalf("isolating one hot partition from 7 others never exhausted a budget of 1: %v", k.c.Stats().Balance.Rounds)
			}
		}},
		{name: "count placement runs no rounds", run: func(t *testing.T) {
			k := setup(t, func(c *Config) { c.Balance.Placement = PlacementCount })
			k.runReporting(120*time.Second, load)
			st := k.c.Stats().Balance
			if len(st.Rounds) != 0 || st.Moves["hot"] != 0 || len(st.Domains) != 0 {
				t.Fatalf("rounds %v, moves %v, domains %v", st.Rounds, st.Moves, st.Domains)
			}
		}},
		{name: "rounds disabled run membership plans only", run: func(t *testing.T) {
			k := setup(t, func(c *Config) { c.Balance.Enabled = false })
			k.runReporting(120*time.Second, load)
			st := k.c.Stats().Balance
			if len(st.Rounds) != 0 || st.Moves["hot"] != 0 || len(st.Domains) != 1 {
				t.Fatalf("rounds %v, moves %v, domains %v", st.Rounds, st.Moves, st.Domains)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

// TestNewLeaderMovesNothing: a new leader under load placement adopts what the shards
// report, learns their loads and the namespace counts, and its first target (and every
// target until its warmup ends) keeps every partition where it is: nobody is New, no
// partition is orphaned.
func TestNewLeaderMovesNothing(t *testing.T) {
	const P = 32
	counts := make([]uint32, P)
	for p := range counts {
		counts[p] = uint32(p%5 + 1)
	}
	load := func(p partition.ID) float64 { return float64(p%7) + 0.5 }
	tests := []struct {
		name    string
		reports bool
	}{
		{name: "reports before the grace ends", reports: true},
		{name: "no reports yet", reports: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadConfig(P)
			cfg.Balance.Warmup = 5 * time.Minute
			k := newCluster(t, cfg, 1)
			k.c.SetNamespaces(k.now, counts)
			for i := range 3 {
				k.addShard(fmt.Sprintf("s%d", i), 1)
			}
			k.runReporting(5*time.Minute, load) // rounds may move: that is the old leader
			k.run(10*time.Second, 500*time.Millisecond)
			before := k.owners()
			c2, err := New(cfg, 2, k.now)
			if err != nil {
				t.Fatal(err)
			}
			c2.SetNamespaces(k.now, counts)
			k.c = c2
			for _, s := range k.shards {
				s.Connect(k.now)
			}
			k.pump()
			if tc.reports {
				k.runReporting(4*time.Minute, load)
			} else {
				k.run(4*time.Minute, 500*time.Millisecond)
			}
			st := k.c.Stats()
			if st.MovesStarted != 0 || st.Grants != 0 || st.TargetChanges == 0 || !slices.Equal(k.owners(), before) {
				t.Fatalf("the new leader started %d moves and %d grants (%d targets)", st.MovesStarted, st.Grants, st.TargetChanges)
			}
			if st.Balance.Rounds["warmup"] == 0 {
				t.Fatalf("rounds %v: none skipped for the warmup", st.Balance.Rounds)
			}
			// It gave nothing, so it knows no partition's last move.
			costs := k.c.CostliestPartitions(P)
			if len(costs) == 0 {
				t.Fatal("no costliest partitions with namespace counts")
			}
			for _, pc := range costs {
				if pc.LastMove != balance.ReasonNone {
					t.Fatalf("partition %d: last move %q, want none known to the new leader", pc.Partition, pc.LastMove)
				}
			}
		})
	}
}

func (k *cluster) owners() []string {
	out := make([]string, 0, len(k.c.parts))
	for _, a := range k.c.Assignments() {
		out = append(out, a.Owner)
	}
	return out
}

// TestCoolingFromAge: a partition held before this leader started is cooling for
// Cooldown after it was acquired: from the age its owner reports, but never past this
// leader's start + Cooldown, so that a
// shard reporting every age as 0 cannot keep its partitions from moving; and from this
// leader's own acquisition, whatever the owner reports.
func TestCoolingFromAge(t *testing.T) {
	const cooldown = 10 * time.Minute
	cfg := loadConfig(8)
	cfg.Balance.Cooldown = cooldown
	cfg.Balance.Warmup = time.Hour
	// A new leader adopts s0's partitions: no acquisition of its own.
	k := newCluster(t, cfg, 1)
	k.addShard("s0", 1)
	k.run(20*time.Second, 500*time.Millisecond)
	start := k.now
	c2, err := New(cfg, 2, start)
	if err != nil {
		t.Fatal(err)
	}
	k.c = c2
	k.shards["s0"].Connect(k.now)
	k.pump()
	tests := []struct {
		name    string
		at      time.Duration // after the new leader's start
		age     uint32        // seconds
		cooling bool
	}{
		{name: "acquired long ago", at: time.Minute, age: 3600, cooling: false},
		{name: "acquired a minute ago", at: 2 * time.Minute, age: 60, cooling: true},
		{name: "acquired just under the cooldown ago", at: 3 * time.Minute, age: uint32((cooldown - time.Second) / time.Second), cooling: true},
		{name: "acquired the cooldown ago", at: 4 * time.Minute, age: uint32(cooldown / time.Second), cooling: false},
		{name: "age 0 before the cap", at: 9 * time.Minute, age: 0, cooling: true},
		{name: "age 0 at the cap (leader start + cooldown)", at: cooldown, age: 0, cooling: false},
		{name: "age 0 past the cap", at: cooldown + time.Hour, age: 0, cooling: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k.run(start.Add(tc.at).Sub(k.now), 500*time.Millisecond)
			k.report("s0", func(partition.ID) float64 { return 1 }, tc.age)
			for p := range 8 {
				if _, _, cooling := k.c.PartitionLoad(partition.ID(p)); cooling != tc.cooling {
					t.Fatalf("p%d cooling %v, want %v", p, cooling, tc.cooling)
				}
			}
		})
	}
	// A partition this leader gives for membership does not cool, whatever its owner
	// says: s0 expires, s1 takes everything and reports every age as 0. (Load and hot
	// moves cool from their acquisition: TestBalanceRounds.)
	k.down["s0"] = true
	delete(k.shards, "s0")
	k.addShard("s1", 1)
	k.run(30*time.Second, 500*time.Millisecond)
	for p := range 8 {
		if a, _ := k.c.Assignment(partition.ID(p)); a.Owner != "s1" || a.State != StateOwned {
			t.Fatalf("p%d: %+v", p, a)
		}
	}
	k.report("s1", func(partition.ID) float64 { return 1 }, 0)
	for p := range 8 {
		if _, _, cooling := k.c.PartitionLoad(partition.ID(p)); cooling {
			t.Fatalf("p%d, given for membership a moment ago, is cooling", p)
		}
	}
}

// TestSetNamespacesAndPins: counts and pins of the wrong length are ignored; pins reach
// the plan (a pin to a group no member is in is unsatisfied, counted in the domain).
func TestSetNamespacesAndPins(t *testing.T) {
	cfg := loadConfig(8)
	k := newCluster(t, cfg, 1)
	k.c.SetNamespaces(k.now, make([]uint32, 7))
	k.c.SetPins(k.now, make([]string, 9))
	if k.c.bal.namespaces != nil || k.c.bal.pins != nil {
		t.Fatal("inputs of the wrong length were taken")
	}
	counts := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	k.c.SetNamespaces(k.now, counts)
	counts[0] = 100
	if k.c.bal.namespaces[0] != 1 {
		t.Fatal("SetNamespaces did not copy")
	}
	k.c.SetPins(k.now, []string{"", "gpu", "", "", "", "", "", ""})
	k.addShard("a", 1)
	k.addShard("b", 1)
	k.run(20*time.Second, 500*time.Millisecond)
	st := k.c.Stats().Balance
	if len(st.Domains) != 1 || st.Domains[0].UnsatisfiedPins != 1 {
		t.Fatalf("domains %+v, want the default one with 1 unsatisfied pin", st.Domains)
	}
	k.c.SetPins(k.now, nil)
	k.addShard("c", 1)
	k.run(10*time.Second, 500*time.Millisecond)
	if st := k.c.Stats().Balance; st.Domains[0].UnsatisfiedPins != 0 {
		t.Fatalf("domains %+v after the pins were removed", st.Domains)
	}
}

// TestSuspect: a member that received partitions for load and, 3 half-lives after the
// moves, reports them below a quarter of what their donor reported becomes suspect for
// an hour (no load moves go to it); a receiver that reports them honestly does not.
func TestSuspect(t *testing.T) {
	const P = 32
	ones := make([]uint32, P)
	for p := range ones {
		ones[p] = 1
	}
	hot := partition.ID(5)
	load := func(p partition.ID) float64 {
		if p == hot {
			return 50
		}
		return 4
	}
	k := newCluster(t, loadConfig(P), 1)
	k.c.SetNamespaces(k.now, ones)
	for i := range 4 {
		k.addShard(fmt.Sprintf("s%d", i), 1)
	}
	k.runReporting(30*time.Second, load)
	movesBy(k.c)
	k.runReporting(60*time.Second, load)
	received := map[string]int{}
	for _, e := range k.c.Events() {
		if e.Kind == EventMoveStarted && e.Reason == balance.ReasonHot {
			received[e.Shard]++
		}
	}
	if len(received) < 2 {
		t.Fatalf("hot moves went to %v; want at least two receivers", received)
	}
	liar := slices.Sorted(mapKeys(received))[0]
	zero := func(partition.ID) float64 { return 0 }
	for end := k.now.Add(4 * time.Minute); k.now.Before(end); {
		k.run(6*time.Second, 500*time.Millisecond)
		for _, id := range slices.Sorted(mapKeys(k.shards)) {
			if id == liar {
				k.report(id, zero, 3600)
			} else {
				k.report(id, load, 3600)
			}
		}
		k.pump()
	}
	if n := k.c.Stats().Balance.Suspects; n != 1 {
		t.Fatalf("%d suspects, want 1 (%s)", n, liar)
	}
	in := k.c.planInput(k.c.applied, k.c.currentOwners(), true, k.now)
	for _, m := range in.Members {
		if m.Suspect != (m.ID == liar) {
			t.Fatalf("member %s suspect %v; the liar is %s", m.ID, m.Suspect, liar)
		}
	}
	for _, m := range k.c.Members() {
		if m.Suspect != (m.ID == liar) {
			t.Fatalf("Members: %s suspect %v; the liar is %s", m.ID, m.Suspect, liar)
		}
	}
	k.run(SuspectFor, 500*time.Millisecond)
	if n := k.c.Stats().Balance.Suspects; n != 0 {
		t.Fatalf("%d suspects an hour later", n)
	}
	if i := slices.IndexFunc(k.c.Members(), func(m MemberInfo) bool { return m.Suspect }); i >= 0 {
		t.Fatalf("Members: %s still suspect an hour later", k.c.Members()[i].ID)
	}
}

// TestCoolingAcrossMembershipMoves: a membership move (its shard left) does not end the
// cooldown of the partition's last load move, nor start one; a load move does.
func TestCoolingAcrossMembershipMoves(t *testing.T) {
	cfg := loadConfig(8)
	cfg.Balance.Cooldown = 10 * time.Minute
	c, err := New(cfg, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		reason  balance.Reason
		at      time.Duration // after t0
		cooling bool          // a second after the acquisition
	}{
		{name: "given for membership: no cooldown", reason: balance.ReasonMembership, at: 0, cooling: false},
		{name: "moved for load: cooling", reason: balance.ReasonLoad, at: time.Minute, cooling: true},
		{name: "then its shard leaves: still cooling from the load move", reason: balance.ReasonMembership, at: 2 * time.Minute, cooling: true},
		{name: "given for a pin after the cooldown: not cooling", reason: balance.ReasonPin, at: 12 * time.Minute, cooling: false},
		{name: "moved off a hot shard: cooling", reason: balance.ReasonHot, at: 13 * time.Minute, cooling: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.at)
			c.given(0, tc.reason)
			c.acquiredAt(0, now)
			if got := c.cooling(0, now.Add(time.Second)); got != tc.cooling {
				t.Fatalf("cooling %v, want %v", got, tc.cooling)
			}
		})
	}
}

// TestCoolingAfterFailover: a leader after the first term cools what it gives for
// membership during its first cooldown (an earlier leader's load moves are unknown to it,
// and a membership move resets the ages shards report); the first leader does not.
func TestCoolingAfterFailover(t *testing.T) {
	cfg := loadConfig(8)
	cfg.Balance.Cooldown = 10 * time.Minute
	tests := []struct {
		name    string
		term    uint32
		at      time.Duration // after the leader's start
		cooling bool
	}{
		{name: "first term, at once", term: 1, at: time.Minute, cooling: false},
		{name: "later term, in its first cooldown", term: 3, at: time.Minute, cooling: true},
		{name: "later term, after its first cooldown", term: 3, at: 11 * time.Minute, cooling: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(cfg, tc.term, t0)
			if err != nil {
				t.Fatal(err)
			}
			now := t0.Add(tc.at)
			c.given(0, balance.ReasonMembership)
			c.acquiredAt(0, now)
			if got := c.cooling(0, now.Add(time.Second)); got != tc.cooling {
				t.Fatalf("cooling %v, want %v", got, tc.cooling)
			}
		})
	}
}

// TestCostliestPartitions: the n partitions of highest cost, as balance.Costs computes it,
// costliest first with ties by partition ID, none of cost 0; each with its owner, load,
// objects and namespaces, whether it is hot, and why this leader gave it to its owner. And
// each member's last rate-limiter wait as reported.
func TestCostliestPartitions(t *testing.T) {
	const P = 64
	// Loads repeat every 8 partitions and namespace counts every 3, so partitions 24
	// apart cost the same (ties); a quarter carry neither (cost 0), and so do those of
	// load 0 and no namespace.
	load := func(p partition.ID) float64 {
		if p%4 == 3 {
			return 0
		}
		return float64(p % 8)
	}
	ns := make([]uint32, P)
	for p := range ns {
		if p%4 != 3 {
			ns[p] = uint32(p % 3)
		}
	}
	cfg := loadConfig(P)
	cfg.Balance.Enabled = false // membership plans only: nothing moves for load
	k := newCluster(t, cfg, 1)
	if got := k.c.CostliestPartitions(10); got != nil {
		t.Fatalf("without loads or namespace counts: %+v, want nil", got)
	}
	k.c.SetNamespaces(k.now, ns)
	for i := range 2 {
		k.addShard(fmt.Sprintf("s%d", i), 1)
	}
	k.runReporting(30*time.Second, load)
	if !k.c.Converged() {
		t.Fatal("did not converge")
	}
	loads, _ := k.c.loads()
	cost := balance.Costs(loads, ns)
	var want []partition.ID // every partition of cost > 0, costliest first, ties by ID
	for p := range partition.ID(P) {
		if cost[p] > 0 {
			want = append(want, p)
		}
	}
	slices.SortStableFunc(want, func(a, b partition.ID) int { return cmp.Compare(cost[b], cost[a]) })
	if ties := slices.ContainsFunc(want[1:], func(p partition.ID) bool { return cost[p] == cost[want[0]] }); !ties {
		t.Fatalf("the costliest partition %d ties with none: the test needs ties", want[0])
	}
	tests := []struct {
		name string
		n    int
		want int
	}{
		{name: "none asked", n: 0, want: 0},
		{name: "the costliest 10", n: 10, want: 10},
		{name: "more than carry a cost", n: P, want: len(want)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := k.c.CostliestPartitions(tt.n)
			if len(got) != tt.want {
				t.Fatalf("%d partitions, want %d", len(got), tt.want)
			}
			for i, pc := range got {
				p := pc.Partition
				a, _ := k.c.Assignment(p)
				l, o, _ := k.c.PartitionLoad(p)
				if p != want[i] || pc.Cost != float64(cost[p]) {
					t.Fatalf("entry %d: partition %d of cost %v, want %d of cost %v", i, p, pc.Cost, want[i], cost[want[i]])
				}
				// No partition is hot here (loads of at most 7 requests/s over two
				// shards): TestBalanceRounds checks a hot one's entry.
				if pc.Owner != a.Owner || pc.Load != l || pc.Objects != o || pc.Namespaces != ns[p] || pc.Hot {
					t.Fatalf("entry %d: %+v; owner %s, load %v, objects %d, namespaces %d", i, pc, a.Owner, l, o, ns[p])
				}
				if pc.LastMove != balance.ReasonMembership {
					t.Fatalf("entry %d: partition %d last moved for %q, want membership (this leader granted it)", i, p, pc.LastMove)
				}
			}
		})
	}

	// The rate-limiter wait of a member's last report taken; a report dropped as absurd
	// changes nothing, its wait included (it would otherwise mark the member saturated).
	for _, tc := range []struct {
		name     string
		wait     uint32
		load     uint32 // of one partition s0 owns, in milli-requests/s; 0: an empty report
		wantWait uint32
	}{
		{name: "a report", wait: 250, wantWait: 250},
		{name: "an absurd report", wait: 9700, load: 10_000_000, wantWait: 250},
	} {
		k.run(6*time.Second, 500*time.Millisecond)
		var sess Session
		for _, m := range k.c.Members() {
			if m.ID == "s0" {
				sess = m.Session
			}
		}
		r := &LoadReport{LimiterWaitPermille: tc.wait}
		if tc.load > 0 {
			i := slices.IndexFunc(k.c.Assignments(), func(a Assignment) bool { return a.Owner == "s0" })
			r.Partitions = []PartitionLoad{{Partition: partition.ID(i), LoadMilli: tc.load, Objects: 1, AgeSeconds: 60}}
		}
		reportSeq++
		if err := k.c.Step(k.now, Report{Kind: ReportHeartbeat, Shard: "s0", Session: sess, Seq: reportSeq, Load: r}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		k.pump()
		if absurd := k.c.Stats().Balance.ReportsRejected["absurd"]; (tc.load > 0) != (absurd > 0) {
			t.Fatalf("%s: %d absurd reports", tc.name, absurd)
		}
		for _, m := range k.c.Members() {
			if want := map[bool]uint32{true: tc.wantWait, false: 0}[m.ID == "s0"]; m.LimiterWaitPermille != want || m.Saturated {
				t.Fatalf("%s: %s's limiter wait %d‰, want %d‰ (saturated %v)", tc.name, m.ID, m.LimiterWaitPermille, want, m.Saturated)
			}
		}
	}
}

// TestSaturatedShard: a shard whose load reports wait at least SaturationWait in its
// rate limiters, and twice the median shard's wait, is saturated (Members, Stats): load rounds count its partitions above
// what they measure, so it sheds load although its measured load is the fair share, and
// no partition moves onto it; under placement by count, or below the wait, nothing is
// saturated.
func TestSaturatedShard(t *testing.T) {
	const P = 128 // fine enough that the others can take some of s0's partitions within the dead band
	ones := make([]uint32, P)
	for p := range ones {
		ones[p] = 1
	}
	even := func(partition.ID) float64 { return 1 }
	tests := []struct {
		name      string
		placement Placement
		wait      uint32 // s0's, ‰
		others    uint32 // every other shard's, ‰
		want      bool   // s0 saturated, and partitions leave it
	}{
		{name: "below the wait", placement: PlacementLoad, wait: 1999},
		{name: "at the wait", placement: PlacementLoad, wait: 2000, want: true},
		{name: "placement by count", placement: PlacementCount, wait: 9000},
		// s0 reports first, against the others' waits of 0: saturated at once, and let
		// go when theirs catch up, below SaturationMedianExitRatio × their median.
		{name: "every shard waits, s0 at 1.46 x the median", placement: PlacementLoad, wait: 3800, others: 2600},
		{name: "s0 twice the median of waiting shards", placement: PlacementLoad, wait: 5200, others: 2600, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := loadConfig(P)
			cfg.Balance.Placement = tt.placement
			k := newCluster(t, cfg, 1)
			k.c.SetNamespaces(k.now, ones)
			for i := range 4 {
				k.addShard(fmt.Sprintf("s%d", i), 1)
			}
			k.runReporting(90*time.Second, even)
			if !k.c.Converged() {
				t.Fatal("did not converge")
			}
			before := map[partition.ID]string{}
			for _, a := range k.c.Assignments() {
				before[a.Partition] = a.Owner
			}
			k.c.Events() // drop the first phase's
			k.waits = map[string]uint32{"s0": tt.wait, "s1": tt.others, "s2": tt.others, "s3": tt.others}
			k.runReporting(90*time.Second, even)
			// The events say so, both ways: the last one of each shard is its state.
			last := map[string]Event{}
			for _, e := range k.c.Events() {
				if e.Kind == EventSaturation {
					last[e.Shard] = e
				}
			}
			for id, e := range last {
				if e.Saturated != (tt.want && id == "s0") || (e.Saturated && e.Wait != tt.wait) {
					t.Fatalf("%s's last saturation event %+v", id, e)
				}
			}
			if e, ok := last["s0"]; tt.want && !ok {
				t.Fatalf("no saturation event for s0: %+v", e)
			}
			if got := k.c.Stats().Balance.Saturated; got != map[bool]int{true: 1}[tt.want] {
				t.Fatalf("saturated members %d, want s0's alone: %v", got, tt.want)
			}
			for _, m := range k.c.Members() {
				if m.Saturated != (tt.want && m.ID == "s0") {
					t.Fatalf("member %s saturated %v", m.ID, m.Saturated)
				}
			}
			left := 0
			for _, a := range k.c.Assignments() {
				if a.Owner == "s0" && before[a.Partition] != "s0" {
					t.Fatalf("partition %d moved onto the saturated s0 from %s", a.Partition, before[a.Partition])
				}
				if before[a.Partition] == "s0" && a.Owner != "s0" {
					left++
				}
			}
			if (left > 0) != tt.want {
				t.Fatalf("%d partitions left s0 (wait %d‰); rounds %v, moves %v, domains %+v", left, tt.wait, k.c.Stats().Balance.Rounds, k.c.Stats().Balance.Moves, k.c.Stats().Balance.Domains)
			}
		})
	}
}

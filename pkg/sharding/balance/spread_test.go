package balance

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// converged returns the target of a Membership plan of members from
// nothing: where a first start puts the partitions.
func converged(t *testing.T, in Input) []string {
	t.Helper()
	first := in
	first.Kind, first.Current, first.Cooling = Membership, nil, nil
	return plan(t, first).Target
}

// skewed returns an input whose current owners hold a steady load very
// unevenly: a Membership placement of the costs, then the costs of the
// partitions of the member holding the most multiplied by 6.
func skewed(t *testing.T, p, n int, shape string, seed uint64) Input {
	rng := rand.New(rand.NewPCG(seed, uint64(p)))
	cost, objs, ns := costs(rng, shape, p)
	in := Input{Ring: newRing(t, p, 0), Members: plain(n), Cost: cost, Objects: objs, Namespaces: ns,
		Params: Params{MaxNamespaceShare: math.Inf(1)}}
	in.Current = converged(t, in)
	in.Cost = slices.Clone(cost)
	busy := mostPartitions(in.Current, cost)
	for i, o := range in.Current {
		if o == busy {
			in.Cost[i] *= 6
		}
	}
	in.Kind = Balance
	return in
}

// TestSpreadMovesLowerPhi: every load move lowers Σ cost² (r + c < b), goes
// from the busiest non-exclusive member to a non-suspect one, never moves a
// cooling partition, and the round stops within the dead band or on its
// budget.
func TestSpreadMovesLowerPhi(t *testing.T) {
	tests := []struct {
		name      string
		p, n      int
		shape     string
		suspect   bool
		saturated bool // member 3 (its partitions count 1.5 ×)
		cooling   bool
		hot       bool // hot isolation allowed (it may do all the work)
	}{
		{name: "zipf 4096 by 4", p: 4096, n: 4, shape: shapeZipf},
		{name: "uniform 1024 by 16", p: 1024, n: 16, shape: shapeUniform},
		{name: "sparse 1024 by 16, suspects", p: 1024, n: 16, shape: shapeSparse, suspect: true},
		{name: "uniform 1024 by 16, one saturated", p: 1024, n: 16, shape: shapeUniform, saturated: true},
		{name: "zipf 256 by 8, cooling", p: 256, n: 8, shape: shapeZipf, cooling: true},
		{name: "hot 512 by 8", p: 512, n: 8, shape: shapeHot, hot: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := skewed(t, tt.p, tt.n, tt.shape, 5)
			if !tt.hot {
				in.Params.HotFactor = 1e6 // this test is about the spread
			}
			if tt.suspect {
				in.Members[1].Suspect, in.Members[2].Suspect = true, true
			}
			if tt.saturated {
				in.Members[3].Saturated = true
			}
			if tt.cooling {
				in.Cooling = make([]bool, tt.p)
				for i := range in.Cooling {
					in.Cooling[i] = i%3 == 0
				}
			}
			before := phi(in.Current, in.Cost)
			out, steps := traced(t, in)
			checkOutput(t, in, out)
			loads := 0
			for _, s := range steps {
				if s.why != ReasonLoad {
					continue
				}
				loads++
				if d := 2 * s.cost * (s.toLoad - s.fromLoad + s.cost); d >= 0 {
					t.Fatalf("load move of partition %d (cost %.3f) from %.3f to %.3f does not lower Φ", s.p, s.cost, s.fromLoad, s.toLoad)
				}
				if s.toMember.Suspect || s.toMember.Saturated || s.toExclusive {
					t.Fatalf("load move of partition %d to suspect, saturated or exclusive member %d", s.p, s.to)
				}
				if in.Cooling != nil && in.Cooling[s.p] {
					t.Fatalf("load move of cooling partition %d", s.p)
				}
			}
			if loads == 0 && !tt.hot {
				t.Fatal("a member at 6× its share made no load move")
			}
			if after := phi(out.Target, in.Cost); after >= before {
				t.Fatalf("Φ %.1f → %.1f", before, after)
			}
			st := out.Domains[0]
			if !out.BudgetExhausted && st.Imbalance > 1+DefaultMargin/2+1e-9 && !tt.cooling && !tt.suspect && !tt.saturated && !tt.hot {
				t.Fatalf("round ended at busiest/mean %.3f within budget", st.Imbalance)
			}
		})
	}
}

// TestConverges: iterating Balance plans on their own targets under a
// steady skewed load reaches a target that then makes no moves, within a
// bounded number of rounds; partitions moved in the last round cool.
func TestConverges(t *testing.T) {
	tests := []struct {
		name  string
		p, n  int
		shape string
		moves int
	}{
		{name: "zipf 4096 by 4", p: 4096, n: 4, shape: shapeZipf, moves: 64},
		{name: "zipf 4096 by 100", p: 4096, n: 100, shape: shapeZipf, moves: 64},
		{name: "hot 1024 by 16", p: 1024, n: 16, shape: shapeHot, moves: 64},
		{name: "uniform 256 by 8, 4 moves a round", p: 256, n: 8, shape: shapeUniform, moves: 4},
		{name: "sparse 48 by 7", p: 48, n: 7, shape: shapeSparse, moves: 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := skewed(t, tt.p, tt.n, tt.shape, 9)
			in.Params.MaxMoves = tt.moves
			in.Cooling = make([]bool, tt.p)
			const bound = 40
			quiet := 0
			for round := range bound + 5 {
				out := plan(t, in)
				checkOutput(t, in, out)
				m := moved(in.Current, out.Target)
				// One quiet round may only wait for the last round's
				// moves to cool; after two nothing cools, so the target is
				// a fixed point and must stay one.
				if len(m) == 0 {
					quiet++
					if quiet == 5 {
						return
					}
				} else {
					if quiet >= 2 {
						t.Fatalf("round %d moved %d partitions after %d quiet rounds", round, len(m), quiet)
					}
					quiet = 0
				}
				if round == bound && quiet == 0 {
					t.Fatalf("still moving after %d rounds (%d this round)", bound, len(m))
				}
				clear(in.Cooling)
				for _, p := range m {
					in.Cooling[p] = true
				}
				in.Current = out.Target
			}
		})
	}
}

// TestHotIsolation: a partition above the fair share leaves its member
// holding no other partition with a namespace; a member holding two gets
// one of them moved to a member of its own; empty partitions stay.
func TestHotIsolation(t *testing.T) {
	const p, n = 256, 8
	tests := []struct {
		name    string
		hot     int  // hot partitions, all on one member
		cooling bool // every partition but the extra hot ones cooling
	}{
		{name: "one hot", hot: 1},
		{name: "two hot on one member", hot: 2},
		{name: "three hot on one member", hot: 3},
		// Moved for load onto the member just before it turned hot: they move off
		// all the same (nothing moves onto an exclusive member, so no ping-pong).
		{name: "one hot, the others on its member cooling", hot: 1, cooling: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, p, 0)
			cost := make([]float32, p)
			ns := make([]uint32, p)
			objs := make([]uint32, p)
			for i := range p {
				if i%4 != 0 { // a quarter empty
					cost[i], ns[i], objs[i] = 1, 1, 10
				}
			}
			in := Input{Ring: r, Members: plain(n), Cost: cost, Namespaces: ns, Objects: objs,
				Params: Params{MaxMoves: p, MaxObjects: math.MaxUint32, MaxCostFraction: 1}}
			in.Current = converged(t, in)
			holder := in.Current[1]
			var hot []int
			for i, o := range in.Current {
				if o == holder && cost[i] > 0 && len(hot) < tt.hot {
					hot = append(hot, i)
				}
			}
			in.Cost = slices.Clone(cost)
			for _, h := range hot {
				in.Cost[h] = 100 // total ≈ 192 + 100·hot: each above F
			}
			if tt.cooling {
				in.Cooling = make([]bool, p)
				for i := range in.Cooling {
					in.Cooling[i] = true
				}
			}
			in.Kind = Balance
			out := plan(t, in)
			checkOutput(t, in, out)
			owners := map[string]int{}
			for _, h := range hot {
				owners[out.Target[h]]++
			}
			if len(owners) != tt.hot {
				t.Fatalf("%d hot partitions on %d members, want one each", tt.hot, len(owners))
			}
			if out.Target[hot[0]] != holder {
				t.Fatalf("the hot partition kept on %s moved to %s", holder, out.Target[hot[0]])
			}
			for i, o := range out.Target {
				if owners[o] > 0 && !slices.Contains(hot, i) && ns[i] > 0 {
					t.Fatalf("exclusive member %s still holds partition %d with a namespace", o, i)
				}
				if was := in.Current[i]; cost[i] == 0 && owners[was] > 0 && o != was {
					t.Fatalf("empty partition %d moved off exclusive member %s", i, was)
				}
			}
			if st := out.Domains[0]; st.Hot != tt.hot || st.Exclusive != tt.hot {
				t.Fatalf("stats: %d hot, %d exclusive, want %d", st.Hot, st.Exclusive, tt.hot)
			}
			wantHot := make([]partition.ID, len(hot))
			for i, h := range hot {
				wantHot[i] = partition.ID(h)
			}
			slices.Sort(wantHot)
			wantExcl := slices.Sorted(maps.Keys(owners))
			if st := out.Domains[0]; !slices.Equal(st.HotPartitions, wantHot) || !slices.Equal(st.ExclusiveMembers, wantExcl) {
				t.Fatalf("hot partitions %v, exclusive members %v; want %v and %v", st.HotPartitions, st.ExclusiveMembers, wantHot, wantExcl)
			}
		})
	}
}

// TestPins: a Balance plan honours every pin to a group with members
// (moving the partition there, reason pin), reports pins to a group with
// none as unsatisfied and places them in the default domain, moves
// unpinned partitions off a dedicated group, and lets a shared group take
// unpinned partitions; a Membership plan places pinned orphans in their
// group and keeps pinned partitions where they are.
func TestPins(t *testing.T) {
	const p = 64
	r := newRing(t, p, 0)
	members := []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d1", Group: "dedicated"}, {ID: "d2", Group: "dedicated"}, {ID: "s", Group: "shared"}}
	cost := make([]float32, p)
	for i := range cost {
		cost[i] = 1
	}
	cur := make([]string, p)
	for i := range cur {
		cur[i] = []string{"a", "b", "c", "s"}[i%4]
	}
	cur[3] = "a"  // pinned to the shared group, held outside it
	cur[9] = "d1" // unpinned on a dedicated member: a removed pin
	pin := make([]string, p)
	pin[1], pin[2] = "dedicated", "dedicated"
	pin[3] = "shared"
	pin[5] = "nowhere"
	pin[6] = "dedicated"
	cur[6] = "" // a pinned orphan
	tests := []struct {
		name   string
		kind   Kind
		want   map[int][]string // partition → allowed owners
		reason map[int]Reason
	}{
		{
			name:   "membership",
			kind:   Membership,
			want:   map[int][]string{1: {"b"}, 2: {"c"}, 3: {"a"}, 9: {"d1"}, 6: {"d1", "d2"}},
			reason: map[int]Reason{6: ReasonMembership},
		},
		{
			name:   "balance",
			kind:   Balance,
			want:   map[int][]string{1: {"d1", "d2"}, 2: {"d1", "d2"}, 3: {"s"}, 5: {"a", "b", "c", "s"}, 9: {"a", "b", "c", "s"}, 6: {"d1", "d2"}},
			reason: map[int]Reason{1: ReasonPin, 2: ReasonPin, 3: ReasonPin, 9: ReasonPin, 6: ReasonMembership},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Ring: r, Members: members, Current: cur, Cost: cost, Pin: pin, Kind: tt.kind,
				Params: Params{SharedGroups: []string{"shared"}, MaxCostFraction: 1}}
			out := plan(t, in)
			checkOutput(t, in, out)
			for p, allowed := range tt.want {
				if !slices.Contains(allowed, out.Target[p]) {
					t.Errorf("partition %d (pin %q) on %s, want one of %v", p, pin[p], out.Target[p], allowed)
				}
			}
			for p, why := range tt.reason {
				if out.Reason[p] != why {
					t.Errorf("partition %d reason %q, want %q", p, out.Reason[p], why)
				}
			}
			for i, o := range out.Target {
				if (o == "d1" || o == "d2") && pin[i] != "dedicated" && !(tt.kind == Membership && cur[i] == o) {
					t.Errorf("partition %d (pin %q) on dedicated member %s", i, pin[i], o)
				}
			}
			if len(out.Domains) != 2 || out.Domains[0].Group != "" || out.Domains[1].Group != "dedicated" {
				t.Fatalf("domains %+v, want the default and dedicated", out.Domains)
			}
			if got := out.Domains[0].UnsatisfiedPins; got != 1 {
				t.Errorf("unsatisfied pins %d, want 1", got)
			}
		})
	}
}

// TestBudgetAndCap: budgeted moves never exceed MaxMoves, and their
// objects and cost stay within MaxObjects and MaxCostFraction unless the
// round made a single move; no hot or load move takes its receiver above
// the namespace-share cap unless it held no namespace.
func TestBudgetAndCap(t *testing.T) {
	tests := []struct {
		name    string
		params  Params
		mayStay bool // the cap may forbid every move
	}{
		{name: "moves", params: Params{MaxMoves: 3, MaxNamespaceShare: math.Inf(1)}},
		{name: "objects", params: Params{MaxObjects: 900, MaxNamespaceShare: math.Inf(1)}},
		{name: "cost fraction", params: Params{MaxCostFraction: 0.01, MaxNamespaceShare: math.Inf(1)}},
		{name: "tight cap", params: Params{MaxNamespaceShare: 1}, mayStay: true},
		{name: "defaults", params: Params{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(10) {
				in := skewed(t, 1024, 8, []string{shapeZipf, shapeHot}[seed%2], seed)
				in.Params = tt.params
				prm := in.Params.WithDefaults()
				out, steps := traced(t, in)
				checkOutput(t, in, out)
				n, objs := 0, uint64(0)
				costByDomain := 0.0
				for _, s := range steps {
					switch s.why {
					case ReasonPin, ReasonHot, ReasonLoad:
						n++
						objs += 2 * uint64(in.Objects[s.p])
						costByDomain += s.cost
					default:
						continue
					}
					if s.why != ReasonPin && !s.hot && s.toNS > 0 && float64(s.toNS)+float64(in.Namespaces[s.p]) > s.cap {
						t.Fatalf("%s move of partition %d takes member %d to %d namespaces, cap %.1f", s.why, s.p, s.to, s.toNS+int64(in.Namespaces[s.p]), s.cap)
					}
				}
				total := 0.0
				for _, c := range in.Cost {
					total += float64(c)
				}
				if n > prm.MaxMoves {
					t.Fatalf("%d budgeted moves, max %d", n, prm.MaxMoves)
				}
				if n > 1 && (objs > prm.MaxObjects || costByDomain > prm.MaxCostFraction*total*(1+1e-9)) {
					t.Fatalf("%d moves warm %d objects (max %d) and move cost %.1f (max %.1f)", n, objs, prm.MaxObjects, costByDomain, prm.MaxCostFraction*total)
				}
				if n == 0 && !tt.mayStay {
					t.Fatal("no budgeted move from a member at 6× its share")
				}
			}
		})
	}
}

// TestInputErrors: input Plan cannot plan from is an error, not a panic.
func TestInputErrors(t *testing.T) {
	r := newRing(t, 8, 0)
	tests := []struct {
		name string
		in   Input
	}{
		{name: "no ring", in: Input{Members: plain(2)}},
		{name: "short current", in: Input{Ring: r, Members: plain(2), Current: make([]string, 7)}},
		{name: "long cost", in: Input{Ring: r, Members: plain(2), Cost: make([]float32, 9)}},
		{name: "short cooling", in: Input{Ring: r, Members: plain(2), Cooling: make([]bool, 1)}},
		{name: "NaN cost", in: Input{Ring: r, Members: plain(2), Cost: []float32{0, 0, float32(math.NaN()), 0, 0, 0, 0, 0}}},
		{name: "negative cost", in: Input{Ring: r, Members: plain(2), Cost: []float32{0, -1, 0, 0, 0, 0, 0, 0}}},
		{name: "infinite cost", in: Input{Ring: r, Members: plain(2), Cost: []float32{float32(math.Inf(1)), 0, 0, 0, 0, 0, 0, 0}}},
		{name: "duplicate member", in: Input{Ring: r, Members: []Member{{ID: "a"}, {ID: "a", New: true}}}},
		{name: "empty member ID", in: Input{Ring: r, Members: []Member{{ID: ""}}}},
		{name: "margin too large", in: Input{Ring: r, Members: plain(2), Params: Params{Margin: 1}}},
		{name: "hot factor below one", in: Input{Ring: r, Members: plain(2), Params: Params{HotFactor: 0.5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := Plan(tt.in); err == nil {
				t.Fatalf("Plan = %v, want an error", out.Target)
			}
		})
	}
}

// TestNoMembers: with no member every target is "".
func TestNoMembers(t *testing.T) {
	r := newRing(t, 16, 0)
	cost := make([]float32, 16)
	cost[3] = 5
	out := plan(t, Input{Ring: r, Cost: cost, Current: make([]string, 16), Kind: Balance})
	for p, o := range out.Target {
		if o != "" {
			t.Fatalf("partition %d assigned to %q with no members", p, o)
		}
	}
}

// TestSpreadSmallPartitions: a busiest member whose partitions are each below
// MinGain × F' still sheds them when nothing bigger fits (the simulation's
// finding: a per-move floor left it at 1.5 × F' for good), while a member
// that also holds a partition above the floor moves that one first.
func TestSpreadSmallPartitions(t *testing.T) {
	const P = 512
	tests := []struct {
		name     string
		big      bool // shard-0 also holds one partition of cost 10 (above the floor)
		wantBig  bool // that partition is the first to move
		maxRatio float64
	}{
		{name: "only small partitions on the busiest", maxRatio: 1.05},
		{name: "one partition above the floor moves first", big: true, wantBig: true, maxRatio: 1.05},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, P, 0)
			in := Input{Ring: r, Members: plain(4), Kind: Balance, Cost: make([]float32, P), Namespaces: make([]uint32, P),
				Current: make([]string, P), Params: Params{MaxMoves: 1000, MaxCostFraction: 1}} // budgets out of the way
			// shard-0 holds 200 partitions of cost 0.5 (100 in all); the others 104
			// each of cost 0.5 (52 each). F = 256/4 = 64; the floor is 1.28.
			for p := range P {
				in.Cost[p], in.Namespaces[p] = 0.5, 1
				switch {
				case p < 200:
					in.Current[p] = "shard-0"
				default:
					in.Current[p] = fmt.Sprintf("shard-%d", 1+(p-200)%3)
				}
			}
			if tt.big {
				in.Cost[0] = 10
			}
			out, steps := traced(t, in)
			checkOutput(t, in, out)
			load := map[string]float64{}
			total := 0.0
			for p, o := range out.Target {
				load[o] += float64(in.Cost[p])
				total += float64(in.Cost[p])
			}
			F := total / 4
			if got := load["shard-0"] / F; got > tt.maxRatio {
				t.Errorf("busiest at %.3f × F after the round, want ≤ %.2f (loads %v)", got, tt.maxRatio, load)
			}
			if tt.wantBig && (len(steps) == 0 || steps[0].p != 0) {
				t.Errorf("first move %+v, want partition 0 (cost 10)", steps[:min(1, len(steps))])
			}
		})
	}
}

// TestHotHysteresis: a partition alone on its owner stays hot (its owner
// exclusive, taking no spread move) while its cost is above (1 − 2δ) × F, so a
// load hovering just below F is not spread onto again; one not isolated is hot
// only above F. 4 members: the hot partition's owner, one member 11 % above F
// (a spread round) and two members just above the hot owner.
func TestHotHysteresis(t *testing.T) {
	tests := []struct {
		name     string
		share    float64 // the hot partition's cost as a share of F
		alone    bool    // it is alone on its owner at the start
		wantHot  bool
		wantOnto bool // a spread move lands on the hot partition's owner
	}{
		{name: "alone at 0.95 F stays hot", share: 0.95, alone: true, wantHot: true},
		{name: "alone at 0.85 F stays hot", share: 0.85, alone: true, wantHot: true},
		{name: "alone at 0.75 F is no longer hot", share: 0.75, alone: true, wantOnto: true},
		{name: "not alone at 0.95 F is hot: it carries the fair share within the margin", share: 0.95, wantHot: true},
		{name: "not alone at 0.85 F is not hot", share: 0.85},
		{name: "not alone above F is hot", share: 1.2, wantHot: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const small = 63 // unit partitions beside the hot one
			r := newRing(t, small+1, 0)
			ms := plain(4)
			cost := make([]float32, small+1)
			ns := make([]uint32, small+1)
			objs := make([]uint32, small+1)
			for i := range cost {
				cost[i], ns[i], objs[i] = 1, 1, 10
			}
			// c = share × F = share × (small + c) / 4.
			c := tt.share * small / (4 - tt.share)
			hot := 0
			cost[hot] = float32(c)
			// Owners: the hot partition on shard-0, with n0 unit partitions unless
			// alone; then 23 on shard-1 (busiest) and the rest split on shards 2, 3.
			cur := make([]string, small+1)
			cur[hot] = ms[0].ID
			n0 := 0
			if !tt.alone {
				n0 = 3
			}
			i := 1
			put := func(m string, n int) {
				for range n {
					cur[i] = m
					i++
				}
			}
			put(ms[0].ID, n0)
			put(ms[1].ID, 23)
			rest := small - n0 - 23
			put(ms[2].ID, rest/2)
			put(ms[3].ID, rest-rest/2)
			in := Input{Ring: r, Members: ms, Cost: cost, Namespaces: ns, Objects: objs, Current: cur, Kind: Balance,
				Params: Params{MaxMoves: 64, MaxObjects: math.MaxUint32, MaxCostFraction: 1}}
			out := plan(t, in)
			checkOutput(t, in, out)
			if got := out.Domains[0].Hot == 1; got != tt.wantHot {
				t.Fatalf("hot %d, want hot %v (cost %.2f, F %.2f)", out.Domains[0].Hot, tt.wantHot, c, out.Domains[0].Fair)
			}
			onto := false
			for p, o := range out.Target {
				if o == ms[0].ID && cur[p] != ms[0].ID {
					onto = true
				}
			}
			if tt.alone && onto != tt.wantOnto {
				t.Fatalf("a spread move onto the hot partition's owner: %v, want %v (targets %v)", onto, tt.wantOnto, out.Target)
			}
		})
	}
}

// TestHotWithMembersToSpare covers the hysteresis where members outnumber the partitions
// with namespaces: every such partition is alone on its owner, so one above (1 − 2δ) × F
// is hot and its owner exclusive. That must change nothing: no partition with namespaces
// moves, and nothing moves for load or hot.
func TestHotWithMembersToSpare(t *testing.T) {
	tests := []struct {
		name    string
		members int
		costs   []float32 // of the partitions with namespaces, each alone on member i (above MinLoad, so the spread runs)
		wantHot int
	}{
		{name: "four at the fair share on six members", members: 6, costs: []float32{15, 15, 15, 15}, wantHot: 4},
		{name: "one between (1 − 2δ) and (1 − δ) of F, alone, hot by the hysteresis", members: 5, costs: []float32{8.5, 10, 10.5, 21}, wantHot: 4},
		{name: "small ones below the hysteresis are not hot", members: 6, costs: []float32{5, 5, 40, 10}, wantHot: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ms, cost, ns, objs, cur := roundRobin(t, 32, tt.members)
			// Partition i (i < len(costs)) sits on member i; with parts a multiple of
			// neither member count, member i also holds empty partitions.
			for i, c := range tt.costs {
				cost[i], ns[i], objs[i] = c, 1, 10
			}
			in := Input{Ring: r, Members: ms, Cost: cost, Namespaces: ns, Objects: objs, Current: cur, Kind: Balance,
				Params: Params{MaxMoves: 64, MaxObjects: math.MaxUint32, MaxCostFraction: 1}}
			out := plan(t, in)
			checkOutput(t, in, out)
			if got := out.Domains[0].Hot; got != tt.wantHot {
				t.Errorf("hot %d, want %d (F %.3f)", got, tt.wantHot, out.Domains[0].Fair)
			}
			for p, o := range out.Target {
				if ns[p] > 0 && o != cur[p] {
					t.Errorf("partition %d with namespaces moved %s → %s (%s)", p, cur[p], o, out.Reason[p])
				}
				if rs := out.Reason[p]; rs == ReasonLoad || rs == ReasonHot {
					t.Errorf("partition %d moved for %s", p, rs)
				}
			}
		})
	}
}

// TestHotAsManyAsMembers: above (1 − δ)·F there can be as many hot partitions as
// members (N tenants carrying about 1/N of the work each). Stacked on one member they
// must end on members of their own, round after round as the budget allows (found in
// review: with one member kept for the rest, two tenants of 0.92·F stayed together on
// one of two members, 1.84·F against 0.16·F, for good).
func TestHotAsManyAsMembers(t *testing.T) {
	tests := []struct {
		name    string
		members int
		hot     []float32 // costs of the hot partitions, all on member 0 at the start
		small   int       // unit partitions with namespaces, split over the members
	}{
		{name: "two tenants of 0.92 F on two members", members: 2, hot: []float32{46, 46}, small: 8},
		{name: "three tenants of 0.93 F on three members", members: 3, hot: []float32{93, 93, 93}, small: 21},
		{name: "one tenant above F and two near it on three members", members: 3, hot: []float32{110, 95, 95}, small: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ms, cost, ns, objs, cur := roundRobin(t, len(tt.hot)+tt.small+8, tt.members) // and some empty ones
			for i, c := range tt.hot {
				cost[i], ns[i], objs[i], cur[i] = c, 1, 100, ms[0].ID
			}
			for i := len(tt.hot); i < len(tt.hot)+tt.small; i++ {
				cost[i], ns[i], objs[i] = 1, 1, 10
			}
			in := Input{Ring: r, Members: ms, Cost: cost, Namespaces: ns, Objects: objs, Current: cur, Kind: Balance}
			var out Output
			for round := range 5 {
				out = plan(t, in)
				checkOutput(t, in, out)
				if slices.Equal(out.Target, in.Current) {
					break
				}
				if round == 4 {
					t.Fatalf("still moving after 5 rounds: %v", out.Reason)
				}
				in.Current = out.Target
			}
			if got := out.Domains[0].Hot; got != len(tt.hot) {
				t.Fatalf("hot %d, want %d (F %.2f)", got, len(tt.hot), out.Domains[0].Fair)
			}
			holders := map[string]int{}
			for i := range tt.hot {
				holders[in.Current[i]]++
			}
			if len(holders) != len(tt.hot) {
				t.Errorf("hot partitions by member %v: want each on a member of its own", holders)
			}
		})
	}
}

// TestSaturatedMember: a saturated member's partitions count SaturationFactor ×
// their cost, so that a member that measures about the fair share while it cannot
// keep up sheds load, and a partition that measures below the hot threshold there
// (its events folded, its requests capped) is isolated; no load or hot move goes to
// a saturated member. Without saturation the same input moves nothing.
func TestSaturatedMember(t *testing.T) {
	const parts, members = 64, 4
	tests := []struct {
		name      string
		hot       float32 // cost of partition 0, on member 0; the others cost 1
		saturated []int   // members saturated
		factor    float64 // Params.SaturationFactor (0: the default)
		light     bool    // member 1 holds 4 partitions, member 0 the other 12 of its 16 too
		wantHot   int
		wantMoves bool // partitions leave member 0
	}{
		{name: "none saturated: balanced, nothing moves", hot: 1, wantMoves: false},
		{name: "saturated at the fair share sheds load", hot: 1, saturated: []int{0}, wantMoves: true},
		{name: "two saturated shed to the others only", hot: 1, saturated: []int{0, 1}, wantMoves: true},
		{name: "the factor off: nothing moves", hot: 1, saturated: []int{0}, factor: 1, wantMoves: false},
		{name: "the least-loaded member saturated gets nothing", hot: 1, light: true, saturated: []int{1}, wantMoves: true},
		// 0.77 F as measured (about what the skewed benchmark's hot namespace showed
		// on its saturated shard), its member at 1.03 F: within the dead band.
		{name: "0.77 F, not saturated: not hot", hot: 15, wantHot: 0},
		{name: "0.77 F on a saturated member: hot, isolated", hot: 15, saturated: []int{0}, wantHot: 1, wantMoves: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ms, cost, ns, objs, cur := roundRobin(t, parts, members)
			for p := range cost {
				cost[p], ns[p], objs[p] = 1, 1, 10
			}
			if tt.hot > 1 {
				// Member 0 holds the hot partition 0 and partitions 1–5; the
				// others share the rest: 20 against 19.33 each.
				cost[0] = tt.hot
				for p := range cur {
					if p <= 5 {
						cur[p] = ms[0].ID
					} else {
						cur[p] = ms[1+p%(members-1)].ID
					}
				}
			}
			if tt.light {
				kept := 0
				for p, o := range cur {
					if o == ms[1].ID {
						if kept++; kept > 4 {
							cur[p] = ms[0].ID
						}
					}
				}
			}
			for _, m := range tt.saturated {
				ms[m].Saturated = true
			}
			in := Input{Ring: r, Members: ms, Cost: cost, Namespaces: ns, Objects: objs, Current: cur, Kind: Balance,
				Params: Params{MaxMoves: 1000, MaxCostFraction: 1, SaturationFactor: tt.factor}} // budgets out of the way
			var total float64
			for _, l := range loadsOf(cur, cost) {
				total += l
			}
			out, steps := traced(t, in)
			checkOutput(t, in, out)
			if got := out.Domains[0].Hot; got != tt.wantHot {
				t.Fatalf("hot partitions %d, want %d (partition 0 measures %.2f F)", got, tt.wantHot, float64(tt.hot)/(total/members))
			}
			left := false
			for _, s := range steps {
				if s.why == ReasonNone || s.why == ReasonMembership {
					continue // where the plan keeps partitions first
				}
				if s.toMember.Saturated {
					t.Fatalf("partition %d moved for %v to saturated member %d", s.p, s.why, s.to)
				}
				left = left || in.Current[s.p] == ms[0].ID
			}
			if left != tt.wantMoves {
				t.Fatalf("partitions left member 0: %v, want %v (%d moves)", left, tt.wantMoves, len(steps))
			}
			if tt.wantHot > 0 {
				for p, o := range out.Target {
					if o == ms[0].ID && p != 0 && ns[p] > 0 {
						t.Fatalf("partition %d still shares member 0 with the hot partition", p)
					}
				}
			}
		})
	}
}

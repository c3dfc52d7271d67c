package balance

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// randomCurrent returns owners drawn from the first n+2 member names (two
// of them non-members) or nobody.
func randomCurrent(rng *rand.Rand, p, n int) []string {
	cur := make([]string, p)
	for i := range cur {
		if k := rng.IntN(n + 3); k < n+2 {
			cur[i] = fmt.Sprintf("shard-%d", k)
		}
	}
	return cur
}

// TestZeroCostIsAssignFrom: with no cost anywhere (no namespace data, no
// reports), every plan kind gives exactly ring.AssignFrom's target, from
// any current owners: the count placement and its benchmarks stay as they
// are.
func TestZeroCostIsAssignFrom(t *testing.T) {
	tests := []struct {
		name     string
		p, n, rf int
		zeros    bool // a slice of zeros rather than nil
	}{
		{name: "sim shape", p: 48, n: 7, rf: 20},
		{name: "more members than partitions", p: 10, n: 13, rf: 20, zeros: true},
		{name: "one member", p: 64, n: 1},
		{name: "4096 by 100", p: 4096, n: 100, zeros: true},
		{name: "4096 by 1000", p: 4096, n: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.p, tt.rf)
			rng := rand.New(rand.NewPCG(uint64(tt.p), uint64(tt.n)))
			var cost []float32
			if tt.zeros {
				cost = make([]float32, tt.p)
			}
			for _, cur := range [][]string{nil, randomCurrent(rng, tt.p, tt.n)} {
				want, err := r.AssignFrom(ids(tt.n), cur)
				if err != nil {
					t.Fatal(err)
				}
				for _, kind := range []Kind{Membership, Balance} {
					members := plain(tt.n)
					members[0].New = true
					in := Input{Ring: r, Members: members, Current: cur, Cost: cost, Kind: kind}
					out := plan(t, in)
					checkOutput(t, in, out)
					if !slices.Equal(out.Target, want) {
						t.Fatalf("%s plan differs from AssignFrom at %d partitions", kind, len(moved(want, out.Target)))
					}
				}
			}
		})
	}
}

// countsWithin fails unless every member owns floor(P/N) or ceil(P/N).
func countsWithin(t *testing.T, what string, members []string, target []string) {
	t.Helper()
	count := map[string]int{}
	for _, o := range target {
		count[o]++
	}
	lo := len(target) / len(members)
	hi := lo
	if len(target)%len(members) != 0 {
		hi++
	}
	for _, m := range members {
		if c := count[m]; c < lo || c > hi {
			t.Fatalf("%s: %s owns %d, want %d..%d", what, m, c, lo, hi)
		}
	}
}

// TestEqualCostsFloorCeil: when every partition costs the same, cost
// placement is count placement: from nothing, after joins and after
// leaves, every member owns floor(P/N) or ceil(P/N).
func TestEqualCostsFloorCeil(t *testing.T) {
	tests := []struct {
		name string
		p, n int
	}{
		{name: "small P over N", p: 10, n: 5},
		{name: "sim shape", p: 48, n: 7},
		{name: "P just above N", p: 23, n: 5},
		{name: "4096 by 4", p: 4096, n: 4},
		{name: "4096 by 100", p: 4096, n: 100},
		{name: "4096 by 1000", p: 4096, n: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.p, 0)
			cost := make([]float32, tt.p)
			for i := range cost {
				cost[i] = 2.5
			}
			rng := rand.New(rand.NewPCG(uint64(tt.p), 3))
			members := plain(tt.n)
			for i := range members {
				members[i].New = true // a first start: everybody holds nothing
			}
			out := plan(t, Input{Ring: r, Members: members, Cost: cost})
			countsWithin(t, "first start", memberIDs(members), out.Target)
			cur := out.Target
			members = plain(tt.n)
			for i := range 6 {
				joiner := Member{ID: fmt.Sprintf("joiner-%d", i), New: true}
				in := Input{Ring: r, Members: append(slices.Clone(members), joiner), Current: cur, Cost: cost}
				out = plan(t, in)
				checkOutput(t, in, out)
				members = append(members, Member{ID: joiner.ID})
				countsWithin(t, "join of "+joiner.ID, memberIDs(members), out.Target)
				cur = out.Target

				k := rng.IntN(len(members))
				leaver := members[k].ID
				members = slices.Delete(members, k, k+1)
				in = Input{Ring: r, Members: members, Current: cur, Cost: cost}
				out = plan(t, in)
				checkOutput(t, in, out)
				countsWithin(t, "leave of "+leaver, memberIDs(members), out.Target)
				cur = out.Target
			}
		})
	}
}

// TestJoinAndLeave: from a converged plan, a join moves only to the new
// member, at most F + c_max/2 of cost (F the new fair share), and a leave
// moves exactly the leaver's partitions, for every cost shape.
func TestJoinAndLeave(t *testing.T) {
	tests := []struct {
		name  string
		p, n  int
		shape string
	}{
		{name: "uniform 4096 by 4", p: 4096, n: 4, shape: shapeUniform},
		{name: "zipf 4096 by 4", p: 4096, n: 4, shape: shapeZipf},
		{name: "zipf 4096 by 100", p: 4096, n: 100, shape: shapeZipf},
		{name: "sparse 4096 by 100", p: 4096, n: 100, shape: shapeSparse},
		{name: "hot 512 by 16", p: 512, n: 16, shape: shapeHot},
		{name: "zipf 48 by 7", p: 48, n: 7, shape: shapeZipf},
		{name: "sparse 64 by 70", p: 64, n: 70, shape: shapeSparse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.p, 0)
			rng := rand.New(rand.NewPCG(uint64(tt.p), uint64(tt.n)))
			cost, objs, ns := costs(rng, tt.shape, tt.p)
			total, cmax := 0.0, 0.0
			for _, c := range cost {
				total += float64(c)
				cmax = max(cmax, float64(c))
			}
			members := plain(tt.n)
			cur := plan(t, Input{Ring: r, Members: members, Cost: cost, Objects: objs, Namespaces: ns}).Target
			for i := range 5 {
				joiner := fmt.Sprintf("joiner-%d", i)
				in := Input{Ring: r, Members: append(slices.Clone(members), Member{ID: joiner, New: true}),
					Current: cur, Cost: cost, Objects: objs, Namespaces: ns}
				out := plan(t, in)
				checkOutput(t, in, out)
				movedCost := 0.0
				for _, p := range moved(cur, out.Target) {
					if out.Target[p] != joiner {
						t.Fatalf("join of %s moved partition %d from %s to %s", joiner, p, cur[p], out.Target[p])
					}
					if out.Reason[p] != ReasonMembership {
						t.Fatalf("join moved partition %d with reason %q", p, out.Reason[p])
					}
					movedCost += float64(cost[p])
				}
				members = append(members, Member{ID: joiner})
				if F := total / float64(len(members)); movedCost > F+cmax/2+1e-6 {
					t.Fatalf("join of %s moved cost %.2f > F + c_max/2 = %.2f + %.2f", joiner, movedCost, F, cmax/2)
				}
				cur = out.Target

				k := rng.IntN(len(members))
				leaver := members[k].ID
				members = slices.Delete(members, k, k+1)
				in = Input{Ring: r, Members: members, Current: cur, Cost: cost, Objects: objs, Namespaces: ns}
				out = plan(t, in)
				checkOutput(t, in, out)
				for p := range out.Target {
					if (out.Target[p] != cur[p]) != (cur[p] == leaver) {
						t.Fatalf("leave of %s: partition %d %s → %s", leaver, p, cur[p], out.Target[p])
					}
				}
				cur = out.Target
			}
		})
	}
}

// randomInput draws an input: members (some new, suspect, in a dedicated
// or shared group), current owners (some non-members), costs of a random
// shape, some pins (some to a group with no member) and cooling partitions.
func randomInput(rng *rand.Rand, p, n int, kind Kind) Input {
	members := plain(n)
	for i := range members {
		switch rng.IntN(8) {
		case 0:
			members[i].New = true
		case 1:
			members[i].Suspect = true
		case 2:
			members[i].Group = "hot" // dedicated
		case 3:
			members[i].Group = "big" // shared
		}
	}
	shape := []string{shapeUniform, shapeZipf, shapeHot, shapeSparse}[rng.IntN(4)]
	cost, objs, ns := costs(rng, shape, p)
	pin := make([]string, p)
	cooling := make([]bool, p)
	for i := range p {
		switch rng.IntN(40) {
		case 0:
			pin[i] = "hot"
		case 1:
			pin[i] = "big"
		case 2:
			pin[i] = "gone"
		}
		cooling[i] = rng.IntN(10) == 0
	}
	return Input{
		Members: members, Current: randomCurrent(rng, p, n),
		Cost: cost, Objects: objs, Namespaces: ns, Pin: pin, Cooling: cooling,
		Kind: kind, Params: Params{SharedGroups: []string{"big"}, MaxMoves: 1 + rng.IntN(100)},
	}
}

// TestDeterministic: the plan does not depend on the order of members, and
// the same input gives the same output.
func TestDeterministic(t *testing.T) {
	tests := []struct {
		name string
		p, n int
		kind Kind
	}{
		{name: "membership 48 by 7", p: 48, n: 7, kind: Membership},
		{name: "balance 48 by 7", p: 48, n: 7, kind: Balance},
		{name: "membership 1024 by 40", p: 1024, n: 40, kind: Membership},
		{name: "balance 1024 by 40", p: 1024, n: 40, kind: Balance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.p, 0)
			rng := rand.New(rand.NewPCG(uint64(tt.p), uint64(tt.kind)))
			for range 20 {
				in := randomInput(rng, tt.p, tt.n, tt.kind)
				in.Ring = r
				out := plan(t, in)
				checkOutput(t, in, out)
				shuffled := in
				shuffled.Members = slices.Clone(in.Members)
				rng.Shuffle(len(shuffled.Members), func(i, j int) {
					shuffled.Members[i], shuffled.Members[j] = shuffled.Members[j], shuffled.Members[i]
				})
				if again := plan(t, shuffled); !reflect.DeepEqual(out, again) {
					t.Fatalf("the plan depends on member order: %d targets differ", len(moved(out.Target, again.Target)))
				}
			}
		})
	}
}

// TestFixedPoint: a Membership plan of a plan's own target, with nobody
// new, moves nothing (a new leader adopting the shards' owners moves
// nothing), whatever the first plan's kind.
func TestFixedPoint(t *testing.T) {
	tests := []struct {
		name string
		p, n int
		kind Kind
	}{
		{name: "after membership, 48 by 7", p: 48, n: 7, kind: Membership},
		{name: "after balance, 48 by 7", p: 48, n: 7, kind: Balance},
		{name: "after membership, 4096 by 100", p: 4096, n: 100, kind: Membership},
		{name: "after balance, 4096 by 100", p: 4096, n: 100, kind: Balance},
		{name: "more members than partitions", p: 16, n: 30, kind: Balance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.p, 0)
			rng := rand.New(rand.NewPCG(uint64(tt.n), 7))
			for range 10 {
				in := randomInput(rng, tt.p, tt.n, tt.kind)
				in.Ring = r
				first := plan(t, in)
				again := in
				again.Kind = Membership
				again.Current = first.Target
				again.Members = slices.Clone(in.Members)
				for i := range again.Members {
					again.Members[i].New = false
				}
				out := plan(t, again)
				if m := moved(first.Target, out.Target); len(m) > 0 {
					p := m[0]
					t.Fatalf("plan of its own target moved %d partitions, e.g. %d %s → %s (%s)", len(m), p, first.Target[p], out.Target[p], out.Reason[p])
				}
			}
		})
	}
}

// TestNewMemberPulls: a new member pulls only when it starts below
// F·(1−δ/2), and then up to F (within c/2); a member that is not new pulls
// nothing that has an owner.
func TestNewMemberPulls(t *testing.T) {
	const p = 300 // cost 0.1 each: F = 10 at 3 members
	tests := []struct {
		name  string
		holds int // partitions the member "n" holds
		isNew bool
		want  int // partitions that move to it
	}{
		{name: "new, below the threshold", holds: 90, isNew: true, want: 10},
		{name: "new, empty", holds: 0, isNew: true, want: 100},
		{name: "new, within δ/2 of F", holds: 97, isNew: true, want: 0},
		{name: "not new, below F", holds: 90, isNew: false, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost := make([]float32, p)
			cur := make([]string, p)
			for i := range p {
				cost[i] = 0.1
				cur[i] = []string{"a", "b"}[i%2]
				if i < tt.holds {
					cur[i] = "n"
				}
			}
			in := Input{Ring: newRing(t, p, 0), Members: []Member{{ID: "a"}, {ID: "b"}, {ID: "n", New: tt.isNew}}, Current: cur, Cost: cost}
			out := plan(t, in)
			checkOutput(t, in, out)
			got := 0
			for _, i := range moved(cur, out.Target) {
				if out.Target[i] != "n" {
					t.Fatalf("partition %d moved %s → %s", i, cur[i], out.Target[i])
				}
				got++
			}
			if got != tt.want {
				t.Fatalf("%d partitions moved to n, want %d", got, tt.want)
			}
		})
	}
}

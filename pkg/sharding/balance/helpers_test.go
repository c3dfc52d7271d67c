package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/ring"
)

// newRing returns a ring of p partitions with the default replication
// factor, or rf when not 0.
func newRing(t testing.TB, p, rf int) *ring.Ring {
	t.Helper()
	r, err := ring.New(ring.Config{PartitionCount: p, ReplicationFactor: rf})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ids returns n member IDs.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("shard-%d", i)
	}
	return out
}

// plain returns n members, none new, suspect or grouped.
func plain(n int) []Member {
	out := make([]Member, n)
	for i, id := range ids(n) {
		out[i] = Member{ID: id}
	}
	return out
}

// roundRobin returns a ring of parts partitions and n plain members, with every
// partition on member p mod n and no cost, namespace or object yet: a fixture for tests
// that then place and weigh the partitions they are about.
func roundRobin(t testing.TB, parts, n int) (r *ring.Ring, ms []Member, cost []float32, ns, objs []uint32, cur []string) {
	t.Helper()
	r, ms = newRing(t, parts, 0), plain(n)
	cost, ns, objs, cur = make([]float32, parts), make([]uint32, parts), make([]uint32, parts), make([]string, parts)
	for p := range cur {
		cur[p] = ms[p%n].ID
	}
	return r, ms, cost, ns, objs, cur
}

// memberIDs returns the IDs of ms.
func memberIDs(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// Cost shapes for the tests and the benchmark.
const (
	shapeUniform = "uniform"
	shapeZipf    = "zipf"
	shapeHot     = "hot"
	shapeSparse  = "sparse" // most partitions empty, the rest Zipf
)

// costs returns p costs of a shape, with namespaces and objects to match:
// uniform gives every partition cost 1 and 1 namespace; zipf draws loads
// with exponent 1.1 over a shuffled rank; hot is uniform plus one partition
// carrying a quarter of the total; sparse leaves three quarters empty.
func costs(rng *rand.Rand, shape string, p int) (cost []float32, objs, ns []uint32) {
	cost = make([]float32, p)
	objs = make([]uint32, p)
	ns = make([]uint32, p)
	rank := rng.Perm(p)
	for i := range p {
		switch shape {
		case shapeUniform, shapeHot:
			cost[i] = 1
		case shapeZipf:
			cost[i] = float32(100 / math.Pow(float64(rank[i]+1), 1.1))
		case shapeSparse:
			if rng.IntN(4) == 0 {
				cost[i] = float32(100 / math.Pow(float64(rank[i]+1), 1.1))
			}
		}
		if cost[i] > 0 {
			ns[i] = uint32(1 + rng.IntN(4))
			objs[i] = uint32(10 + rng.IntN(200))
		}
	}
	if shape == shapeHot {
		cost[rng.IntN(p)] = float32(p) / 3 // a quarter of the new total
	}
	return cost, objs, ns
}

// plan calls Plan and fails the test on an error.
func plan(t testing.TB, in Input) Output {
	t.Helper()
	out, err := Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// traced runs a plan and returns its output and the assignments it made,
// with the member loads before each.
func traced(t testing.TB, in Input) (Output, []step) {
	t.Helper()
	pl, err := newPlanner(in)
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	pl.trace = func(p int32, from, to int, why Reason) {
		s := step{p: p, from: from, to: to, why: why, cost: pl.cost[p], toNS: -1}
		if from >= 0 {
			s.fromLoad = pl.load[from]
		}
		s.toLoad = pl.load[to]
		s.toNS = pl.nsm[to]
		s.cap = pl.doms[pl.mdom[to]].cap
		s.toExclusive = pl.exclusive != nil && pl.exclusive[to]
		s.hot = pl.isHot(p)
		s.toMember = pl.mem[to]
		steps = append(steps, s)
	}
	return pl.run(), steps
}

// step is one traced assignment: partition p from member from (-1: none)
// to member to, with loads and the receiver's namespaces before it.
type step struct {
	p                int32
	from, to         int
	why              Reason
	cost             float64
	fromLoad, toLoad float64
	toNS             int64
	cap              float64
	toExclusive      bool
	hot              bool   // p itself is hot
	toMember         Member // the receiver
}

// checkOutput fails unless out is a well-formed plan of in: one target per
// partition, every one a member (when there are members) allowed to hold
// it or holding it already, reasons exactly where the target differs
// from the current owner, and no load or hot move to a suspect or saturated
// member.
func checkOutput(t testing.TB, in Input, out Output) {
	t.Helper()
	p := in.Ring.Config().PartitionCount
	if len(out.Target) != p || len(out.Reason) != p {
		t.Fatalf("output has %d targets and %d reasons for %d partitions", len(out.Target), len(out.Reason), p)
	}
	names := memberIDs(in.Members)
	for i, o := range out.Target {
		if len(names) == 0 {
			if o != "" {
				t.Fatalf("partition %d assigned to %q with no members", i, o)
			}
			continue
		}
		if !slices.Contains(names, o) {
			t.Fatalf("partition %d assigned to %q, not a member", i, o)
		}
		cur := ""
		if in.Current != nil {
			cur = in.Current[i]
		}
		if (out.Reason[i] == ReasonNone) != (o == cur) {
			t.Fatalf("partition %d: %q → %q with reason %q", i, cur, o, out.Reason[i])
		}
		if r := out.Reason[i]; r == ReasonLoad || r == ReasonHot {
			if m := in.Members[slices.Index(names, o)]; m.Suspect || m.Saturated {
				t.Fatalf("partition %d moved for %q to %+v: no load or hot move goes to a suspect or saturated member", i, r, m)
			}
		}
	}
}

// moved returns the partitions whose target differs from current.
func moved(current, target []string) []int {
	var out []int
	for p := range target {
		c := ""
		if current != nil {
			c = current[p]
		}
		if c != target[p] {
			out = append(out, p)
		}
	}
	return out
}

// loadsOf sums cost per owner.
func loadsOf(target []string, cost []float32) map[string]float64 {
	out := map[string]float64{}
	for p, o := range target {
		if cost != nil {
			out[o] += float64(cost[p])
		}
	}
	return out
}

// phi is Σ cost(m)² over the members.
func phi(target []string, cost []float32) float64 {
	s := 0.0
	for _, l := range loadsOf(target, cost) {
		s += l * l
	}
	return s
}

// mostPartitions returns the owner of the most cost-bearing partitions in
// target, ties to the first name: the member a skewed load is put on (the
// member of a hot partition may hold nothing else).
func mostPartitions(target []string, cost []float32) string {
	count := map[string]int{}
	for p, o := range target {
		if cost[p] > 0 {
			count[o]++
		}
	}
	best := ""
	for o, c := range count {
		if best == "" || c > count[best] || (c == count[best] && o < best) {
			best = o
		}
	}
	return best
}

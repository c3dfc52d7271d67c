package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/buraksezer/consistent"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{PartitionCount: 4096}.WithDefaults()},
		{name: "zero partitions", cfg: Config{ReplicationFactor: 1, Load: 1}, wantErr: "partition count"},
		{name: "too many partitions", cfg: Config{PartitionCount: partition.MaxCount + 1, ReplicationFactor: 1, Load: 1}, wantErr: "partition count"},
		{name: "zero replication without defaults", cfg: Config{PartitionCount: 1, Load: 1}, wantErr: "replication factor"},
		{name: "huge replication", cfg: Config{PartitionCount: 1, ReplicationFactor: MaxReplicationFactor + 1, Load: 1}, wantErr: "replication factor"},
		{name: "load below one", cfg: Config{PartitionCount: 16, ReplicationFactor: 1, Load: 0.9}, wantErr: "load"},
		{name: "negative load", cfg: Config{PartitionCount: 16, ReplicationFactor: 1, Load: -1}, wantErr: "load"},
		{name: "NaN load", cfg: Config{PartitionCount: 16, ReplicationFactor: 1, Load: math.NaN()}, wantErr: "load"},
		{name: "infinite load", cfg: Config{PartitionCount: 16, ReplicationFactor: 1, Load: math.Inf(1)}, wantErr: "load"},
		{name: "load exactly one", cfg: Config{PartitionCount: 16, ReplicationFactor: 1, Load: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// checkQuotas fails unless every member of members owns floor(P/N) or
// ceil(P/N) of owners (N: distinct members) and nobody else owns any.
func checkQuotas(t *testing.T, members, owners []string) {
	t.Helper()
	names := slices.Compact(slices.Sorted(slices.Values(members)))
	count := map[string]int{}
	for p, o := range owners {
		if !slices.Contains(names, o) {
			t.Fatalf("partition %d owned by %q, not a member", p, o)
		}
		count[o]++
	}
	lo := len(owners) / len(names)
	hi := lo
	if len(owners)%len(names) != 0 {
		hi++
	}
	atHi := 0
	for _, n := range names {
		c := count[n]
		if c < lo || c > hi {
			t.Fatalf("%s owns %d partitions, want %d or %d", n, c, lo, hi)
		}
		if c == hi && hi > lo {
			atHi++
		}
	}
	if want := len(owners) % len(names); atHi != want {
		t.Fatalf("%d members own %d, want %d", atHi, hi, want)
	}
}

// TestEveryMemberCount sweeps small shapes, more members than partitions
// included: every member gets floor(P/N) or ceil(P/N), from nothing and
// from a random current assignment that includes non-members.
func TestEveryMemberCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range []int{1, 2, 3, 7, 16, 61} {
		for _, rf := range []int{1, 10} {
			r, err := New(Config{PartitionCount: p, ReplicationFactor: rf})
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= p+3; n++ {
				members := names(n)
				got, err := r.AssignSlice(members)
				if err != nil {
					t.Fatalf("p=%d n=%d: %v", p, n, err)
				}
				checkQuotas(t, members, got)
				current := make([]string, p)
				for i := range current {
					current[i] = fmt.Sprintf("kshard-shard-%d", rng.IntN(n+2)) // some are not members
				}
				got, err = r.AssignFrom(members, current)
				if err != nil {
					t.Fatalf("p=%d n=%d: %v", p, n, err)
				}
				checkQuotas(t, members, got)
			}
		}
	}
}

// TestAssignFromProperties checks, from random current assignments, what
// the coordinator relies on: the result is a fixed point (a converged
// cluster's target is itself, so a new leader that adopts the owners the
// shards report moves nothing), it does not depend on member order, every
// member is within quota, and an owner keeps every partition it may keep.
func TestAssignFromProperties(t *testing.T) {
	tests := []struct {
		name     string
		p, n, rf int
	}{
		{name: "sim shape", p: 48, n: 7, rf: 20},
		{name: "more members than partitions", p: 10, n: 13, rf: 20},
		{name: "defaults, 64 members", p: 4096, n: 64, rf: DefaultReplicationFactor},
		{name: "defaults, 1000 members", p: 4096, n: 1000, rf: DefaultReplicationFactor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{PartitionCount: tt.p, ReplicationFactor: tt.rf})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(tt.p), uint64(tt.n)))
			members := names(tt.n)
			for range 5 {
				current := make([]string, tt.p)
				for i := range current {
					if k := rng.IntN(tt.n + 3); k < tt.n+2 { // some non-members, some unowned
						current[i] = fmt.Sprintf("kshard-shard-%d", k)
					}
				}
				got, err := r.AssignFrom(members, current)
				if err != nil {
					t.Fatal(err)
				}
				checkQuotas(t, members, got)
				again, err := r.AssignFrom(members, got)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, again) {
					t.Fatal("AssignFrom is not a fixed point: the target of a converged cluster moves partitions")
				}
				shuffled := slices.Clone(members)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if other, _ := r.AssignFrom(append(shuffled, shuffled[0]), current); !slices.Equal(got, other) {
					t.Fatal("AssignFrom depends on member order or duplicates")
				}
				// An owner that is a member and holds no more than floor(P/N)
				// is within any quota: it keeps everything.
				held := map[string]int{}
				for _, o := range current {
					held[o]++
				}
				for i, o := range current {
					if slices.Contains(members, o) && held[o] <= tt.p/tt.n && got[i] != o {
						t.Fatalf("partition %d moved from %s, which holds %d ≤ floor(P/N)", i, o, held[o])
					}
				}
			}
		})
	}
}

// TestJoinAndLeave measures what membership changes move, from a converged
// cluster: a join moves exactly the new member's quota, each partition to
// the new member; a leave moves exactly the leaver's partitions.
func TestJoinAndLeave(t *testing.T) {
	tests := []struct {
		name string
		p, n int
	}{
		{name: "4 members", p: 4096, n: 4},
		{name: "100 members", p: 4096, n: 100},
		{name: "1000 members", p: 4096, n: 1000},
		{name: "more members than partitions", p: 61, n: 70},
		{name: "sim shape", p: 8, n: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{PartitionCount: tt.p})
			if err != nil {
				t.Fatal(err)
			}
			members := names(tt.n)
			cur, err := r.AssignSlice(members)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(tt.n), 11))
			for i := range 10 {
				joiner := fmt.Sprintf("joiner-%d", i)
				members = append(members, joiner)
				next, err := r.AssignFrom(members, cur)
				if err != nil {
					t.Fatal(err)
				}
				moved := 0
				for p := range next {
					if next[p] != cur[p] {
						moved++
						if next[p] != joiner {
							t.Fatalf("join of %s moved partition %d from %s to %s", joiner, p, cur[p], next[p])
						}
					}
				}
				if lo := tt.p / len(members); moved < lo || moved > lo+1 {
					t.Fatalf("join moved %d partitions, want floor(P/N) = %d or one more", moved, lo)
				}
				cur = next

				k := rng.IntN(len(members))
				leaver := members[k]
				members = slices.Delete(members, k, k+1)
				next, err = r.AssignFrom(members, cur)
				if err != nil {
					t.Fatal(err)
				}
				for p := range next {
					if (next[p] != cur[p]) != (cur[p] == leaver) {
						t.Fatalf("leave of %s: partition %d %s → %s", leaver, p, cur[p], next[p])
					}
				}
				cur = next
			}
		})
	}
}

// TestUpgradeFromLibrary measures the one change of owners a leader of this
// build makes when it takes over a cluster converged to the library's
// bounded-load assignment (the target of earlier builds): members above
// ceil(P/N) give up their surplus, members under floor(P/N) take it, and
// nothing else moves.
func TestUpgradeFromLibrary(t *testing.T) {
	tests := []struct {
		name string
		p, n int
	}{
		{name: "16 members", p: 4096, n: 16},
		{name: "100 members", p: 4096, n: 100},
		// 1,000 members: the library takes about 30 s to build (the
		// quadratic New); a one-off run moved 458 partitions (11.2 %).
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{PartitionCount: tt.p})
			if err != nil {
				t.Fatal(err)
			}
			members := names(tt.n)
			lib := libraryOwners(members, r.Config(), hasher{})
			got, err := r.AssignFrom(members, lib)
			if err != nil {
				t.Fatal(err)
			}
			checkQuotas(t, members, got)
			held := map[string]int{}
			for _, o := range lib {
				held[o]++
			}
			// Only members above floor(P/N) give anything up, and what moves
			// fills members up to at most ceil(P/N).
			lo, hi := tt.p/tt.n, (tt.p+tt.n-1)/tt.n
			surplus, room := 0, 0
			for _, m := range members {
				surplus += max(0, held[m]-hi)
				room += max(0, hi-held[m])
			}
			moved := 0
			for p := range got {
				if got[p] != lib[p] {
					moved++
					if held[lib[p]] <= lo {
						t.Fatalf("partition %d moved from %s, which held %d ≤ floor(P/N)", p, lib[p], held[lib[p]])
					}
				}
			}
			t.Logf("%d members: %d of %d partitions move at the upgrade (%.1f%%; surplus over ceil(P/N) %d)",
				tt.n, moved, tt.p, 100*float64(moved)/float64(tt.p), surplus)
			if moved < surplus || moved > room {
				t.Fatalf("upgrade moved %d partitions, want between the surplus %d and the room under ceil(P/N) %d", moved, surplus, room)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name      string
		members   []string
		wantOwner []string // the set of owners expected; nil means empty result
		wantErr   bool
	}{
		{name: "no members", members: nil},
		{name: "one member owns all", members: []string{"a"}, wantOwner: []string{"a"}},
		{name: "duplicates count once", members: []string{"a", "a", "b"}, wantOwner: []string{"a", "b"}},
		{name: "empty name", members: []string{"a", ""}, wantErr: true},
	}
	r, err := New(Config{PartitionCount: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Assign(tt.members)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Assign() error = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if tt.wantOwner == nil {
				if len(got) != 0 {
					t.Fatalf("Assign() = %d entries, want none", len(got))
				}
				return
			}
			if len(got) != 64 {
				t.Fatalf("Assign() = %d entries, want 64", len(got))
			}
			owners := keys(countByOwner(got))
			if !slices.Equal(owners, tt.wantOwner) {
				t.Fatalf("owners = %v, want %v", owners, tt.wantOwner)
			}
		})
	}
}

func TestAssignIsOrderIndependent(t *testing.T) {
	r, err := New(Config{PartitionCount: 4096})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		a, b []string
	}{
		{name: "reversed", a: []string{"s0", "s1", "s2", "s3"}, b: []string{"s3", "s2", "s1", "s0"}},
		{name: "shuffled", a: []string{"x", "y", "z", "w", "v"}, b: []string{"z", "v", "x", "w", "y"}},
		{name: "with duplicates", a: []string{"p", "q"}, b: []string{"q", "p", "q"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := r.AssignSlice(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := r.AssignSlice(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a, b) {
				t.Fatal("assignment depends on member order")
			}
			m, _ := r.Assign(tt.b)
			for id, owner := range a {
				if m[partition.ID(id)] != owner {
					t.Fatalf("Assign and AssignSlice disagree at %d", id)
				}
			}
		})
	}
}

// TestMatchesLibraryPartitionID shows package partition and the library's
// FindPartitionID agree, so a namespace's owner is the library's LocateKey.
func TestMatchesLibraryPartitionID(t *testing.T) {
	const p = 4096
	m, _ := partition.NewMap(p)
	c := consistent.New(nil, consistent.Config{Hasher: hasher{}, PartitionCount: p, ReplicationFactor: 1, Load: 1})
	for i := range 2000 {
		ns := fmt.Sprintf("tenant-%05d", i)
		if got, want := m.For(ns), partition.ID(c.FindPartitionID([]byte(ns))); got != want {
			t.Fatalf("%s: partition.For = %d, library = %d", ns, got, want)
		}
	}
}

// TestBalanceAndMovement measures the design's figures on 10,000 namespaces
// named tenant-00000…: every member holds floor(P/N) or ceil(P/N)
// partitions, namespace load max/avg stays near 1, and when a member joins
// a converged cluster (AssignFrom of the previous target) the ideal share
// 1/(N+1) of the partitions moves.
func TestBalanceAndMovement(t *testing.T) {
	const (
		p          = 4096
		namespaces = 10000
	)
	pm, _ := partition.NewMap(p)
	parts := make([]partition.ID, namespaces)
	for i := range parts {
		parts[i] = pm.For(fmt.Sprintf("tenant-%05d", i))
	}
	r, err := New(Config{PartitionCount: p})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		from, to  int
		maxNSLoad float64 // namespace-level max/avg bound (statistical)
		minMoved  float64 // namespaces
		maxMoved  float64
	}{
		{name: "4 to 5", from: 4, to: 5, maxNSLoad: 1.1, minMoved: 0.17, maxMoved: 0.23},
		{name: "8 to 9", from: 8, to: 9, maxNSLoad: 1.15, minMoved: 0.09, maxMoved: 0.13},
		{name: "16 to 17", from: 16, to: 17, maxNSLoad: 1.2, minMoved: 0.045, maxMoved: 0.07},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := r.AssignSlice(names(tt.from))
			if err != nil {
				t.Fatal(err)
			}
			after, err := r.AssignFrom(names(tt.to), before)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				n      int
				assign []string
			}{{tt.from, before}, {tt.to, after}} {
				checkQuotas(t, names(c.n), c.assign)
				perNS := map[string]int{}
				for _, id := range parts {
					perNS[c.assign[id]]++
				}
				maxNS, minNS := extremes(perNS, c.n)
				avgNS := float64(namespaces) / float64(c.n)
				t.Logf("N=%d namespaces max/avg=%.3f min/avg=%.3f", c.n, float64(maxNS)/avgNS, float64(minNS)/avgNS)
				if float64(maxNS)/avgNS > tt.maxNSLoad {
					t.Fatalf("N=%d: namespace max/avg %.3f > %.2f", c.n, float64(maxNS)/avgNS, tt.maxNSLoad)
				}
			}
			movedNS, movedP := 0, 0
			for id := range before {
				if before[id] != after[id] {
					movedP++
				}
			}
			for _, id := range parts {
				if before[id] != after[id] {
					movedNS++
				}
			}
			fracNS := float64(movedNS) / namespaces
			fracP := float64(movedP) / p
			t.Logf("%d→%d members: moved %.3f of namespaces, %.3f of partitions (ideal %.3f)", tt.from, tt.to, fracNS, fracP, 1/float64(tt.to))
			if want := p / tt.to; movedP < want || movedP > want+1 {
				t.Fatalf("moved %d partitions, want floor(P/N) = %d or one more", movedP, want)
			}
			if fracNS < tt.minMoved || fracNS > tt.maxMoved {
				t.Fatalf("moved fraction of namespaces %.3f outside [%.3f, %.2f]", fracNS, tt.minMoved, tt.maxMoved)
			}
		})
	}
}

func BenchmarkAssign(b *testing.B) {
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("P=4096/N=%d", n), func(b *testing.B) {
			r, err := New(Config{PartitionCount: 4096})
			if err != nil {
				b.Fatal(err)
			}
			members := names(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Assign(members); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("kshard-shard-%d", i)
	}
	return out
}

func countByOwner(m map[partition.ID]string) map[string]int {
	out := map[string]int{}
	for _, o := range m {
		out[o]++
	}
	return out
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// extremes returns the largest and smallest count over n members, counting
// members absent from m as zero.
func extremes(m map[string]int, n int) (maxC, minC int) {
	minC = math.MaxInt
	for _, c := range m {
		maxC = max(maxC, c)
		minC = min(minC, c)
	}
	if len(m) < n {
		minC = 0
	}
	return maxC, minC
}

// FuzzAssignFrom checks AssignFrom's properties on arbitrary small shapes and
// current owners (members, non-members, nobody): every member within quota,
// the result a fixed point, and current owners within floor(P/N) kept.
func FuzzAssignFrom(f *testing.F) {
	f.Add(uint8(16), uint8(5), uint8(10), []byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add(uint8(3), uint8(7), uint8(1), []byte{9, 9, 9})
	f.Add(uint8(48), uint8(12), uint8(20), []byte{})
	f.Fuzz(func(t *testing.T, p8, n8, rf8 uint8, owners []byte) {
		p, n, rf := int(p8)%64+1, int(n8)%20+1, int(rf8)%30+1
		r, err := New(Config{PartitionCount: p, ReplicationFactor: rf})
		if err != nil {
			t.Fatal(err)
		}
		members := names(n)
		current := make([]string, p)
		held := map[string]int{}
		for i := range current {
			if len(owners) == 0 {
				break
			}
			if k := int(owners[i%len(owners)]) % (n + 3); k < n+2 {
				current[i] = fmt.Sprintf("kshard-shard-%d", k) // k ≥ n: not a member
				held[current[i]]++
			}
		}
		got, err := r.AssignFrom(members, current)
		if err != nil {
			t.Fatal(err)
		}
		checkQuotas(t, members, got)
		again, err := r.AssignFrom(members, got)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, again) {
			t.Fatal("not a fixed point")
		}
		for i, o := range current {
			if slices.Contains(members, o) && held[o] <= p/n && got[i] != o {
				t.Fatalf("partition %d moved from %s, which holds %d ≤ floor(P/N)", i, o, held[o])
			}
		}
	})
}

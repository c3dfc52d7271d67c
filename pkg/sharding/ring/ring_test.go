package ring

import (
	"fmt"
	"math"
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

// libraryPanics runs the library itself and reports whether it panicked.
func libraryPanics(p, n int, load float64) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	members := make([]consistent.Member, n)
	for i := range members {
		members[i] = member(fmt.Sprintf("shard-%d", i))
	}
	consistent.New(members, consistent.Config{Hasher: hasher{}, PartitionCount: p, ReplicationFactor: 5, Load: load})
	return false
}

// TestCheckMembersMatchesLibrary proves that CheckMembers is the library's
// exact "not enough room" condition: it errs exactly when the library
// panics. Loads below 1 are rejected by Validate, so they are used here
// directly to produce the panicking cases.
func TestCheckMembersMatchesLibrary(t *testing.T) {
	tests := []struct {
		name    string
		p, n    int
		load    float64
		wantErr bool
	}{
		{name: "half load, two members", p: 16, n: 2, load: 0.5, wantErr: true},
		{name: "half load rounds up with many members", p: 16, n: 16, load: 0.5},
		{name: "just under one", p: 4096, n: 3, load: 0.9999},
		{name: "just under one, divisible", p: 4096, n: 4, load: 0.999, wantErr: true},
		{name: "load one divisible", p: 4096, n: 4, load: 1},
		{name: "more members than partitions", p: 4, n: 9, load: 1},
		{name: "single member load one", p: 7, n: 1, load: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{PartitionCount: tt.p, ReplicationFactor: 5, Load: tt.load}
			err := cfg.CheckMembers(tt.n)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckMembers(%d) = %v, wantErr %v", tt.n, err, tt.wantErr)
			}
			if got := libraryPanics(tt.p, tt.n, tt.load); got != tt.wantErr {
				t.Fatalf("library panicked = %v, CheckMembers error = %v", got, err)
			}
		})
	}
}

// TestNoPanicForAnyMemberCount sweeps small shapes: with Load ≥ 1 every
// member count is placeable and every member respects the bound.
func TestNoPanicForAnyMemberCount(t *testing.T) {
	for _, p := range []int{1, 2, 3, 7, 16, 61} {
		for _, load := range []float64{1, 1.0000001, 1.1, 1.25} {
			r, err := New(Config{PartitionCount: p, ReplicationFactor: 10, Load: load})
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= p+3; n++ {
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("s%d", i)
				}
				got, err := r.Assign(names)
				if err != nil {
					t.Fatalf("p=%d n=%d load=%v: %v", p, n, load, err)
				}
				bound := int(math.Ceil(float64(p) / float64(n) * load))
				for m, c := range countByOwner(got) {
					if c > bound {
						t.Fatalf("p=%d n=%d load=%v: %s has %d > bound %d", p, n, load, m, c, bound)
					}
				}
			}
		}
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
// named tenant-00000…: every member stays within the exact partition bound
// ceil(P/N × Load), namespace load max/avg stays near Load, and when a fifth
// member joins four, about 1/5 of the namespaces move (ideal 1/(N+1)).
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
	load := r.Config().Load

	tests := []struct {
		name      string
		from, to  int
		maxNSLoad float64 // namespace-level max/avg bound (statistical)
		minMoved  float64
		maxMoved  float64
	}{
		{name: "4 to 5", from: 4, to: 5, maxNSLoad: 1.3, minMoved: 0.15, maxMoved: 0.27},
		{name: "8 to 9", from: 8, to: 9, maxNSLoad: 1.3, minMoved: 0.08, maxMoved: 0.16},
		{name: "16 to 17", from: 16, to: 17, maxNSLoad: 1.35, minMoved: 0.04, maxMoved: 0.09},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := r.AssignSlice(names(tt.from))
			if err != nil {
				t.Fatal(err)
			}
			after, err := r.AssignSlice(names(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				n      int
				assign []string
			}{{tt.from, before}, {tt.to, after}} {
				bound := int(math.Ceil(float64(p) / float64(c.n) * load))
				perPart := map[string]int{}
				perNS := map[string]int{}
				for _, o := range c.assign {
					perPart[o]++
				}
				for _, id := range parts {
					perNS[c.assign[id]]++
				}
				maxP, minP := extremes(perPart, c.n)
				maxNS, minNS := extremes(perNS, c.n)
				avgP := float64(p) / float64(c.n)
				avgNS := float64(namespaces) / float64(c.n)
				t.Logf("N=%d partitions max/avg=%.3f min/avg=%.3f (bound %d = %.3f×avg); namespaces max/avg=%.3f min/avg=%.3f",
					c.n, float64(maxP)/avgP, float64(minP)/avgP, bound, float64(bound)/avgP, float64(maxNS)/avgNS, float64(minNS)/avgNS)
				if maxP > bound {
					t.Fatalf("N=%d: a member has %d partitions > bound %d", c.n, maxP, bound)
				}
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
			if fracNS < tt.minMoved || fracNS > tt.maxMoved {
				t.Fatalf("moved fraction %.3f outside [%.2f, %.2f]", fracNS, tt.minMoved, tt.maxMoved)
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

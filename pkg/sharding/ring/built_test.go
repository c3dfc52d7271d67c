package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestBuiltPreferAndDistance: Prefer names every member on the ring once,
// starting with the library's owner (as preference, checked against the
// library in TestPreference), and Distance orders the members exactly as
// Prefer does.
func TestBuiltPreferAndDistance(t *testing.T) {
	tests := []struct {
		name  string
		p, n  int
		rf    int
		check int // partitions checked
	}{
		{name: "sim shape", p: 48, n: 7, rf: 20, check: 48},
		{name: "one member", p: 16, n: 1, rf: 5, check: 16},
		{name: "defaults, 100 members", p: 4096, n: 100, check: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{PartitionCount: tt.p, ReplicationFactor: tt.rf})
			if err != nil {
				t.Fatal(err)
			}
			members := names(tt.n)
			b, err := r.Build(append(slices.Clone(members), members[0]))
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Members(); !slices.Equal(got, slices.Sorted(slices.Values(members))) {
				t.Fatalf("Members() = %v", got)
			}
			for p := range tt.check {
				id := partition.ID(p)
				var pref []int
				for m := range b.Prefer(id) {
					pref = append(pref, m)
				}
				if len(pref) != tt.n {
					t.Fatalf("partition %d: preference of %d members, want %d", p, len(pref), tt.n)
				}
				for i, m := range slices.Sorted(slices.Values(pref)) {
					if m != i {
						t.Fatalf("partition %d: preference %v does not name every member once", p, pref)
					}
				}
				if want := r.preference(members, id); b.Members()[pref[0]] != want[0] {
					t.Fatalf("partition %d: Prefer starts at %s, preference at %s", p, b.Members()[pref[0]], want[0])
				}
				for i := 1; i < len(pref); i++ {
					if b.Distance(pref[i-1], id) >= b.Distance(pref[i], id) {
						t.Fatalf("partition %d: Distance does not increase along Prefer at %d", p, i)
					}
				}
			}
			for i, name := range b.Members() {
				if b.Index(name) != i {
					t.Fatalf("Index(%s) = %d, want %d", name, b.Index(name), i)
				}
			}
			if b.Index("nobody") != -1 {
				t.Fatal("Index of a non-member is not -1")
			}
		})
	}
}

// TestBuiltAssignFromSubset: restricted to some members and some
// partitions, AssignFrom gives those members floor/ceil of those
// partitions, leaves the others -1, is a fixed point, and equals the
// unrestricted AssignFrom when nothing is excluded.
func TestBuiltAssignFromSubset(t *testing.T) {
	tests := []struct {
		name       string
		p, n       int
		keepMember int // one in keepMember members is in the subset
		keepPart   int // one in keepPart partitions is
	}{
		{name: "everything", p: 256, n: 9, keepMember: 1, keepPart: 1},
		{name: "half the members", p: 256, n: 9, keepMember: 2, keepPart: 1},
		{name: "a third of the partitions", p: 4096, n: 100, keepMember: 1, keepPart: 3},
		{name: "few of both", p: 64, n: 20, keepMember: 5, keepPart: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{PartitionCount: tt.p})
			if err != nil {
				t.Fatal(err)
			}
			members := names(tt.n)
			b, err := r.Build(members)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(tt.p), uint64(tt.n)))
			current := make([]string, tt.p)
			for i := range current {
				if k := rng.IntN(tt.n + 2); k < tt.n+1 {
					current[i] = fmt.Sprintf("kshard-shard-%d", k)
				}
			}
			memberIn := make([]bool, tt.n)
			var in []string
			for m := range memberIn {
				memberIn[m] = m%tt.keepMember == 0
				if memberIn[m] {
					in = append(in, b.Members()[m])
				}
			}
			cur := b.Owners(current)
			partIn := make([]bool, tt.p)
			if got := b.AssignFrom(cur, memberIn, partIn); slices.ContainsFunc(got, func(m int32) bool { return m != -1 }) {
				t.Fatal("no partition in the subset, yet some assigned")
			}
			for p := range partIn {
				partIn[p] = p%tt.keepPart == 0
			}
			var subset []string
			got := b.AssignFrom(cur, memberIn, partIn)
			for p, m := range got {
				if !partIn[p] {
					if m != -1 {
						t.Fatalf("partition %d outside the subset assigned to %d", p, m)
					}
					continue
				}
				subset = append(subset, b.Members()[m])
			}
			checkQuotas(t, in, subset)
			if again := b.AssignFrom(got, memberIn, partIn); !slices.Equal(again, got) {
				t.Fatal("not a fixed point")
			}
			if tt.keepMember == 1 && tt.keepPart == 1 {
				want, err := r.AssignFrom(members, current)
				if err != nil {
					t.Fatal(err)
				}
				for p, m := range got {
					if b.Members()[m] != want[p] {
						t.Fatalf("partition %d: %s, AssignFrom %s", p, b.Members()[m], want[p])
					}
				}
			}
		})
	}
}

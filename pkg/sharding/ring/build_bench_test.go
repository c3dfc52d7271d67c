package ring

import (
	"fmt"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// BenchmarkAssignMembers measures computing the whole target at the
// production defaults (partition.DefaultCount partitions,
// DefaultReplicationFactor) for member counts up to and past the
// coordinator's member cap: from nothing (a first start) and, as the
// coordinator computes it on a membership change, from a converged
// assignment after one member joined.
func BenchmarkAssignMembers(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		r, err := New(Config{PartitionCount: partition.DefaultCount})
		if err != nil {
			b.Fatal(err)
		}
		members := names(n)
		b.Run(fmt.Sprintf("P=%d/N=%d/from=none", partition.DefaultCount, n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.AssignSlice(members); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("P=%d/N=%d/from=converged+join", partition.DefaultCount, n), func(b *testing.B) {
			current, err := r.AssignSlice(members)
			if err != nil {
				b.Fatal(err)
			}
			joined := append(names(n), "joiner")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.AssignFrom(joined, current); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

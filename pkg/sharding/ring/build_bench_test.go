package ring

import (
	"fmt"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// BenchmarkAssignMembers measures building the whole assignment from a
// member set at the production defaults (partition.DefaultCount partitions,
// DefaultReplicationFactor, DefaultLoad) for member counts up to and past
// the coordinator's member cap, where the cost used to grow superlinearly.
func BenchmarkAssignMembers(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("P=%d/N=%d", partition.DefaultCount, n), func(b *testing.B) {
			r, err := New(Config{PartitionCount: partition.DefaultCount})
			if err != nil {
				b.Fatal(err)
			}
			members := names(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.AssignSlice(members); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

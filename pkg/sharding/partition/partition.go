package partition

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// MaxCount bounds the partition count. Partition IDs travel as uint32 but a
// coordinator keeps per-partition state and every shard per-partition
// caches, so 65536 is already far more than a cluster needs.
const MaxCount = 1 << 16

// DefaultCount is the partition count used when none is configured: large
// enough that 64 shards still get about 64 partitions each (fine-grained
// balance), small enough that per-partition state stays cheap.
const DefaultCount = 4096

// ClusterKey is the namespace name that stands for cluster-scoped work: the empty name,
// which no namespace can have. Map.For(ClusterKey) is the cluster partition: it owns the
// work on cluster-scoped objects (queue keys without a namespace, other than Namespace
// objects), so exactly one shard works them at a time and they are handed off like any
// other partition. It is an ordinary partition of the ring, so namespaces may share it,
// and neither the ring nor the protocol needs to know about it.
const ClusterKey = ""

// ID identifies one partition, in [0, Count).
type ID uint32

// Map assigns namespaces to partitions. The zero value is not usable; build
// one with NewMap or call Validate before For.
type Map struct {
	// Count is the number of partitions P, in [1, MaxCount].
	Count int
}

// NewMap returns a validated Map with count partitions.
func NewMap(count int) (Map, error) {
	m := Map{Count: count}
	if err := m.Validate(); err != nil {
		return Map{}, err
	}
	return m, nil
}

// ValidateCount reports whether count is a usable partition count. Other
// packages (ring, handoff) share it so every layer rejects the same values.
func ValidateCount(count int) error {
	if count < 1 || count > MaxCount {
		return fmt.Errorf("partition count %d out of range [1, %d]", count, MaxCount)
	}
	return nil
}

// Validate reports whether m can be used.
func (m Map) Validate() error { return ValidateCount(m.Count) }

// For returns the partition of a namespace. It panics if m was not
// validated (Count 0), as a division by zero would.
func (m Map) For(namespace string) ID {
	return ID(xxhash.Sum64String(namespace) % uint64(m.Count))
}

// Contains reports whether id is a partition of m. Coordinators and shards
// use it to reject messages that name partitions that do not exist.
func (m Map) Contains(id ID) bool { return int64(id) < int64(m.Count) }

package shardcache

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// PartitionFunc maps a namespace name to the partition that owns it. It is injected so
// that the cache layer does not depend on how kshard hashes names; the shard passes the
// same function the coordinator uses. It must be pure, cheap and safe for concurrent use:
// it runs for every watch event of every cached resource.
//
// Cluster-scoped Namespace objects belong to the partition of their own name, so the
// cache calls PartitionFunc(name) for objects without a namespace.
type PartitionFunc func(namespace string) uint32

// PartitionIndex is the name of the index that every informer of a Cache (the Namespace
// informer included) maintains from partition to objects. Its values are
// PartitionIndexValue(partition). The sharding layer uses it on Acquire to enqueue all
// cached objects of a partition; Release uses it to check that a partition is gone.
const PartitionIndex = "kshard.io/partition"

// PartitionIndexValue is the PartitionIndex value of partition: its decimal form.
func PartitionIndexValue(partition uint32) string {
	return strconv.FormatUint(uint64(partition), 10)
}

// admission is the set of partitions whose objects the shard's stores admit (prepared or
// acquired). It is read on every watch event, and changed only by Prepare and Release, so
// it is a copy-on-write map behind an atomic pointer: readers take no lock.
type admission struct {
	partitionOf PartitionFunc

	mu  sync.Mutex // serialises writers
	set atomic.Pointer[map[uint32]struct{}]
}

func newAdmission(partitionOf PartitionFunc) *admission {
	a := &admission{partitionOf: partitionOf}
	empty := map[uint32]struct{}{}
	a.set.Store(&empty)
	return a
}

// admitted reports whether partition is admitted.
func (a *admission) admitted(partition uint32) bool {
	_, ok := (*a.set.Load())[partition]
	return ok
}

// namespaceAdmitted reports whether objects of namespace are admitted.
func (a *admission) namespaceAdmitted(namespace string) bool {
	return a.admitted(a.partitionOf(namespace))
}

// update admits (add=true) or revokes partitions and reports which of them changed.
func (a *admission) update(partitions []uint32, add bool) []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *a.set.Load()
	next := make(map[uint32]struct{}, len(old)+len(partitions))
	for p := range old {
		next[p] = struct{}{}
	}
	var changed []uint32
	for _, p := range partitions {
		_, had := next[p]
		switch {
		case add && !had:
			next[p] = struct{}{}
			changed = append(changed, p)
		case !add && had:
			delete(next, p)
			changed = append(changed, p)
		}
	}
	a.set.Store(&next)
	return changed
}

// list returns the admitted partitions, in no particular order.
func (a *admission) list() []uint32 {
	set := *a.set.Load()
	out := make([]uint32, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	return out
}

// partitionKey is the namespace name that decides an object's partition: its namespace,
// or, for a cluster-scoped object (a Namespace), its own name.
func partitionKey(namespace, name string) string {
	if namespace != "" {
		return namespace
	}
	return name
}

package shardcache

// Admission: which partitions' objects the stores may hold. It keeps:
//   - The set changes only through update (Prepare, Release), serialised by a.mu, and is
//     published whole: a reader (every watch event of every feed) loads one immutable
//     bitset without a lock and never sees half an update.
//   - An object belongs to the partition of its namespace, a cluster-scoped object (a
//     Namespace) to its own name's (partitionKey).

import (
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// PartitionFunc maps a namespace name to the partition that owns it. It is injected so
// that the cache layer does not depend on how kshard hashes names; the shard passes the
// same function the coordinator uses. It must be pure, cheap and safe for concurrent use:
// it runs for every watch event of every cached resource.
//
// Cluster-scoped Namespace objects belong to the partition of their own name, so the
// cache calls PartitionFunc(name) for objects without a namespace.
type PartitionFunc func(namespace string) partition.ID

// PartitionIndex is the name of the index that every informer of a Cache (the Namespace
// informer included) maintains from partition to objects. Its values are
// PartitionIndexValue(partition). The sharding layer uses it on Acquire to enqueue all
// cached objects of a partition; Release uses it to check that a partition is gone.
const PartitionIndex = "kshard.io/partition"

// PartitionIndexValue is the PartitionIndex value of partition: its decimal form.
func PartitionIndexValue(partition partition.ID) string {
	return strconv.FormatUint(uint64(partition), 10)
}

// admission is the set of partitions whose objects the shard's stores admit (prepared or
// acquired). It is read on every watch event, and changed only by Prepare and Release, so
// it is a copy-on-write set behind an atomic pointer: readers take no lock.
//
// The set is a bitset indexed by partition, not a map: a shard's first assignment is
// thousands of Prepares of one partition each, and copying a map of every admitted
// partition on each of them allocated O(P²) — about 390 MB of garbage for the default
// 4096 partitions, most of a shard's allocations and the top of its heap at startup. A
// bitset copy is P/8 bytes (512 B for 4096 partitions, 8 KiB at partition.MaxCount).
type admission struct {
	partitionOf PartitionFunc

	mu  sync.Mutex // serialises writers
	set atomic.Pointer[bitset]
}

// bitset is an immutable set of partitions once published; bit p%64 of word p/64 is
// partition p.
type bitset struct {
	words []uint64
	n     int // number of bits set
}

func (b *bitset) has(p partition.ID) bool {
	w := p / 64
	return uint64(w) < uint64(len(b.words)) && b.words[w]&(1<<(p%64)) != 0
}

func newAdmission(partitionOf PartitionFunc) *admission {
	a := &admission{partitionOf: partitionOf}
	a.set.Store(&bitset{})
	return a
}

// admitted reports whether partition is admitted.
func (a *admission) admitted(partition partition.ID) bool {
	return a.set.Load().has(partition)
}

// namespaceAdmitted reports whether objects of namespace are admitted.
func (a *admission) namespaceAdmitted(namespace string) bool {
	return a.admitted(a.partitionOf(namespace))
}

// update admits (add=true) or revokes partitions and reports which of them changed.
func (a *admission) update(partitions []partition.ID, add bool) []partition.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.set.Load()
	size := len(old.words)
	if add {
		for _, p := range partitions {
			size = max(size, int(p/64)+1)
		}
	}
	next := &bitset{words: make([]uint64, size), n: old.n}
	copy(next.words, old.words)
	var changed []partition.ID
	for _, p := range partitions {
		had := next.has(p)
		switch {
		case add && !had:
			next.words[p/64] |= 1 << (p % 64)
			next.n++
			changed = append(changed, p)
		case !add && had:
			next.words[p/64] &^= 1 << (p % 64)
			next.n--
			changed = append(changed, p)
		}
	}
	if len(changed) == 0 {
		return nil // nothing to publish
	}
	a.set.Store(next)
	return changed
}

// list returns the admitted partitions, in ascending order.
func (a *admission) list() []partition.ID {
	set := a.set.Load()
	out := make([]partition.ID, 0, set.n)
	for w, word := range set.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			out = append(out, partition.ID(w*64+b))
			word &^= 1 << b
		}
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

package ring

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Defaults measured in the design notes: ReplicationFactor 100 with Load 1.1
// keeps max/avg at or below about 1.24 while moving about 1/(N+1) of the
// partitions when a member joins. Fewer virtual nodes (20) left some shards
// with half the average load.
const (
	DefaultReplicationFactor = 100
	DefaultLoad              = 1.1
	// MaxReplicationFactor bounds the virtual nodes per member: the ring
	// costs O(members × ReplicationFactor) memory and sort time on every
	// membership change.
	MaxReplicationFactor = 10000
)

// ErrNotEnoughRoom is returned when the library could not place every
// partition for the given member count and Load.
var ErrNotEnoughRoom = errors.New("ring: not enough room to distribute partitions")

// Config configures the ring. Zero ReplicationFactor and Load take the
// defaults (WithDefaults).
type Config struct {
	// PartitionCount is P, the same value package partition uses.
	PartitionCount int
	// ReplicationFactor is the number of virtual nodes per member.
	ReplicationFactor int
	// Load bounds every member to ceil(P/N × Load) partitions; ≥ 1.
	Load float64
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	return c
}

// Validate reports a configuration the library would reject or panic on.
// It does not apply defaults: call WithDefaults first if zero means default.
func (c Config) Validate() error {
	if err := partition.ValidateCount(c.PartitionCount); err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("ring: replication factor %d out of range [1, %d]", c.ReplicationFactor, MaxReplicationFactor)
	}
	if math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1 {
		// Below 1 the bound ceil(P/N × Load) is under the average for most
		// N, so the library runs out of room and panics.
		return fmt.Errorf("ring: load %v must be a finite number ≥ 1 (a member cannot be bounded below the average)", c.Load)
	}
	return nil
}

// CheckMembers reports whether n members can hold every partition, using
// the library's exact rule: each member may take ceil(P/n × Load)
// partitions (computed in float64 exactly as consistent.averageLoad does),
// and the placement loop panics once every member is full.
func (c Config) CheckMembers(n int) error {
	if n <= 0 {
		return nil // nothing to place onto; Assign returns an empty map.
	}
	perMember := math.Ceil(float64(uint64(c.PartitionCount)) / float64(n) * c.Load)
	if perMember*float64(n) < float64(c.PartitionCount) {
		return fmt.Errorf("%w: %d members × ceil(%d/%d × %v) = %v < %d partitions",
			ErrNotEnoughRoom, n, c.PartitionCount, n, c.Load, perMember*float64(n), c.PartitionCount)
	}
	return nil
}

// Ring computes assignments for one configuration. It holds no member
// state, so it is safe for concurrent use.
type Ring struct {
	cfg Config
}

// New validates cfg (after defaults) and returns a Ring.
func New(cfg Config) (*Ring, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ring{cfg: cfg}, nil
}

// Config returns the effective configuration (defaults applied).
func (r *Ring) Config() Config { return r.cfg }

// Assign returns the owner of every partition for the given member set.
// Duplicate names count once and order does not matter; an empty set yields
// an empty map. Names must be non-empty.
func (r *Ring) Assign(members []string) (map[partition.ID]string, error) {
	owners, err := r.AssignSlice(members)
	if err != nil {
		return nil, err
	}
	out := make(map[partition.ID]string, len(owners))
	for id, o := range owners {
		if o != "" {
			out[partition.ID(id)] = o
		}
	}
	return out, nil
}

// AssignSlice is Assign with the result indexed by partition ID, which is
// what a coordinator iterating all partitions wants (no map overhead). With
// no members every entry is "".
func (r *Ring) AssignSlice(members []string) ([]string, error) {
	names := slices.Clone(members)
	// Sorting makes the result independent of input order even in the
	// (astronomically unlikely) case of two virtual nodes with one hash,
	// where the library keeps the last one added.
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]string, r.cfg.PartitionCount)
	if len(names) == 0 {
		return out, nil
	}
	if names[0] == "" {
		return nil, errors.New("ring: empty member name")
	}
	if err := r.cfg.CheckMembers(len(names)); err != nil {
		return nil, err
	}
	owner, err := distribute(names, r.cfg, xxhash.Sum64)
	if err != nil {
		return nil, err
	}
	for id, m := range owner {
		out[id] = names[m]
	}
	return out, nil
}

// vnode is one virtual node: its position on the ring and the index of the
// member it belongs to.
type vnode struct {
	hash   uint64
	member int32
}

// distribute computes consistent.New(names, cfg).GetPartitionOwner(p) for
// every partition p, as member indexes into names, and returns exactly the
// library's answer in one sort instead of one per member.
//
// Why not call the library: consistent.New adds members one at a time and
// its add re-sorts the whole ring of N×ReplicationFactor virtual nodes after
// each, which is O(N²·R·log(N·R)): 4,096 partitions took 0.2–0.8 s for 100
// members, 24 s for 1,000 and about 10 minutes for 5,000 (BenchmarkAssignMembers
// before this change). The coordinator runs it on every membership change.
// The result must stay identical to the library's, not merely as good: a
// new leader running a different build would otherwise move partitions
// needlessly. TestDistributeMatchesLibrary checks it, hash collisions
// included.
//
// The library's algorithm, reproduced step by step:
//   - member m (in the order added, here names' sorted order) gets the
//     virtual nodes hash("<i>:<name>") for i in [0, R); a hash shared by
//     two virtual nodes belongs to the one added last (a map overwrite),
//     and appears in the sorted ring once per virtual node;
//   - every member may take at most ceil(P/N × Load) partitions, computed
//     in float64 as consistent.averageLoad does;
//   - partition p (in increasing order) hashes its 8-byte little-endian ID,
//     starts at the first virtual node at or after that hash (wrapping to
//     0) and walks clockwise to the first member with room.
func distribute(names []string, cfg Config, sum64 func([]byte) uint64) ([]int32, error) {
	rf := cfg.ReplicationFactor
	ring := make([]vnode, 0, len(names)*rf)
	var key []byte
	for m, name := range names {
		for i := range rf {
			key = strconv.AppendInt(key[:0], int64(i), 10)
			key = append(key, ':')
			key = append(key, name...)
			ring = append(ring, vnode{hash: sum64(key), member: int32(m)})
		}
	}
	// Order by hash, then by the order added, so the last of equal hashes
	// is the one the library's map kept.
	slices.SortFunc(ring, func(a, b vnode) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(a.member, b.member)
	})
	for i := len(ring) - 2; i >= 0; i-- {
		if ring[i].hash == ring[i+1].hash {
			ring[i].member = ring[i+1].member
		}
	}

	avg := math.Ceil(float64(uint64(cfg.PartitionCount)) / float64(len(names)) * cfg.Load)
	loads := make([]float64, len(names))
	owner := make([]int32, cfg.PartitionCount)
	var bs [8]byte
	for p := range owner {
		binary.LittleEndian.PutUint64(bs[:], uint64(p))
		h := sum64(bs[:])
		idx, _ := slices.BinarySearchFunc(ring, h, func(v vnode, h uint64) int { return cmp.Compare(v.hash, h) })
		if idx >= len(ring) {
			idx = 0
		}
		placed := false
		for range len(ring) {
			m := ring[idx].member
			if loads[m]+1 <= avg {
				loads[m]++
				owner[p] = m
				placed = true
				break
			}
			if idx++; idx >= len(ring) {
				idx = 0
			}
		}
		if !placed {
			// Where the library panics. CheckMembers rules it out unless
			// hash collisions left members without a virtual node.
			return nil, fmt.Errorf("%w: partition %d found no member with room", ErrNotEnoughRoom, p)
		}
	}
	return owner, nil
}

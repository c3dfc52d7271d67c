package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/buraksezer/consistent"
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

// hasher adapts xxhash to consistent.Hasher.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// member adapts a shard name to consistent.Member.
type member string

func (m member) String() string { return string(m) }

// Assign returns the owner of every partition for the given member set.
// Duplicate names count once and order does not matter; an empty set yields
// an empty map. Names must be non-empty.
func (r *Ring) Assign(members []string) (map[partition.ID]string, error) {
	c, err := r.build(members)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return map[partition.ID]string{}, nil
	}
	out := make(map[partition.ID]string, r.cfg.PartitionCount)
	for id := 0; id < r.cfg.PartitionCount; id++ {
		owner := c.GetPartitionOwner(id)
		if owner == nil {
			return nil, fmt.Errorf("ring: partition %d has no owner", id)
		}
		out[partition.ID(id)] = owner.String()
	}
	return out, nil
}

// AssignSlice is Assign with the result indexed by partition ID, which is
// what a coordinator iterating all partitions wants (no map overhead).
func (r *Ring) AssignSlice(members []string) ([]string, error) {
	c, err := r.build(members)
	if err != nil {
		return nil, err
	}
	out := make([]string, r.cfg.PartitionCount)
	if c == nil {
		return out, nil
	}
	for id := range out {
		owner := c.GetPartitionOwner(id)
		if owner == nil {
			return nil, fmt.Errorf("ring: partition %d has no owner", id)
		}
		out[id] = owner.String()
	}
	return out, nil
}

// build returns the library ring for the member set, or nil for no members.
func (r *Ring) build(members []string) (c *consistent.Consistent, err error) {
	names := slices.Clone(members)
	// Sorting makes the result independent of input order even in the
	// (astronomically unlikely) case of two virtual nodes with one hash,
	// where the library keeps the last one added.
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return nil, nil
	}
	if names[0] == "" {
		return nil, errors.New("ring: empty member name")
	}
	if err := r.cfg.CheckMembers(len(names)); err != nil {
		return nil, err
	}
	list := make([]consistent.Member, len(names))
	for i, n := range names {
		list[i] = member(n)
	}
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("%w: library panicked: %v", ErrNotEnoughRoom, p)
		}
	}()
	return consistent.New(list, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    r.cfg.PartitionCount,
		ReplicationFactor: r.cfg.ReplicationFactor,
		Load:              r.cfg.Load,
	}), nil
}

package ring

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Defaults. ReplicationFactor 100 spreads each member's virtual nodes evenly
// enough that every partition's preference order is a fair draw over the
// members; fewer (20) gave some members much shorter arcs than others.
const (
	DefaultReplicationFactor = 100
	// DefaultLoad is kept for configurations that set it; Load no longer
	// affects the assignment (see Config.Load).
	DefaultLoad = 1.1
	// MaxReplicationFactor bounds the virtual nodes per member: the
	// ring costs O(members × ReplicationFactor) memory and sort time on every
	// membership change.
	MaxReplicationFactor = 10000
)

// ErrCurrentLength is returned when the current owners passed to AssignFrom
// are not one per partition.
var ErrCurrentLength = errors.New("ring: current owners must name one owner (or none) per partition")

// Config configures the ring. Zero ReplicationFactor and Load take the
// defaults (WithDefaults).
type Config struct {
	// PartitionCount is P, the same value package partition uses.
	PartitionCount int
	// ReplicationFactor is the number of virtual nodes per member.
	ReplicationFactor int
	// Load was the library's bounded-load factor (no member above
	// ceil(P/N × Load)). The assignment no longer uses it: every member's
	// quota is floor(P/N) or ceil(P/N) (see AssignFrom), which is tighter.
	// It is still validated (≥ 1) so that configurations written for
	// earlier builds keep being checked the same way.
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

// Validate reports an unusable configuration. It does not apply defaults:
// call WithDefaults first if zero means default.
func (c Config) Validate() error {
	if err := partition.ValidateCount(c.PartitionCount); err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("ring: replication factor %d out of range [1, %d]", c.ReplicationFactor, MaxReplicationFactor)
	}
	if math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1 {
		return fmt.Errorf("ring: load %v must be a finite number ≥ 1 (a member cannot be bounded below the average)", c.Load)
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

// Assign returns the owner of every partition for the given member set when
// nobody owns anything yet (AssignFrom with no current owners). Duplicate
// names count once and order does not matter; an empty set yields an empty
// map. Names must be non-empty.
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
	return r.AssignFrom(members, nil)
}

// AssignFrom returns the target owner of every partition (indexed by
// partition ID) for the member set, given who owns each partition now
// (current[p], "" for nobody; nil when nobody owns anything). It moves as
// little as balance allows:
//
//  1. Quotas. The members share the P partitions as evenly as integers
//     allow: each gets floor(P/N) or ceil(P/N). The P mod N extra ones go
//     to the members holding the most now, ties by name, so that members
//     already holding ceil(P/N) keep it.
//  2. Keep. A partition stays with its current owner if that owner is a
//     member within its quota. An owner above its quota keeps the
//     partitions it prefers most (see below) and gives up the rest.
//  3. Place. Every other partition, in ID order, goes to the first member
//     with room in its preference order.
//
// A partition's preference order is buraksezer/consistent's ring: hash the
// partition's 8-byte little-endian ID and walk clockwise from the first of
// the members' ReplicationFactor virtual nodes at or after it. A member
// prefers the partitions whose hash lies closest before one of its virtual
// nodes (those it comes earliest for in that walk).
//
// Why not the library's bounded-load placement, a pure function of the
// member set: its cap, ceil(P/N × Load), and which members are full by the
// time a partition is placed both change with membership, so each change
// cascades among the members that stay. At 1,000 members and 4,096
// partitions it moved 1.78× the ideal per join and 1.65× per leave. Here
// the members that stay keep what they hold up to their quota, so a join
// moves only what the new member's quota takes, and a leave moves only
// the leaver's partitions.
//
// Properties (tested): the result depends on neither the order of members
// nor of how current was built; every member gets exactly its quota; and
// AssignFrom(m, AssignFrom(m, c)) = AssignFrom(m, c), so a converged
// cluster's target is itself and a new leader that adopts the owners the
// shards report moves nothing.
func (r *Ring) AssignFrom(members, current []string) ([]string, error) {
	p := r.cfg.PartitionCount
	if current != nil && len(current) != p {
		return nil, fmt.Errorf("%w: %d owners for %d partitions", ErrCurrentLength, len(current), p)
	}
	b, err := r.Build(members)
	if err != nil {
		return nil, err
	}
	out := make([]string, p)
	if len(b.names) == 0 {
		return out, nil
	}
	for i, m := range b.AssignFrom(b.Owners(current), nil, nil) {
		out[i] = b.names[m]
	}
	return out, nil
}

// Built is the ring of one member set, built once (one sort of members ×
// ReplicationFactor virtual nodes). It exists so that a placement that asks
// many questions of one member set (package balance: preference walks,
// distances, count quotas over part of the partitions) pays for the sort
// once, as AssignFrom does. Members are addressed by their index in
// Members (sorted names). A Built is immutable and safe for concurrent use.
type Built struct {
	p     int
	names []string
	vn    []vnode

	// Filled on first use by Prefer or Distance (index), so that
	// Ring.AssignFrom, which needs neither, does not pay for them.
	once   sync.Once
	nodes  [][]uint64 // per member, its virtual nodes' hashes ascending
	onRing int        // members with at least one virtual node
}

// index fills nodes and onRing.
func (b *Built) index() {
	b.once.Do(func() {
		b.nodes = memberNodes(b.vn, len(b.names), nil)
		for _, vs := range b.nodes {
			if len(vs) > 0 {
				b.onRing++
			}
		}
	})
}

// Build returns the ring of members. Duplicate names count once and order
// does not matter (sorting also makes hash collisions of virtual nodes
// resolve the same way whatever the order: the last member added wins, as
// in the library). Names must be non-empty. An empty set yields a Built
// with no members.
func (r *Ring) Build(members []string) (*Built, error) {
	names := slices.Compact(slices.Sorted(slices.Values(members)))
	b := &Built{p: r.cfg.PartitionCount, names: names}
	if len(names) == 0 {
		return b, nil
	}
	if names[0] == "" {
		return nil, errors.New("ring: empty member name")
	}
	b.vn = buildRing(names, r.cfg.ReplicationFactor, xxhash.Sum64)
	return b, nil
}

// Members returns the member names, sorted and distinct: member index i is
// Members()[i]. The slice belongs to b and must not be modified.
func (b *Built) Members() []string { return b.names }

// PartitionCount is P, the length of every per-partition slice b takes or
// returns.
func (b *Built) PartitionCount() int { return b.p }

// Index returns the member index of name, or -1 if it is not a member.
func (b *Built) Index(name string) int {
	if i, ok := slices.BinarySearch(b.names, name); ok {
		return i
	}
	return -1
}

// Owners maps owner names (one per partition, "" for nobody; nil for
// nobody anywhere) to member indexes, -1 for nobody or a non-member: the
// current owners AssignFrom takes.
func (b *Built) Owners(current []string) []int32 {
	cur := make([]int32, b.p)
	for i := range cur {
		cur[i] = -1
		if i < len(current) {
			cur[i] = int32(b.Index(current[i]))
		}
	}
	return cur
}

// Prefer returns partition id's preference order as member indexes, first
// to last, each once: the order in which the ring's clockwise walk from the
// partition's hash meets the members' virtual nodes. Its first entry is the
// owner the library gives the partition when no member is full, and the
// member AssignFrom places an unowned partition on when it has room.
// Members whose every virtual node lost a hash collision are not in it.
func (b *Built) Prefer(id partition.ID) iter.Seq[int] {
	return func(yield func(int) bool) {
		if len(b.vn) == 0 {
			return
		}
		b.index()
		seen := make([]bool, len(b.names))
		left := b.onRing
		i := search(b.vn, xxPartitionHash(int(id)))
		for left > 0 {
			if m := b.vn[i].member; !seen[m] {
				seen[m] = true
				left--
				if !yield(int(m)) {
					return
				}
			}
			if i++; i == len(b.vn) {
				i = 0
			}
		}
	}
}

// Distance returns how far clockwise from partition id's hash member m's
// first virtual node lies. It orders the members as Prefer does (a smaller
// distance comes earlier in the walk) without walking, and it orders a
// member's partitions by how much it prefers them (AssignFrom keeps those of
// smallest distance when a member holds more than its quota). A member with
// no virtual node is at math.MaxUint64.
func (b *Built) Distance(m int, id partition.ID) uint64 {
	b.index()
	return distance(b.nodes[m], xxPartitionHash(int(id)))
}

// AssignFrom is Ring.AssignFrom restricted to some members and some
// partitions, over member indexes: the members with members[m] true (all
// when nil) share the partitions with parts[p] true (all when nil) by count
// quotas, each floor or ceil of their number over the members' number,
// keeping current owners (cur[p], -1 for nobody) within quota and placing the
// rest in preference order. Partitions outside parts, and all partitions
// when no member is left, are -1 in the result. An owner outside members
// counts as nobody. cur must have PartitionCount entries.
func (b *Built) AssignFrom(cur []int32, members, parts []bool) []int32 {
	if len(cur) != b.p {
		panic(fmt.Sprintf("ring: %d current owners for %d partitions", len(cur), b.p))
	}
	return place(b.vn, len(b.names), cur, members, parts)
}

// preference returns the names of a partition's preference order (Prefer)
// for a member set. The tests check the walk against the library with it.
func (r *Ring) preference(members []string, id partition.ID) []string {
	b, err := r.Build(members)
	if err != nil {
		return nil
	}
	var out []string
	for m := range b.Prefer(id) {
		out = append(out, b.names[m])
	}
	return out
}

// vnode is one virtual node: its position on the ring and the index of the
// member it belongs to.
type vnode struct {
	hash   uint64
	member int32
}

// buildRing returns the library's ring for names (sorted, distinct, in the
// order added): member m's virtual nodes hash "<i>:<name>" for i in [0, rf),
// sorted by hash; a hash shared by several virtual nodes belongs to the
// member added last (the library keeps them in a map, the last write wins)
// and appears once per virtual node.
//
// Built in one sort: consistent.New adds members one at a time and re-sorts
// the whole ring after each, O(N²·R·log(N·R)), which took 24 s for 1,000
// members and about 10 minutes for 5,000 at the default R.
func buildRing(names []string, rf int, sum64 func([]byte) uint64) []vnode {
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
	return ring
}

// partitionHash is the library's hash of partition p: its ID as 8 bytes,
// little-endian.
func partitionHash(p int, sum64 func([]byte) uint64) uint64 {
	var bs [8]byte
	binary.LittleEndian.PutUint64(bs[:], uint64(p))
	return sum64(bs[:])
}

// xxPartitionHash is partitionHash with xxhash, the ring's hash, called
// directly so that the buffer stays on the stack (one allocation per
// partition otherwise).
func xxPartitionHash(p int) uint64 {
	var bs [8]byte
	binary.LittleEndian.PutUint64(bs[:], uint64(p))
	return xxhash.Sum64(bs[:])
}

// search returns the index of the first virtual node at or after h,
// wrapping to 0, where the library's walk for hash h starts.
func search(ring []vnode, h uint64) int {
	idx, _ := slices.BinarySearchFunc(ring, h, func(v vnode, h uint64) int { return cmp.Compare(v.hash, h) })
	if idx >= len(ring) {
		idx = 0
	}
	return idx
}

// place computes AssignFrom over member indexes: n members (0..n-1, sorted
// by name), their ring, and the current owner of every partition (-1 for
// none or a non-member). memberIn and partIn, when not nil, restrict it to
// the members and partitions they mark (Built.AssignFrom); excluded
// partitions are -1 in the result. See AssignFrom for the rules.
func place(ring []vnode, n int, cur []int32, memberIn, partIn []bool) []int32 {
	// Members whose every virtual node lost a hash collision are not on the
	// ring: no walk reaches them, so they get no quota.
	onRing := make([]bool, n)
	for _, v := range ring {
		onRing[v.member] = memberIn == nil || memberIn[v.member]
	}
	p := 0
	held := make([]int, n)
	for i, m := range cur {
		if partIn != nil && !partIn[i] {
			continue
		}
		p++
		if m >= 0 && onRing[m] {
			held[m]++
		}
	}
	owner := make([]int32, len(cur))
	for i := range owner {
		owner[i] = -1
	}

	// 1. Quotas: floor(P/k) each, +1 for the P mod k members holding most.
	order := make([]int32, 0, n)
	for m := range n {
		if onRing[m] {
			order = append(order, int32(m))
		}
	}
	if len(order) == 0 || p == 0 {
		return owner
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(held[b], held[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b) // by name: indexes follow sorted names
	})
	quota := make([]int, n)
	base, extra := p/len(order), p%len(order)
	for i, m := range order {
		quota[m] = base
		if i < extra {
			quota[m]++
		}
	}

	// 2. Keep: owners within quota keep all; an owner above it keeps the
	// partitions it prefers most.
	load := make([]int, n)
	var over []int32
	for m := range n {
		if held[m] > quota[m] {
			over = append(over, int32(m))
		}
	}
	for i, m := range cur {
		if partIn != nil && !partIn[i] {
			continue
		}
		if m >= 0 && onRing[m] && held[m] <= quota[m] {
			owner[i] = m
			load[m]++
		}
	}
	if len(over) > 0 {
		keepPreferred(ring, over, quota, cur, owner, load, partIn)
	}

	// 3. Place the rest, in ID order, at the first member with room.
	for i := range owner {
		if owner[i] >= 0 || (partIn != nil && !partIn[i]) {
			continue
		}
		idx := search(ring, xxPartitionHash(i))
		for {
			if m := ring[idx].member; load[m] < quota[m] {
				owner[i] = m
				load[m]++
				break
			}
			// Terminates: the quotas add up to the partitions placed here
			// and fewer than that are placed, so some member on the ring
			// has room.
			if idx++; idx == len(ring) {
				idx = 0
			}
		}
	}
	return owner
}

// memberNodes returns, for each member m of 0..n-1 that include marks (all
// when nil), the hashes of its virtual nodes ascending, nil for the others:
// what distance measures against.
func memberNodes(ring []vnode, n int, include []bool) [][]uint64 {
	count := make([]int, n)
	total := 0
	for _, v := range ring {
		if include == nil || include[v.member] {
			count[v.member]++
			total++
		}
	}
	flat := make([]uint64, total)
	out := make([][]uint64, n)
	off := 0
	for m, c := range count {
		out[m] = flat[off : off : off+c]
		off += c
	}
	for _, v := range ring { // ascending by hash, so each member's list is too
		if include == nil || include[v.member] {
			out[v.member] = append(out[v.member], v.hash)
		}
	}
	return out
}

// distance is how far clockwise from hash h the first of a member's virtual
// nodes (vs, ascending) lies; unsigned subtraction wraps around the ring.
// The walk from h meets members in increasing distance. math.MaxUint64 for
// a member with no virtual node.
func distance(vs []uint64, h uint64) uint64 {
	if len(vs) == 0 {
		return math.MaxUint64
	}
	j, _ := slices.BinarySearch(vs, h)
	if j == len(vs) {
		j = 0
	}
	return vs[j] - h
}

// keepPreferred gives each member in over (holding more than its quota) the
// quota[m] partitions of cur it prefers most: those whose hash is closest
// (clockwise) before one of its virtual nodes (distance), ties by partition
// ID. The others stay unassigned (-1 in owner) for placement. Partitions
// outside partIn (when not nil) are not considered.
func keepPreferred(ring []vnode, over []int32, quota []int, cur, owner []int32, load []int, partIn []bool) {
	slot := make([]int32, len(quota)) // member → index in over, or -1
	isOver := make([]bool, len(quota))
	for m := range slot {
		slot[m] = -1
	}
	for i, m := range over {
		slot[m] = int32(i)
		isOver[m] = true
	}
	// Each over-quota member's virtual nodes, ascending by hash.
	nodes := memberNodes(ring, len(quota), isOver)
	type cand struct {
		dist uint64
		p    int
	}
	held := make([][]cand, len(over))
	for p, m := range cur {
		if m < 0 || slot[m] < 0 || (partIn != nil && !partIn[p]) {
			continue
		}
		i := slot[m]
		held[i] = append(held[i], cand{dist: distance(nodes[m], xxPartitionHash(p)), p: p})
	}
	for i, m := range over {
		cs := held[i]
		slices.SortFunc(cs, func(a, b cand) int {
			if c := cmp.Compare(a.dist, b.dist); c != 0 {
				return c
			}
			return cmp.Compare(a.p, b.p)
		})
		for _, c := range cs[:quota[m]] {
			owner[c.p] = m
			load[m]++
		}
	}
}

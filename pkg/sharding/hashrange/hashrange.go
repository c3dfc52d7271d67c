package hashrange

import (
	"fmt"
	"hash/fnv"
	"sort"

	"k8s.io/apimachinery/pkg/sharding"
)

// NamespaceKey is the field path the ranges select on.
const NamespaceKey = "object.metadata.namespace"

const (
	// DefaultMaxRanges is the default bound on the ranges of one selector.
	DefaultMaxRanges = 500
	// MaxRanges is the largest bound accepted: 1,000 ranges are about 85 KB of CEL,
	// under the apiserver's limit of 100,000 code points (about 1,170 ranges).
	MaxRanges = 1000
)

// Hash is the FNV-1a hash of a namespace name, as KEP-5866 computes it.
func Hash(namespace string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace))
	return h.Sum64()
}

// Range is the closed interval [Lo, Hi] of hashes; on the wire it is [Lo, Hi+1).
type Range struct {
	Lo, Hi uint64
}

// Contains reports whether h is in r.
func (r Range) Contains(h uint64) bool { return r.Lo <= h && h <= r.Hi }

// Set is the result of Build: sorted, disjoint ranges.
type Set struct {
	Ranges []Range
	// Owned is the number of owned namespaces; Foreign the number of known namespaces
	// that are not owned but fall in a range (covered but not owned).
	Owned, Foreign int
}

// Build returns at most maxRanges ranges (DefaultMaxRanges if maxRanges <= 0, capped at
// MaxRanges) covering the hash of every name for which owned is true. names are every
// known namespace; the ranges are chosen so that as few of the others as possible are
// covered. Duplicate names are ignored. Owning nothing gives no range.
func Build(names []string, owned func(string) bool, maxRanges int) Set {
	if maxRanges <= 0 {
		maxRanges = DefaultMaxRanges
	}
	maxRanges = min(maxRanges, MaxRanges)
	return buildSorted(hashPoints(names, owned), maxRanges)
}

// point is one known namespace: its hash and whether it is owned.
type point struct {
	h     uint64
	owned bool
}

// hashPoints hashes names (duplicates ignored) and sorts them by hash, owned first among
// equal hashes: a hash shared by an owned and a foreign name must be covered, and the
// foreign name counts as covered.
func hashPoints(names []string, owned func(string) bool) []point {
	pts := make([]point, 0, len(names))
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		pts = append(pts, point{h: Hash(n), owned: owned(n)})
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].owned && !pts[j].owned
	})
	return pts
}

// buildSorted is Build over points sorted by hashPoints, with maxRanges already bounded.
func buildSorted(pts []point, maxRanges int) Set {
	var set Set
	// runs and the foreign namespaces in the gap before each run (gaps[0] unused).
	var runs []Range
	var gaps []int
	foreign := 0
	for i := 0; i < len(pts); i++ {
		p := pts[i]
		if !p.owned {
			if n := len(runs); n > 0 && runs[n-1].Hi == p.h {
				set.Foreign++ // same hash as an owned namespace: covered
				continue
			}
			foreign++
			continue
		}
		set.Owned++
		if n := len(runs); n > 0 && foreign == 0 {
			runs[n-1].Hi = p.h
			continue
		}
		runs = append(runs, Range{Lo: p.h, Hi: p.h})
		gaps = append(gaps, foreign)
		foreign = 0
	}
	if len(runs) > maxRanges {
		// Close the len(runs)-maxRanges gaps with the fewest foreign namespaces (ties:
		// the lower gap first, for determinism).
		idx := make([]int, 0, len(runs)-1)
		for i := 1; i < len(runs); i++ {
			idx = append(idx, i)
		}
		sort.SliceStable(idx, func(a, b int) bool { return gaps[idx[a]] < gaps[idx[b]] })
		closed := make([]bool, len(runs))
		for _, i := range idx[:len(runs)-maxRanges] {
			closed[i] = true
			set.Foreign += gaps[i]
		}
		merged := runs[:0:0]
		for i, r := range runs {
			if closed[i] {
				merged[len(merged)-1].Hi = r.Hi
				continue
			}
			merged = append(merged, r)
		}
		runs = merged
	}
	set.Ranges = runs
	return set
}

// Covers reports whether namespace's hash is in one of the set's ranges.
func (s Set) Covers(namespace string) bool {
	return s.CoversHash(Hash(namespace))
}

// CoversHash reports whether h is in one of the set's ranges.
func (s Set) CoversHash(h uint64) bool {
	i := sort.Search(len(s.Ranges), func(i int) bool { return s.Ranges[i].Hi >= h })
	return i < len(s.Ranges) && s.Ranges[i].Lo <= h
}

// Requirements returns the ranges as KEP-5866 requirements on object.metadata.namespace.
func (s Set) Requirements() []sharding.ShardRangeRequirement {
	out := make([]sharding.ShardRangeRequirement, 0, len(s.Ranges))
	for _, r := range s.Ranges {
		out = append(out, sharding.ShardRangeRequirement{Key: NamespaceKey, Start: hex(r.Lo), End: end(r.Hi)})
	}
	return out
}

// Selector returns the set as a sharding.Selector. An empty set must match nothing, but
// sharding.NewSelector() of no requirement matches everything, and the apiserver refuses
// an empty range ("start must be less than end"): it is then Nothing.
func (s Set) Selector() sharding.Selector {
	if len(s.Ranges) == 0 {
		return sharding.NewSelector(Nothing())
	}
	return sharding.NewSelector(s.Requirements()...)
}

// String is the wire form of Selector (ListOptions.ShardSelector).
func (s Set) String() string { return s.Selector().String() }

// nothingName is not a valid namespace name (no namespace is called so).
const nothingName = "kshard:no-namespace"

// Nothing is a requirement that, in practice, no namespace satisfies: the one hash of a
// name no namespace can have, [Hash(nothingName), Hash(nothingName)+1). A namespace whose
// hash collides (odds 2^-64 each) is merely sent to a shard that drops it.
func Nothing() sharding.ShardRangeRequirement {
	h := Hash(nothingName)
	return sharding.ShardRangeRequirement{Key: NamespaceKey, Start: hex(h), End: end(h)}
}

func hex(v uint64) string { return fmt.Sprintf("0x%016x", v) }

// end is the exclusive bound after hi: 2^64 after the last hash.
func end(hi uint64) string {
	if hi == ^uint64(0) {
		return "0x10000000000000000"
	}
	return hex(hi + 1)
}

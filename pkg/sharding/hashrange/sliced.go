package hashrange

import (
	"slices"
	"sort"
)

// MaxSliceBits bounds Sliced.Bits: at most 2^6 = 64 slices, i.e. 64 watches per resource.
const MaxSliceBits = 6

// Sliced is a selector split over 2^Bits equal slices of the hash space, one Set per
// slice: slice i holds the hashes whose Bits top bits are i, and its ranges lie inside
// it. One selector holds about 1,170 ranges at most, so a shard that owns thousands of
// scattered namespaces cannot name them exactly in one; in 2^Bits selectors of up to
// maxRanges each, one watch per slice, it can. Each namespace belongs to exactly one
// slice, so the events of a namespace come through one watch, in order.
type Sliced struct {
	Bits   int
	Slices []Set
	// Owned is the number of owned namespaces; Foreign the number of known namespaces
	// that are not owned but covered, over every slice.
	Owned, Foreign int
}

// SliceOf returns the slice of hash h.
func SliceOf(h uint64, bits int) int {
	if bits == 0 {
		return 0
	}
	return int(h >> (64 - bits))
}

// SliceOf returns the slice namespace's hash falls in.
func (s Sliced) SliceOf(namespace string) int { return SliceOf(Hash(namespace), s.Bits) }

// Covers reports whether namespace's hash is in one of the ranges of its slice.
func (s Sliced) Covers(namespace string) bool {
	if len(s.Slices) == 0 {
		return false
	}
	h := Hash(namespace)
	return s.Slices[SliceOf(h, s.Bits)].CoversHash(h)
}

// Ranges returns the number of ranges over every slice.
func (s Sliced) Ranges() int {
	n := 0
	for _, set := range s.Slices {
		n += len(set.Ranges)
	}
	return n
}

// Strings returns the wire form of every slice's selector (Set.String), in slice order.
func (s Sliced) Strings() []string {
	out := make([]string, len(s.Slices))
	for i, set := range s.Slices {
		out[i] = set.String()
	}
	return out
}

// SameSlice reports whether slice i of s and of o have the same ranges (false if either
// has no slice i).
func (s Sliced) SameSlice(o Sliced, i int) bool {
	return s.Bits == o.Bits && i < len(s.Slices) && i < len(o.Slices) &&
		slices.Equal(s.Slices[i].Ranges, o.Slices[i].Ranges)
}

// BuildSliced returns the selector of the owned names split over the fewest slices,
// 2^minBits to 2^maxBits (maxBits at most MaxSliceBits), in which every slice needs at
// most maxRanges ranges to cover its owned names exactly; with 2^maxBits slices still too
// few, slices whose owned names need more ranges are covered by a superset as Build
// does. minBits lets a caller keep the slices it has (a watch per slice) when fewer would
// do. maxRanges as Build's.
func BuildSliced(names []string, owned func(string) bool, maxRanges, minBits, maxBits int) Sliced {
	if maxRanges <= 0 {
		maxRanges = DefaultMaxRanges
	}
	maxRanges = min(maxRanges, MaxRanges)
	maxBits = max(0, min(maxBits, MaxSliceBits))
	minBits = max(0, min(minBits, maxBits))
	pts := hashPoints(names, owned)
	bits := minBits
	for bits < maxBits && maxExactRuns(pts, bits) > maxRanges {
		bits++
	}
	out := Sliced{Bits: bits, Slices: make([]Set, 1<<bits)}
	lo := 0
	for i := range out.Slices {
		hi := lo + sort.Search(len(pts)-lo, func(j int) bool { return SliceOf(pts[lo+j].h, bits) > i })
		set := buildSorted(pts[lo:hi], maxRanges)
		out.Slices[i] = set
		out.Owned += set.Owned
		out.Foreign += set.Foreign
		lo = hi
	}
	return out
}

// maxExactRuns returns the most ranges one slice of 2^bits needs to cover its owned
// points exactly: the maximal runs of owned points within the slice.
func maxExactRuns(pts []point, bits int) int {
	most, runs, slice := 0, 0, -1
	inRun := false
	for _, p := range pts {
		if s := SliceOf(p.h, bits); s != slice {
			most = max(most, runs)
			runs, slice, inRun = 0, s, false
		}
		switch {
		case p.owned && !inRun:
			runs++
			inRun = true
		case !p.owned:
			inRun = false
		}
	}
	return max(most, runs)
}

package shardcache

import (
	"github.com/kshard/kshard/pkg/sharding/hashrange"
)

// stream is the position of one of a feed's upstream streams. In ModeServerFilter a
// feed merges one upstream watch per slice of the selector's hash space
// (hashrange.Sliced), because one selector cannot name thousands of scattered
// namespaces exactly; in ModeClientFilter it has one. A namespace's events come
// through exactly one stream, in resourceVersion order; the streams are not ordered
// against each other, so each keeps its own position.
type stream struct {
	// hwm is the newest resourceVersion of the stream that the feed has accounted for
	// (queued, buffered or dropped); 0 when unknown. The stream's upstream events at or
	// below it are duplicates of a restarted watch, and its new watches resume from it.
	hwm uint64
	// initialDone: during a watch-list relist, the stream has sent its
	// initial-events-end bookmark.
	initialDone bool
}

// sliceBits returns the number of slice bits of cov's selector (0: one stream).
func sliceBits(cov *coverage) int {
	if cov == nil {
		return 0
	}
	return cov.set.Bits
}

// resetStreamsLocked starts the streams afresh, one per slice of cov (a relist).
func (f *feed) resetStreamsLocked(cov *coverage) {
	f.bits = sliceBits(cov)
	f.streams = make([]stream, 1<<f.bits)
}

// splitStreamsLocked splits every stream into the finer slices of the selector in force,
// each inheriting its parent's position: reopened from there with the new slices'
// selectors, the new streams together carry everything the parent would have. The
// selector's slices never get coarser (the filter keeps their number), so streams are
// never merged.
func (f *feed) splitStreamsLocked() {
	bits := sliceBits(f.cov)
	if bits <= f.bits {
		return
	}
	shift := bits - f.bits
	split := make([]stream, 1<<bits)
	for i := range split {
		split[i] = f.streams[i>>shift]
	}
	f.bits, f.streams = bits, split
}

// sliceOfLocked returns the index of the stream that carries namespace's events.
func (f *feed) sliceOfLocked(namespace string) int {
	return hashrange.SliceOf(hashrange.Hash(namespace), f.bits)
}

// positionKnownLocked reports whether every stream's position is known (it is not
// during a relist).
func (f *feed) positionKnownLocked() bool {
	for _, s := range f.streams {
		if s.hwm == 0 {
			return false
		}
	}
	return len(f.streams) > 0
}

// newestLocked returns the newest position of the streams: the resourceVersion synthetic
// bookmarks carry, so that the reflector's and the store's resourceVersion do not stay at
// an injected object's older one.
func (f *feed) newestLocked() uint64 {
	var n uint64
	for _, s := range f.streams {
		n = max(n, s.hwm)
	}
	return n
}

// oldestLocked returns the oldest position of the streams: the resourceVersion a relist
// completes at. Every later event of any stream is newer than it, so the store's
// resourceVersion stays at or above it from the relist's Replace on.
func (f *feed) oldestLocked() uint64 {
	var o uint64
	for i, s := range f.streams {
		if i == 0 || s.hwm < o {
			o = s.hwm
		}
	}
	return o
}

// positionsLocked returns every stream's high-water mark.
func (f *feed) positionsLocked() []uint64 {
	out := make([]uint64, len(f.streams))
	for i, s := range f.streams {
		out[i] = s.hwm
	}
	return out
}

// allInitialDoneLocked reports whether every stream of a watch-list relist has sent its
// initial events.
func (f *feed) allInitialDoneLocked() bool {
	for _, s := range f.streams {
		if !s.initialDone {
			return false
		}
	}
	return true
}

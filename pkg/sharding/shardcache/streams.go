package shardcache

// The upstream streams of a feed, and the selector they are opened with. In
// ModeServerFilter a feed merges one upstream watch per slice of the selector's hash
// space (one selector cannot name thousands of scattered namespaces); otherwise one. It
// keeps:
//   - A namespace's events come through exactly one stream (sliceOfLocked), in
//     resourceVersion order; the streams are not ordered against each other, so each
//     keeps its own position (hwm) and every watch resumes each from its own.
//   - Streams only split (splitStreamsLocked), each child starting at its parent's
//     position; they are never merged, as the selector's slices never get coarser.
//   - The upstream of a changed slice is reopened from its stream's position with the new
//     selector (staleUpstreams, reopenSpec) only while no relist runs and every position
//     is known (canReopenLocked). From the change on, the old upstream's events are not
//     accounted for, so the reopened watch delivers them again if they match.
//   - A warm-up lists a namespace only once the selector in force covers it and no relist
//     runs (covers, coversAll): the list is then at or above the point from which the
//     stream carries the namespace, and no event falls between the two.
//   - A relist completes at the oldest stream's position (oldestLocked); synthetic
//     bookmarks carry the newest (newestLocked).

import (
	"strconv"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// streamState is the streams part of a feed's state (guarded by feed.mu).
type streamState struct {
	// streams are the upstream streams the feed merges, 2^bits of them: one per slice of
	// the selector's hash space in ModeServerFilter, one otherwise.
	bits    int
	streams []stream
	// cov is the server-side selector the feed's streams use from their high-water marks
	// on (ModeServerFilter; nil otherwise). When a slice of it changes, that slice's
	// running upstream watch stops being read (its events are not accounted for, so the
	// stream's hwm stays where the change happened) and is reopened from hwm with the new
	// selector: every upstream event after hwm that matches cov reaches the feed.
	cov *coverage
}

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

// setCoverage hands the feed a new selector. The running watch instance notices it
// (stale, see accept) and reopens the upstreams of the slices that changed from their
// streams' high-water marks.
func (f *feed) setCoverage(cov *coverage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cov != nil && f.cov.gen >= cov.gen {
		return
	}
	f.cov = cov
	f.wakeLocked()
}

// canReopenLocked reports whether upstreams may be reopened with a new selector now: the
// streams are past any relist (a relist's streams keep their selector to its end) and
// their positions are known.
func (f *feed) canReopenLocked() bool {
	return f.cov != nil && !f.initial && !f.listing && f.positionKnownLocked()
}

// staleLocked reports whether the upstream of stream k, opened for bits slice bits and
// slice generation covGen, must be reopened before it accounts for anything more.
func (f *feed) staleLocked(k, bits int, covGen uint64) bool {
	return f.canReopenLocked() && (f.cov.set.Bits != bits || f.cov.gens[k] != covGen)
}

// covers reports whether the feed's streams carry every event of namespace from now
// on: the selector covers it, and no relist (whose list or initial events might not
// have had it) is running. A warm-up of namespace must list only then, so that the list
// and the stream leave no gap.
func (f *feed) covers(namespace string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filter == nil {
		return true
	}
	return f.canReopenLocked() && f.cov.set.Covers(namespace)
}

// staleUpstreams returns the streams whose upstream watch instance gen (opened for bits
// slice bits, with slice generations covGens) must reopen now, splitting the streams
// first if the selector has more slices (then every stream reopens, and the instance
// must take the new bits). alive is false once gen has been retired.
func (f *feed) staleUpstreams(gen uint64, bits int, covGens []uint64) (stale []int, newBits int, alive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return nil, bits, false
	}
	if !f.canReopenLocked() {
		return nil, bits, true
	}
	f.splitStreamsLocked()
	if f.bits != bits {
		stale = make([]int, len(f.streams))
		for k := range stale {
			stale[k] = k
		}
		return stale, f.bits, true
	}
	for k, g := range covGens {
		if f.cov.gens[k] != g {
			stale = append(stale, k)
		}
	}
	return stale, bits, true
}

// reopenSpec returns how to open the upstream replacing stream k's stale one of watch
// instance gen: from the stream's high-water mark, with the current selector; ok is false
// once gen has been retired.
func (f *feed) reopenSpec(gen uint64, k int, base metav1.ListOptions) (upstreamSpec, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen || k >= len(f.streams) || f.cov == nil {
		return upstreamSpec{}, false
	}
	base.ResourceVersion = strconv.FormatUint(f.streams[k].hwm, 10)
	base.ResourceVersionMatch = ""
	base.SendInitialEvents = nil
	base.ShardSelector = f.cov.sels[k]
	return upstreamSpec{opts: base, covGen: f.cov.gens[k]}, true
}

package shardcache

// ModeServerFilter's selector (serverFilter): computed from the Namespace informer and
// admission, handed to every feed. It keeps:
//   - The selector covers every known namespace of an admitted partition, and every
//     namespace a warm-up waits to see covered (need): a superset at worst, as the feeds'
//     own filter stays authoritative.
//   - Its slices never get coarser (a feed can split its streams, not merge them).
//   - Its generation grows with every change, and each slice keeps the generation at which
//     its ranges last changed, so only the watches of changed slices reopen.
//   - Growing is debounced (a burst of namespaces or Prepares costs one restart);
//     shrinking waits until the covered namespaces not owned outnumber the owned ones.
//   - Cache.mu is never taken under s.mu.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// DefaultSelectorDebounce is Options.SelectorDebounce's default.
const DefaultSelectorDebounce = 500 * time.Millisecond

// prepareDebounce is the debounce of a recomputation that a Prepare asks for: a
// partition handed over waits for it (its warm-up lists only once covered), and the
// coordinator grants a shard's partitions in one burst of tens of milliseconds.
const prepareDebounce = 100 * time.Millisecond

// coverage is one server-side selector, split into slices of the hash space (one watch
// per slice and resource): the ranges, each slice's wire form, a generation that grows
// with every change, and per slice the generation at which its ranges last changed (only
// the watches of changed slices are reopened).
type coverage struct {
	set  hashrange.Sliced
	sels []string
	gens []uint64
	gen  uint64
}

// newCoverage returns generation gen of the selector set, keeping prev's slice
// generations for the slices that did not change.
func newCoverage(set hashrange.Sliced, prev *coverage, gen uint64) *coverage {
	cov := &coverage{set: set, sels: set.Strings(), gens: make([]uint64, len(set.Slices)), gen: gen}
	for i := range cov.gens {
		cov.gens[i] = gen
		if prev != nil && prev.set.SameSlice(set, i) {
			cov.gens[i] = prev.gens[i]
		}
	}
	return cov
}

// unchanged reports whether set has the same slices and ranges as cov.
func (cov *coverage) unchanged(set hashrange.Sliced) bool {
	if cov == nil || cov.set.Bits != set.Bits {
		return false
	}
	for i := range set.Slices {
		if !cov.set.SameSlice(set, i) {
			return false
		}
	}
	return true
}

// serverFilter computes the shardRange selector of ModeServerFilter and hands it to the
// feeds. The selector covers every known namespace of an admitted partition (a superset:
// the feeds' own filter stays authoritative). It grows when Prepare admits partitions or
// when a namespace of an admitted partition appears outside it: requests are debounced
// (Options.SelectorDebounce) so that a burst of namespaces costs one watch restart. It
// shrinks lazily: after Release, only once the covered namespaces that are not owned
// outnumber the owned ones.
type serverFilter struct {
	c         *Cache
	maxRanges int
	// maxBits bounds the selector's slices (2^maxBits watches per resource).
	maxBits  int
	debounce time.Duration

	cur atomic.Pointer[coverage]

	mu          sync.Mutex // serialises computations and guards the fields below
	gen         uint64
	want        map[string]struct{} // namespaces a warm-up waits to see covered
	timer       *time.Timer
	first, last time.Time
	// grow: a pending request must grow the coverage; without it the timer only
	// shrinks the selector if too many covered namespaces are not owned.
	grow bool
	// quiet is the shortest debounce of the pending requests.
	quiet time.Duration

	warnOnce sync.Once
	// ignored is set once a list response showed that the apiserver ignored the selector.
	ignored atomic.Bool
}

func newServerFilter(c *Cache, maxRanges, maxBits int, debounce time.Duration) *serverFilter {
	return &serverFilter{c: c, maxRanges: maxRanges, maxBits: maxBits, debounce: debounce, want: map[string]struct{}{}}
}

// current returns the selector in force (nil before the first computation).
func (s *serverFilter) current() *coverage { return s.cur.Load() }

// request asks for a recomputation, debounced: it happens once no request has come for
// the debounce interval, at the latest four intervals after the first.
func (s *serverFilter) request() { s.schedule(true, s.debounce) }

// prepared asks for a recomputation after Prepare admitted partitions, with the shorter
// of prepareDebounce and the debounce interval.
func (s *serverFilter) prepared() { s.schedule(true, min(s.debounce, prepareDebounce)) }

func (s *serverFilter) schedule(grow bool, quiet time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grow = s.grow || grow
	now := time.Now()
	s.last = now
	if s.timer != nil {
		if quiet < s.quiet {
			s.quiet = quiet
			s.timer.Reset(quiet)
		}
		return
	}
	s.first = now
	s.quiet = quiet
	s.timer = time.AfterFunc(quiet, s.fire)
}

func (s *serverFilter) fire() {
	s.mu.Lock()
	if s.timer == nil {
		s.mu.Unlock()
		return
	}
	if wait := untilQuiet(time.Now(), s.first, s.last, s.quiet, 4*s.quiet); wait > 0 {
		s.timer.Reset(wait)
		s.mu.Unlock()
		return
	}
	s.timer = nil
	grow := s.grow
	s.grow = false
	s.mu.Unlock()
	if !grow {
		if foreign, owned := s.coveredNotOwned(); foreign <= owned {
			return
		}
	}
	s.recompute()
}

// need records that a warm-up waits for namespace to be covered, and requests a
// recomputation: the namespace is covered even if the Namespace informer does not know
// it (yet, or any more).
func (s *serverFilter) need(namespace string) {
	s.mu.Lock()
	_, had := s.want[namespace]
	s.want[namespace] = struct{}{}
	s.mu.Unlock()
	if !had {
		s.request()
	}
}

// fresh recomputes the selector now, once the Namespace informer has synced, and returns
// it: a relist's list must cover every namespace admitted so far.
func (s *serverFilter) fresh(ctx context.Context) (*coverage, error) {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.c.nsInformer.HasSynced) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("shardcache: the Namespace informer did not sync")
	}
	return s.recompute(), nil
}

// recompute builds the selector from the Namespace informer and admission, and hands it
// to every feed if it changed.
func (s *serverFilter) recompute() *coverage {
	logger := s.c.logger() // before s.mu: the cache's lock is never taken under it
	s.mu.Lock()
	names := s.c.nsInformer.GetIndexer().ListKeys()
	for ns := range s.want {
		names = append(names, ns)
	}
	cov := s.cur.Load()
	// The slices never get coarser: a feed splits its streams, it cannot merge them.
	set := hashrange.BuildSliced(names, s.c.adm.namespaceAdmitted, s.maxRanges, sliceBits(cov), s.maxBits)
	for ns := range s.want {
		if set.Covers(ns) || !s.c.adm.namespaceAdmitted(ns) {
			delete(s.want, ns)
		}
	}
	if !cov.unchanged(set) {
		s.gen++
		cov = newCoverage(set, cov, s.gen)
		s.cur.Store(cov)
		logger.V(2).Info("Shard selector computed", "ranges", set.Ranges(), "slices", len(set.Slices),
			"ownedNamespaces", set.Owned, "foreignNamespaces", set.Foreign, "generation", cov.gen)
	}
	s.mu.Unlock()
	for _, f := range s.c.feedList() {
		f.setCoverage(cov)
	}
	return cov
}

// coveredNotOwned counts the known namespaces that the selector in force covers but
// whose partition is not admitted, and the owned ones.
func (s *serverFilter) coveredNotOwned() (foreign, owned int) {
	cov := s.current()
	if cov == nil {
		return 0, 0
	}
	for _, ns := range s.c.nsInformer.GetIndexer().ListKeys() {
		if s.c.adm.namespaceAdmitted(ns) {
			owned++
		} else if cov.set.Covers(ns) {
			foreign++
		}
	}
	return foreign, owned
}

// released shrinks the selector, lazily: the debounced check recomputes it only once the
// covered namespaces that are not owned outnumber the owned ones (a superset is
// harmless, a restart is not free).
func (s *serverFilter) released() { s.schedule(false, s.debounce) }

// checkShardInfo logs, once, that the apiserver ignored the selector: a filtered list
// response carries metadata.shardInfo. The feeds' own filter still holds.
func (s *serverFilter) checkShardInfo(logger klog.Logger, list runtime.Object) {
	if l, ok := list.(interface{ GetShardInfo() *metav1.ShardInfo }); ok && l.GetShardInfo() != nil {
		return
	}
	s.ignored.Store(true)
	s.warnOnce.Do(func() {
		logger.Info("WARNING: the apiserver ignored the shard selector (no metadata.shardInfo in a list response): " +
			"it needs the ShardedListAndWatch feature gate. The shard filters every object itself, so it is correct, " +
			"but receives the whole cluster's objects.")
	})
}

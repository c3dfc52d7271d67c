package shardcache

// The list path: the reflector's relists, and the paged lists that warm-ups use.
//
// A relist (ListWithContext's first page, or a watch-list stream: WatchWithContext with
// SendInitialEvents) starts a new epoch (resetLocked). It keeps:
//   - Nothing queued, buffered or floored before it survives it: its Replace supersedes the
//     whole store, and the warm-ups begun before it are covered by it (it is filtered with
//     their partitions admitted), so they end subsumed instead of being merged.
//   - The shadow holds exactly what it returns, the very objects (items are RawExtensions,
//     which the reflector stores as they are).
//   - It returns objects of admitted namespaces only; a sliced relist checks again under
//     f.mu, so that a Release meanwhile, which computed its deletes from the shadow, does
//     not get its objects back.
//   - Each stream's position is where its own list ended; the relist completes at the
//     oldest of them (relistRV), and listedAt keeps them all (applied.go).
//   - While it runs (listing, initial), no warm-up is merged (merge.go) and no selector
//     change reopens a stream (streams.go).
//   - A probe (an exact-resourceVersion list of the watch-list consistency detector)
//     changes nothing.
//
// A paged list (listPages) is at one consistent resourceVersion, its first page's: an
// expired continue token restarts it from the first page, after listRestartBackoff.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// listState is the relist part of a feed's state (guarded by feed.mu).
type listState struct {
	// epoch counts relists. A warm-up that began in an older epoch is subsumed by the
	// relist: the relist was filtered with its partition admitted.
	epoch uint64
	// listing is true between the start and the end of a relist (all pages of a list, or
	// a watch-list stream up to its initial-events-end bookmark).
	listing bool
	// initial is true while the current watch is a watch-list stream that has not yet
	// sent its initial-events-end bookmark.
	initial bool
	// relistRV is the resourceVersion of the last completed relist.
	relistRV string
	// listedAt are the streams' positions when the last relist completed (applied.go).
	listedAt []uint64
	// listCov is the selector of the relist in progress: every page of every slice's
	// list uses it.
	listCov *coverage
}

// ListWithContext is the reflector's (re)list: a cluster-wide list, filtered by admission.
// The first page starts a new epoch: queued events, buffers and floors are discarded
// because the Replace that follows supersedes them. In ModeServerFilter with a selector of
// several slices, every slice is listed (page by page) within this one call, and each
// slice's list sets its stream's position (listSlices).
func (f *feed) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	// The watch-list consistency detector (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR) lists at
	// an exact resourceVersion to compare with the streamed data: serve it without
	// touching the feed's state.
	probe := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact
	if opts.Continue == "" && !probe {
		f.retireActive()
		f.mu.Lock()
		f.resetLocked()
		f.mu.Unlock()
		// After the reset: the fresh selector covers every warm-up the relist subsumes.
		cov, err := f.freshCoverage(ctx)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.listCov = cov
		f.resetStreamsLocked(cov)
		f.mu.Unlock()
	}
	f.mu.Lock()
	cov := f.listCov
	f.mu.Unlock()
	sliced := sliceBits(cov) > 0
	switch {
	case sliced && !probe:
		return f.listSlices(ctx, opts, cov)
	case cov == nil || sliced:
		// One exact-resourceVersion list cannot span the slices' selectors: the probe
		// lists unfiltered, and the admission filter below does the work.
		opts.ShardSelector = ""
	default:
		opts.ShardSelector = cov.sels[0]
	}
	list, err := f.rt.List(ctx, f.client, "", opts)
	f.counters.clusterLists.Add(1)
	if err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	if opts.ShardSelector != "" {
		f.filter.checkShardInfo(f.logger, list)
	}
	out := &metav1.List{ListMeta: metav1.ListMeta{
		ResourceVersion: lm.GetResourceVersion(),
		Continue:        lm.GetContinue(),
	}}

	f.mu.Lock()
	defer f.mu.Unlock()
	err = meta.EachListItem(list, func(o runtime.Object) error {
		key, name, ok := objectKeys(o)
		if !ok || !f.adm.namespaceAdmitted(key) {
			f.counters.dropped.Add(1)
			return nil
		}
		c := shallowCopy(o)
		_, _ = StripManagedFields(c)
		if !probe {
			f.shadowPutLocked(key, name, c)
		}
		out.Items = append(out.Items, runtime.RawExtension{Object: c})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !probe && lm.GetContinue() == "" {
		f.streams[0].hwm, _ = parseRV(lm.GetResourceVersion())
		f.listedLocked(lm.GetResourceVersion())
	}
	// The items are returned as RawExtensions so that the reflector stores the very
	// objects the shadow references (meta.ExtractListWithAlloc keeps .Object pointers).
	return out, nil
}

// listSlices is a relist over a selector of several slices: each slice's list, complete,
// sets its stream's position, and the reflector receives one list (no continue token: a
// pager that falls back to an unpaged list on an expired token would otherwise stop
// after the first slice). Its resourceVersion is the oldest of the slices'.
func (f *feed) listSlices(ctx context.Context, opts metav1.ListOptions, cov *coverage) (runtime.Object, error) {
	out := &metav1.List{}
	positions := make([]uint64, len(cov.sels))
	for k, sel := range cov.sels {
		o := opts
		o.ShardSelector = sel
		items, rv, err := f.listPages(ctx, "", o, f.admittedCounting, &f.counters.clusterLists, func(list runtime.Object) {
			f.filter.checkShardInfo(f.logger, list)
		})
		if err != nil {
			return nil, err
		}
		positions[k], _ = parseRV(rv)
		for _, o := range items {
			out.Items = append(out.Items, runtime.RawExtension{Object: o})
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) != len(positions) || f.listCov != cov {
		return nil, fmt.Errorf("shardcache: %s relist superseded while listing", f.rt.Name())
	}
	// Admission again, under the lock: a Release meanwhile computed its deletes from the
	// shadow, which must not take its objects back.
	kept := out.Items[:0]
	for _, item := range out.Items {
		key, name, _ := objectKeys(item.Object)
		if !f.adm.namespaceAdmitted(key) {
			continue
		}
		f.shadowPutLocked(key, name, item.Object)
		kept = append(kept, item)
	}
	out.Items = kept
	for k, rv := range positions {
		f.streams[k].hwm = rv
	}
	out.ResourceVersion = strconv.FormatUint(f.oldestLocked(), 10)
	f.listedLocked(out.ResourceVersion)
	return out, nil
}

// admittedCounting is admission that counts what it drops.
func (f *feed) admittedCounting(namespace string) bool {
	if f.adm.namespaceAdmitted(namespace) {
		return true
	}
	f.counters.dropped.Add(1)
	return false
}

// listedLocked completes a classic relist at resourceVersion rv.
func (f *feed) listedLocked(rv string) {
	f.listing = false
	f.relistRV = rv
	f.listedAt = f.positionsLocked()
	if f.needBookmark {
		f.needBookmark = false
		f.appendBookmarkLocked()
	}
	f.logger.V(4).Info("Relisted", "resourceVersion", f.relistRV, "epoch", f.epoch, "streams", len(f.streams))
}

// resetLocked starts a relist: everything queued, buffered or floored is superseded by
// the relist, which is filtered with the current admission.
func (f *feed) resetLocked() {
	f.gen++
	f.epoch++
	f.listing = true
	f.initial = false
	f.resetStreamsLocked(f.cov)
	f.relistRV = ""
	f.listedAt = nil
	f.shadow = map[string]map[string]runtime.Object{}
	for i := range f.outq {
		f.outq[i] = watch.Event{}
	}
	f.outq = nil
	f.delivered = f.appended
	for _, s := range f.syncs {
		s.stop(syncSubsumed)
	}
	f.syncs = map[string]*nsSync{}
	f.pending = nil
	f.floors = map[string]uint64{}
	f.needBookmark = false
	f.active = nil
	f.listCov = nil
}

// freshCoverage returns the selector a relist uses: in ModeServerFilter the filter
// recomputes it now (after the Namespace informer has synced) and gives it to every feed;
// nil otherwise.
func (f *feed) freshCoverage(ctx context.Context) (*coverage, error) {
	if f.filter == nil {
		return nil, nil
	}
	return f.filter.fresh(ctx)
}

// listNamespace lists the feed's type in one namespace, page by page, at one consistent
// resourceVersion (the first page's; an expired continue token restarts the list).
func (f *feed) listNamespace(ctx context.Context, namespace string, pageSize int64) ([]runtime.Object, string, error) {
	return f.list(ctx, namespace, "", pageSize, nil, &f.counters.namespaceLists)
}

// list lists the feed's type in namespace ("": every namespace, with the shard selector
// selector unless "") as listNamespace does,
// keeping only the objects whose namespace keep accepts (all with a nil keep), and counts
// its calls in calls.
func (f *feed) list(ctx context.Context, namespace, selector string, pageSize int64, keep func(namespace string) bool, calls *atomic.Uint64) ([]runtime.Object, string, error) {
	return f.listPages(ctx, namespace, metav1.ListOptions{Limit: pageSize, ShardSelector: selector}, keep, calls, nil)
}

// listRestartBackoff spaces the restarts of a paged list whose continue token expired
// (410 Gone): the list starts again from its first page, and what made the token expire
// (a list slower than the API server's compaction, an API server under load) is still
// there, so restarting at once only loads it more, in a loop for as long as that lasts.
// After its steps the 410 is returned and the caller's own retry takes over, with its
// own backoff (listInto, runBulk, the reflector).
var listRestartBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 4, Cap: 10 * time.Second}

// listPages lists with opts page by page at one consistent resourceVersion (the first
// page's; an expired continue token restarts the list, after f.restartBackoff), keeping
// only the objects whose namespace keep accepts (all with a nil keep), stripped of
// managedFields. It counts its calls in calls and hands every page to onPage, if not nil.
func (f *feed) listPages(ctx context.Context, namespace string, opts metav1.ListOptions, keep func(namespace string) bool, calls *atomic.Uint64, onPage func(runtime.Object)) ([]runtime.Object, string, error) {
	var (
		items   []runtime.Object
		rv      string
		expired error
	)
	err := wait.ExponentialBackoffWithContext(ctx, f.restartBackoff, func(ctx context.Context) (bool, error) {
		var err error
		items, rv, err = f.listPagesOnce(ctx, namespace, opts, keep, calls, onPage)
		if errors.Is(err, errContinueExpired) {
			expired = err
			f.logger.V(2).Info("Continue token of a paged list expired; listing again from the first page after a backoff",
				"resource", f.rt.Name(), "namespace", namespace, "err", err.Error())
			return false, nil
		}
		return err == nil, err
	})
	if wait.Interrupted(err) && expired != nil && ctx.Err() == nil {
		return nil, "", expired
	}
	if err != nil {
		return nil, "", err
	}
	return items, rv, nil
}

// errContinueExpired marks a 410 Gone on a page after the first: the list is restarted.
var errContinueExpired = errors.New("continue token expired")

// listPagesOnce is one attempt of listPages; a 410 Gone on a continue page comes back
// wrapped in errContinueExpired (apierrors.IsResourceExpired still holds).
func (f *feed) listPagesOnce(ctx context.Context, namespace string, opts metav1.ListOptions, keep func(namespace string) bool, calls *atomic.Uint64, onPage func(runtime.Object)) ([]runtime.Object, string, error) {
	var items []runtime.Object
	rv := ""
	for {
		list, err := f.rt.List(ctx, f.client, namespace, opts)
		calls.Add(1)
		if err != nil {
			if apierrors.IsResourceExpired(err) && opts.Continue != "" {
				return nil, "", fmt.Errorf("%w: %w", errContinueExpired, err)
			}
			return nil, "", err
		}
		if onPage != nil {
			onPage(list)
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return nil, "", err
		}
		if rv == "" {
			rv = lm.GetResourceVersion()
		}
		err = meta.EachListItem(list, func(o runtime.Object) error {
			if keep != nil {
				if ns, _, ok := objectKeys(o); !ok || !keep(ns) {
					return nil
				}
			}
			c := shallowCopy(o)
			_, _ = StripManagedFields(c)
			items = append(items, c)
			return nil
		})
		if err != nil {
			return nil, "", err
		}
		if lm.GetContinue() == "" {
			return items, rv, nil
		}
		// The apiserver refuses a resourceVersion with a continue token.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = lm.GetContinue(), "", ""
	}
}

package shardcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// ErrReleased is returned by Prepare when a partition it waits for is released before its
// objects are cached.
var ErrReleased = errors.New("sharding cache: partition released")

type syncState int

const (
	// syncBuffering: the namespace's events are held back while it is being listed.
	syncBuffering syncState = iota
	// syncPending: listed; waits for the watch goroutine to merge it into the stream.
	syncPending
	// syncInjected: merged; its batch is in the output queue at seq.
	syncInjected
	// syncSubsumed: a relist began after the warm-up, with the partition admitted, so
	// the relist covers the namespace and the warm-up's list is not merged.
	syncSubsumed
	// syncSuperseded: a newer warm-up of the same namespace replaced this one (next).
	syncSuperseded
	// syncCancelled: the partition was released, or the warm-up abandoned.
	syncCancelled
)

// nsSync is the warm-up of one namespace in one feed: buffer the namespace's events, list
// it, merge the list and the buffer into the stream. Its fields are guarded by feed.mu.
type nsSync struct {
	namespace string
	partition uint32
	epoch     uint64
	state     syncState
	next      *nsSync // when superseded

	buffer      []watch.Event
	items       []runtime.Object
	listRV      uint64
	listRVKnown bool
	seq         uint64

	// listed is set once the list is done (or skipped); expected then holds the listed
	// objects' resourceVersions by name: the state the store must reach.
	listed   bool
	expected map[string]uint64
	// bulk: the namespace is not listed on its own but served by the feed's next
	// cluster-wide warm-up list (feed.warmInBulk).
	bulk bool
	// hold: once listed, s waits for unhold before it is merged (Cache.warmNewNamespace).
	hold bool
}

// unhold lets s be merged.
func (f *feed) unhold(s *nsSync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.hold = false
	f.wakeLocked()
}

func (s *nsSync) stop(state syncState) {
	s.state = state
	s.buffer = nil
	s.items = nil
}

// beginSync starts buffering namespace's events, ahead of its list. A running warm-up of
// the namespace is superseded: the new list is issued later, so it covers everything the
// old one buffered. It returns nil if partition is not admitted (released meanwhile) or
// ctx, the warm-up's, has ended: a warm-up cancelled by Release must not start syncs
// after the partition has been prepared again.
func (f *feed) beginSync(ctx context.Context, namespace string, partition uint32) *nsSync {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil || !f.adm.admitted(partition) {
		return nil
	}
	s := &nsSync{namespace: namespace, partition: partition, epoch: f.epoch, state: syncBuffering}
	if old := f.syncs[namespace]; old != nil {
		old.stop(syncSuperseded)
		old.next = s
	}
	f.syncs[namespace] = s
	return s
}

// listMode says how s gets its list.
type listMode int

const (
	// listSkip: s needs no list any more (subsumed by a relist, cancelled, superseded).
	listSkip listMode = iota
	// listNamespace: s lists its namespace on its own.
	listNamespace
	// listBulk: the feed's cluster-wide warm-up list serves s.
	listBulk
)

// modeOf reports how s still has to be listed.
func (f *feed) modeOf(s *nsSync) listMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s.state != syncBuffering || s.epoch != f.epoch:
		return listSkip
	case s.bulk:
		return listBulk
	default:
		return listNamespace
	}
}

// warmInBulk serves every namespace of the feed that waits for its warm-up list, and
// those that begin to wait while it runs, with cluster-wide lists instead of one list per
// namespace: one paged list of the type per round, whose items are handed to each
// waiting namespace as if it had been listed on its own (at the list's resourceVersion).
// A round serves only the namespaces that were buffering before it started, so that its
// list is newer than the start of their buffers, as a namespace's own list would be; so
// each round first gathers the warm-ups of a burst (gather, see
// Options.ClusterListGather). The loop runs on ctx (the cache's) until no namespace waits.
func (f *feed) warmInBulk(ctx context.Context, pageSize int64, gather time.Duration) {
	f.mu.Lock()
	for _, s := range f.syncs {
		if s.state == syncBuffering && s.epoch == f.epoch && !s.listed && !s.bulk {
			s.bulk = true
			f.bulkJoined = time.Now()
		}
	}
	start := !f.bulkRunning
	f.bulkRunning = true
	f.mu.Unlock()
	if start {
		go f.runBulk(ctx, pageSize, gather)
	}
}

// gatherBulk waits until no warm-up has joined the next round for quiet, or for 10 ×
// quiet in all, or until ctx ends.
func (f *feed) gatherBulk(ctx context.Context, quiet time.Duration) {
	first := time.Now()
	for {
		f.mu.Lock()
		wait := untilQuiet(time.Now(), first, f.bulkJoined, quiet, 10*quiet)
		f.mu.Unlock()
		if wait <= 0 {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// inBulk reports whether the feed's cluster-wide warm-up loop runs: a warm-up that starts
// meanwhile joins it instead of listing its namespaces.
func (f *feed) inBulk() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bulkRunning
}

// bulkBatchLocked returns the namespaces the next cluster-wide round serves, with their syncs.
func (f *feed) bulkBatchLocked() map[string]*nsSync {
	batch := map[string]*nsSync{}
	for ns, s := range f.syncs {
		if s.bulk && s.state == syncBuffering && s.epoch == f.epoch && !s.listed {
			batch[ns] = s
		}
	}
	return batch
}

func (f *feed) runBulk(ctx context.Context, pageSize int64, gather time.Duration) {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}
	for {
		f.gatherBulk(ctx, gather)
		f.mu.Lock()
		batch := f.bulkBatchLocked()
		if len(batch) == 0 || ctx.Err() != nil {
			f.bulkRunning = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		// ModeServerFilter: list once the watch carries every namespace of the batch,
		// with the selector of their slice (see covers).
		bySel, ok := f.coversAll(batch)
		if !ok {
			for ns := range batch {
				f.filter.need(ns)
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		for sel, part := range bySel {
			if err := f.listBulk(ctx, sel, part, pageSize); err != nil {
				if ctx.Err() != nil {
					break // ends the loop above
				}
				f.logger.Error(err, "Cluster-wide warm-up list failed, retrying", "resource", f.rt.Name(), "namespaces", len(part))
				select {
				case <-time.After(backoff.Step()):
				case <-ctx.Done():
				}
				break
			}
		}
	}
}

// listBulk lists the namespaces of batch with one cluster-wide list (with selector) and
// completes their warm-ups.
func (f *feed) listBulk(ctx context.Context, selector string, batch map[string]*nsSync, pageSize int64) error {
	start := time.Now()
	items, rv, err := f.list(ctx, "", selector, pageSize, func(ns string) bool { return batch[ns] != nil }, &f.counters.bulkLists)
	if err != nil {
		return err
	}
	byNS := make(map[string][]runtime.Object, len(batch))
	for _, o := range items {
		ns, _, _ := objectKeys(o)
		byNS[ns] = append(byNS[ns], o)
	}
	for ns, s := range batch {
		f.completeSync(s, byNS[ns], rv)
	}
	f.logger.V(2).Info("Warmed namespaces with a cluster-wide list", "resource", f.rt.Name(),
		"namespaces", len(batch), "objects", len(items), "resourceVersion", rv, "duration", time.Since(start))
	return nil
}

// abandon cancels s if it never got listed (its warm-up was cancelled).
func (f *feed) abandon(s *nsSync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.state == syncBuffering {
		s.stop(syncCancelled)
		if f.syncs[s.namespace] == s {
			delete(f.syncs, s.namespace)
		}
	}
}

// completeSync hands the namespace's list (items at resourceVersion rv) to the feed, to be
// merged by the watch goroutine. With listed=false the list was skipped (subsumed).
func (f *feed) completeSync(s *nsSync, items []runtime.Object, rv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.listed = true
	s.expected = make(map[string]uint64, len(items))
	for _, o := range items {
		v, _ := objectRV(o)
		s.expected[objectName(o)] = v
	}
	if s.state != syncBuffering {
		return
	}
	if s.epoch != f.epoch {
		s.stop(syncSubsumed)
		return
	}
	s.items = items
	s.listRV, s.listRVKnown = parseRV(rv)
	s.state = syncPending
	f.pending = append(f.pending, s)
	f.wakeLocked()
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

// syncDone reports whether s's objects are in the informer's store: each listed object is
// there at its listed resourceVersion or newer, unless it has since been deleted.
func (f *feed) syncDone(s *nsSync) (bool, error) {
	f.mu.Lock()
	for s.state == syncSuperseded && s.next != nil {
		s = s.next
	}
	switch {
	case s.state == syncCancelled:
		f.mu.Unlock()
		return false, ErrReleased
	case s.state == syncSubsumed || s.epoch != f.epoch:
		// Covered by a relist: wait for it to complete and for the list we took (if any).
		if !s.listed || f.listing {
			f.mu.Unlock()
			return false, nil
		}
	case s.state == syncInjected:
		if f.delivered < s.seq {
			f.mu.Unlock()
			return false, nil
		}
	default:
		f.mu.Unlock()
		return false, nil
	}
	relistRV := f.relistRV
	var check []string
	present := f.shadow[s.namespace]
	for name := range s.expected {
		if _, ok := present[name]; ok {
			check = append(check, name)
		}
	}
	f.mu.Unlock()

	if !f.storeCaughtUp(relistRV) {
		return false, nil
	}
	indexer := f.informer.GetIndexer()
	for _, name := range check {
		obj, exists, err := indexer.GetByKey(s.namespace + "/" + name)
		if err != nil || !exists {
			return false, nil
		}
		want := s.expected[name]
		if got, ok := objectRV(obj); ok && want > 0 && got < want {
			return false, nil
		}
	}
	return true, nil
}

// storeCaughtUp reports whether the store has processed the last relist (its Replace),
// judged by the store's resourceVersion. Without AtomicFIFO the store does not track one,
// and the check is skipped.
func (f *feed) storeCaughtUp(relistRV string) bool {
	want, ok := parseRV(relistRV)
	if !ok {
		return true
	}
	got, ok := parseRV(f.informer.GetIndexer().LastStoreSyncResourceVersion())
	if !ok {
		return true
	}
	return got >= want
}

// releaseDone reports whether the synthetic deletes of ticket reached the reflector and
// the store holds no object of partitions any more.
func (f *feed) releaseDone(t releaseTicket, partitions []uint32) bool {
	f.mu.Lock()
	if (f.epoch == t.epoch && f.delivered < t.seq) || f.listing {
		f.mu.Unlock()
		return false
	}
	relistRV := f.relistRV
	f.mu.Unlock()
	if !f.storeCaughtUp(relistRV) {
		return false
	}
	indexer := f.informer.GetIndexer()
	for _, p := range partitions {
		keys, err := indexer.IndexKeys(PartitionIndex, PartitionIndexValue(p))
		if err != nil || len(keys) > 0 {
			return false
		}
	}
	return true
}

// coversAll reports whether the feed's streams carry every namespace of batch (see
// covers), and returns the namespaces by the selector a cluster-wide list of them uses:
// the selector of their slice (one "" in ModeClientFilter).
func (f *feed) coversAll(batch map[string]*nsSync) (map[string]map[string]*nsSync, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filter == nil {
		return map[string]map[string]*nsSync{"": batch}, true
	}
	if !f.canReopenLocked() {
		return nil, false
	}
	bySel := map[string]map[string]*nsSync{}
	for ns, s := range batch {
		if !f.cov.set.Covers(ns) {
			return nil, false
		}
		sel := f.cov.sels[f.cov.set.SliceOf(ns)]
		if bySel[sel] == nil {
			bySel[sel] = map[string]*nsSync{}
		}
		bySel[sel][ns] = s
	}
	return bySel, true
}

package shardcache

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"
)

// feed is the ListerWatcher of one resource type's informer. It sits between the
// apiserver and client-go's reflector and owns the order of everything the reflector
// sees:
//
//   - cluster-wide list results and watch events are filtered by admission, so the store
//     only ever holds objects of admitted partitions;
//   - namespace-scoped warm-up lists are merged into the running watch (synthetic ADDED,
//     MODIFIED and DELETED events), ordered by resourceVersion against the live events;
//   - Release turns the partition's objects into synthetic DELETED events.
//
// All of that goes through one output queue (outq) that outlives the individual watch
// calls of the reflector: a watch that ends hands its undelivered events to the next one,
// and a relist (the reflector calling List, or a watch-list stream) discards them,
// because the relist's Replace supersedes the whole store.
//
// The feed also keeps a shadow of the store: the objects the store will hold once every
// event already queued has been applied. Synthetic deletes are built from the shadow, not
// from the informer's indexer, because the indexer lags behind the queue.
type feed struct {
	rt          ResourceType
	client      kubernetes.Interface
	adm         *admission
	noWatchList bool
	logger      klog.Logger
	informer    toolscache.SharedIndexInformer // set once, right after construction
	public      *feedInformer                  // the informer controllers get
	hooks       *testHooks
	// filter is the server-side filter (ModeServerFilter); nil in ModeClientFilter.
	filter *serverFilter
	// restartBackoff spaces the restarts of a paged list whose continue token expired
	// (listRestartBackoff; shorter in tests).
	restartBackoff wait.Backoff

	counters feedCounters

	mu sync.Mutex
	// gen identifies the watch instance allowed to deliver; every Watch call and every
	// relist bumps it, which retires the previous instance.
	gen uint64
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
	// streams are the upstream streams the feed merges, 2^bits of them: one per slice of
	// the selector's hash space in ModeServerFilter, one otherwise (streams.go).
	bits    int
	streams []stream
	// listedAt are the streams' positions when the last relist completed; applied the
	// newest resourceVersion the store has applied of each stream (2^appliedBits of
	// them), as its event handler saw it: with several streams, the store's own
	// resourceVersion may be another stream's (applied.go).
	listedAt    []uint64
	applied     []uint64
	appliedBits int
	// shadow: partition key (namespace) → name → object, as the store will hold it.
	shadow map[string]map[string]runtime.Object
	// outq holds events not yet handed to the reflector; appended and delivered count
	// events ever queued and delivered (len(outq) == appended-delivered).
	outq      []watch.Event
	appended  uint64
	delivered uint64
	// syncs are the namespaces being warmed (buffering or waiting to be merged).
	syncs   map[string]*nsSync
	pending []*nsSync
	// floors: namespace → resourceVersion of its merged list; upstream events of the
	// namespace at or below it are already reflected by the list and are dropped.
	floors map[string]uint64
	// needBookmark: synthetic events were queued while the stream position was unknown
	// (during a classic relist); a bookmark follows them as soon as it is known.
	needBookmark bool
	// bulkRunning: the cluster-wide warm-up loop runs (warmInBulk).
	bulkRunning bool
	// bulkJoined is when a warm-up last joined the next cluster-wide round.
	bulkJoined time.Time
	active     *filteredWatch
	// cov is the server-side selector the feed's streams use from their high-water marks
	// on (ModeServerFilter; nil otherwise). When a slice of it changes, that slice's
	// running upstream watch stops being read (its events are not accounted for, so the
	// stream's hwm stays where the change happened) and is reopened from hwm with the new
	// selector: every upstream event after hwm that matches cov reaches the feed.
	cov *coverage
	// listCov is the selector of the relist in progress: every page of every slice's
	// list uses it.
	listCov *coverage
}

// feedCounters are the feed's statistics, read without the lock.
type feedCounters struct {
	clusterLists   atomic.Uint64
	namespaceLists atomic.Uint64
	watches        atomic.Uint64
	dropped        atomic.Uint64
	synthetic      atomic.Uint64
	bulkLists      atomic.Uint64
	// selectorRestarts counts upstream watches reopened because the selector changed.
	selectorRestarts atomic.Uint64
}

func newFeed(rt ResourceType, client kubernetes.Interface, adm *admission, disableWatchList bool, logger klog.Logger) *feed {
	return &feed{
		rt:          rt,
		client:      client,
		adm:         adm,
		noWatchList: disableWatchList || rt.Metadata || watchlist.DoesClientNotSupportWatchListSemantics(client),
		logger:      logger,
		streams:     make([]stream, 1),
		shadow:      map[string]map[string]runtime.Object{},
		syncs:       map[string]*nsSync{},
		floors:      map[string]uint64{},

		restartBackoff: listRestartBackoff,
	}
}

var (
	_ toolscache.ListerWatcher            = &feed{}
	_ toolscache.ListerWatcherWithContext = &feed{}
)

// IsWatchListSemanticsUnSupported tells client-go's reflector whether it may use
// streaming lists (WatchListClient). The feed supports them (initial events are
// filtered and the initial-events-end bookmark passes through), so this only reports
// clients that cannot (fake clientsets) and Options.DisableWatchList.
func (f *feed) IsWatchListSemanticsUnSupported() bool { return f.noWatchList }

// List implements the deprecated cache.Lister.
func (f *feed) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

// Watch implements the deprecated cache.Watcher.
func (f *feed) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
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

// WatchWithContext starts the upstream watches, one per stream, and merges them. A
// watch-list request (SendInitialEvents) is a relist and starts a new epoch. A plain watch
// resumes each stream from its high-water mark, not from the resourceVersion the reflector
// asks for: the reflector's value may be one of an injected (older, or newer than the
// stream) object, or another stream's, while the feed knows exactly which upstream events
// of each stream it has accounted for.
func (f *feed) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	f.retireActive()
	if initial {
		f.mu.Lock()
		f.resetLocked()
		f.mu.Unlock()
		if _, err := f.freshCoverage(ctx); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if initial {
		f.initial = true
		f.resetStreamsLocked(f.cov)
	} else if !f.listing {
		f.splitStreamsLocked()
	}
	f.gen++
	gen := f.gen
	ups := make([]upstreamSpec, len(f.streams))
	for k, st := range f.streams {
		o := opts
		if !initial && st.hwm > 0 && !f.listing {
			if len(f.streams) == 1 && o.ResourceVersion != strconv.FormatUint(st.hwm, 10) {
				f.logger.V(5).Info("Resuming watch from the feed's high-water mark",
					"requested", o.ResourceVersion, "resourceVersion", st.hwm)
			}
			o.ResourceVersion = strconv.FormatUint(st.hwm, 10)
		}
		ups[k].opts = o
		if f.cov != nil {
			ups[k].opts.ShardSelector, ups[k].covGen = f.cov.sels[k], f.cov.gens[k]
		}
	}
	bits := f.bits
	f.mu.Unlock()

	w := newFilteredWatch(ctx, f, gen, bits, opts)
	// The streams' watches are opened side by side: each waits for the apiserver's watch
	// cache to be fresh (and, streaming, sends its initial events), so one after another
	// they would add up.
	opened := make([]watch.Interface, len(ups))
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	for k, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opened[k], errs[k] = f.rt.Watch(ctx, f.client, "", u.opts)
			f.counters.watches.Add(1)
		}()
	}
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		for _, up := range opened {
			if up != nil {
				up.Stop()
			}
		}
		return nil, err
	}
	for k, u := range ups {
		w.attach(k, opened[k], u)
	}
	f.mu.Lock()
	if f.gen == gen {
		f.active = w
	}
	f.mu.Unlock()
	go w.run()
	return w, nil
}

// upstreamSpec is how one stream's upstream watch is opened: its options (selector and
// resourceVersion included) and the generation of its slice of the selector.
type upstreamSpec struct {
	opts   metav1.ListOptions
	covGen uint64
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

// accept processes one upstream event of stream k of watch instance gen, whose upstream
// was opened for bits slice bits and slice generation covGen. It returns the event to hand
// over directly (errors, which must not be queued), alive=false once the instance has
// been retired, and reopen=true if the stream's upstream is stale (the event is then not
// accounted for: the reopened watch delivers it again if it matches).
func (f *feed) accept(gen uint64, k, bits int, covGen uint64, ev watch.Event) (direct *watch.Event, alive, reopen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return nil, false, false
	}
	if f.staleLocked(k, bits, covGen) {
		return nil, true, true
	}
	direct, alive = f.acceptLocked(k, ev)
	return direct, alive, false
}

func (f *feed) acceptLocked(k int, ev watch.Event) (direct *watch.Event, alive bool) {
	if k >= len(f.streams) {
		return nil, true
	}
	st := &f.streams[k]
	switch ev.Type {
	case watch.Error:
		return &ev, true
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return nil, true
		}
		rv, ok := parseRV(m.GetResourceVersion())
		if f.initial && !st.initialDone {
			if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				// End of this stream's part of the streamed list.
				st.initialDone = true
				st.hwm = rv
				if f.allInitialDoneLocked() {
					f.endInitialLocked(ev)
				}
				return nil, true
			}
			if len(f.streams) == 1 {
				f.appendLocked(ev)
			}
			return nil, true
		}
		if ok {
			if rv <= st.hwm {
				return nil, true
			}
			st.hwm = rv
			f.sweepFloorsLocked()
		}
		if !f.initial {
			f.appendLocked(ev)
		}
		return nil, true
	case watch.Added, watch.Modified, watch.Deleted:
		key, _, ok := objectKeys(ev.Object)
		if !ok {
			return nil, true
		}
		rv, rvOK := objectRV(ev.Object)
		if !(f.initial && !st.initialDone) && rvOK {
			// Initial events of a watch-list carry the objects' own (unordered)
			// resourceVersions; every later event is in stream order.
			if st.hwm > 0 && rv <= st.hwm {
				return nil, true // already accounted for before a watch restart
			}
			st.hwm = rv
		}
		if !f.adm.namespaceAdmitted(key) {
			f.counters.dropped.Add(1)
			return nil, true
		}
		_, _ = StripManagedFields(ev.Object)
		if s := f.syncs[key]; s != nil {
			s.buffer = append(s.buffer, ev)
			return nil, true
		}
		if floor, has := f.floors[key]; has {
			if rvOK && rv <= floor {
				return nil, true
			}
			delete(f.floors, key)
		}
		f.appendLocked(ev)
		return nil, true
	default:
		return nil, true
	}
}

// endInitialLocked completes a watch-list relist once every stream has sent its
// initial-events-end bookmark (last, a bookmark of the last stream): the reflector gets
// one such bookmark, at the oldest stream's position.
func (f *feed) endInitialLocked(last watch.Event) {
	f.initial = false
	f.listing = false
	oldest := f.oldestLocked()
	f.relistRV = strconv.FormatUint(oldest, 10)
	f.listedAt = f.positionsLocked()
	if len(f.streams) > 1 {
		obj := last.Object.DeepCopyObject()
		if m, err := meta.Accessor(obj); err == nil {
			m.SetResourceVersion(f.relistRV)
		}
		last = watch.Event{Type: watch.Bookmark, Object: obj}
	}
	f.appendLocked(last)
	f.logger.V(4).Info("Watch-list initial events complete", "resourceVersion", f.relistRV, "epoch", f.epoch, "streams", len(f.streams))
}

// next returns the event instance gen should deliver next and its sequence number,
// merging pending warm-ups into the queue first. ok is false if there is nothing to
// deliver; alive is false once the instance has been retired.
func (f *feed) next(gen uint64) (ev watch.Event, seq uint64, ok, alive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return watch.Event{}, 0, false, false
	}
	if !f.initial && !f.listing && len(f.pending) > 0 {
		var held []*nsSync
		for _, s := range f.pending {
			if s.state == syncPending {
				if s.hold {
					held = append(held, s)
					continue
				}
				f.injectLocked(s)
			}
		}
		f.pending = held
	}
	if len(f.outq) == 0 {
		return watch.Event{}, 0, false, true
	}
	return f.outq[0], f.delivered + 1, true, true
}

// markDelivered records that event seq, the head of the queue, reached the reflector.
// It goes by sequence number, not by watch instance: the reflector may already be
// opening the next watch, and the event must not be delivered twice. (A relist cleared
// the queue if the head is no longer seq.)
func (f *feed) markDelivered(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.outq) == 0 || f.delivered+1 != seq {
		return
	}
	f.outq[0] = watch.Event{}
	f.outq = f.outq[1:]
	f.delivered++
}

// retireActive stops the current watch instance and waits for its goroutine to finish,
// so that an event it handed over is accounted for before another instance reads the
// queue. The reflector has normally stopped it already.
func (f *feed) retireActive() {
	f.mu.Lock()
	prev := f.active
	f.active = nil
	f.mu.Unlock()
	if prev != nil {
		prev.Stop()
		<-prev.done
	}
}

// appendLocked queues ev for the reflector and applies it to the shadow.
func (f *feed) appendLocked(ev watch.Event) {
	switch ev.Type {
	case watch.Added, watch.Modified:
		if key, name, ok := objectKeys(ev.Object); ok {
			f.shadowPutLocked(key, name, ev.Object)
		}
	case watch.Deleted:
		if key, name, ok := objectKeys(ev.Object); ok {
			if objs := f.shadow[key]; objs != nil {
				delete(objs, name)
				if len(objs) == 0 {
					delete(f.shadow, key)
				}
			}
		}
	}
	f.outq = append(f.outq, ev)
	f.appended++
	f.wakeLocked()
}

func (f *feed) shadowPutLocked(key, name string, obj runtime.Object) {
	objs := f.shadow[key]
	if objs == nil {
		objs = map[string]runtime.Object{}
		f.shadow[key] = objs
	}
	objs[name] = obj
}

// appendBookmarkLocked queues a synthetic BOOKMARK at the high-water mark, after
// synthetic events that carried older objects: it moves the reflector's last-synced
// resourceVersion (and the store's) back to the newest real position of the stream.
func (f *feed) appendBookmarkLocked() {
	if f.initial {
		return // the initial-events-end bookmark will do
	}
	if !f.positionKnownLocked() {
		f.needBookmark = f.listing
		return
	}
	obj := f.rt.Object.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	m.SetResourceVersion(strconv.FormatUint(f.newestLocked(), 10))
	f.appendLocked(watch.Event{Type: watch.Bookmark, Object: obj})
}

func (f *feed) wakeLocked() {
	if f.active != nil {
		select {
		case f.active.wake <- struct{}{}:
		default:
		}
	}
}

func (f *feed) sweepFloorsLocked() {
	for ns, floor := range f.floors {
		if floor <= f.streams[f.sliceOfLocked(ns)].hwm {
			delete(f.floors, ns)
		}
	}
}

// injectLocked merges a listed namespace into the stream, at the current position:
//
//  1. the listed objects (state at the list's resourceVersion L), as ADDED or MODIFIED
//     depending on the shadow, skipping those the shadow already has at the same version;
//  2. DELETED for shadow objects of the namespace the list no longer has;
//  3. the events buffered since the warm-up began, those newer than L, in stream order;
//  4. a BOOKMARK at the high-water mark.
//
// Afterwards upstream events of the namespace at or below L are dropped (floor): a watch
// that lags behind the list must not take objects back in time.
func (f *feed) injectLocked(s *nsSync) {
	if f.syncs[s.namespace] == s {
		delete(f.syncs, s.namespace)
	}
	before := f.appended
	current := f.shadow[s.namespace]
	listed := make(map[string]struct{}, len(s.items))
	sortByRV(s.items)
	for _, obj := range s.items {
		name := objectName(obj)
		listed[name] = struct{}{}
		typ := watch.Added
		if old, ok := current[name]; ok {
			oldRV, ok1 := objectRV(old)
			newRV, ok2 := objectRV(obj)
			if ok1 && ok2 && oldRV == newRV {
				continue
			}
			typ = watch.Modified
		}
		f.appendLocked(watch.Event{Type: typ, Object: obj})
	}
	var stale []runtime.Object
	for name, old := range f.shadow[s.namespace] {
		if _, ok := listed[name]; !ok {
			stale = append(stale, old)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return objectName(stale[i]) < objectName(stale[j]) })
	for _, old := range stale {
		f.appendLocked(watch.Event{Type: watch.Deleted, Object: old})
	}
	for _, ev := range s.buffer {
		if rv, ok := objectRV(ev.Object); ok && s.listRVKnown && rv <= s.listRV {
			continue
		}
		f.appendLocked(ev)
	}
	if s.listRVKnown && s.listRV > f.streams[f.sliceOfLocked(s.namespace)].hwm {
		f.floors[s.namespace] = s.listRV
	}
	if f.appended > before {
		f.appendBookmarkLocked()
	}
	f.counters.synthetic.Add(f.appended - before)
	s.state = syncInjected
	s.seq = f.appended
	s.buffer = nil
	s.items = nil
	f.logger.V(4).Info("Merged warm-up list into the watch", "namespace", s.namespace,
		"partition", s.partition, "listResourceVersion", s.listRV, "events", f.appended-before)
}

// releaseTicket tells Release what to wait for in one feed.
type releaseTicket struct {
	seq   uint64 // the synthetic deletes are delivered once delivered >= seq
	epoch uint64
}

// release drops partitions from the feed: warm-ups of their namespaces are cancelled and
// every shadow object of theirs becomes a synthetic DELETED event, queued behind what is
// already queued so that handlers see the deletes in stream order. Admission must have
// been revoked before, so that no new event of the partitions is queued after.
func (f *feed) release(partitions map[uint32]struct{}) releaseTicket {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ns, s := range f.syncs {
		if _, ok := partitions[s.partition]; ok {
			s.stop(syncCancelled)
			delete(f.syncs, ns)
		}
	}
	for ns := range f.floors {
		if _, ok := partitions[f.adm.partitionOf(ns)]; ok {
			delete(f.floors, ns)
		}
	}
	var keys []string
	for key := range f.shadow {
		if _, ok := partitions[f.adm.partitionOf(key)]; ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	before := f.appended
	for _, key := range keys {
		objs := make([]runtime.Object, 0, len(f.shadow[key]))
		for _, o := range f.shadow[key] {
			objs = append(objs, o)
		}
		sort.Slice(objs, func(i, j int) bool { return objectName(objs[i]) < objectName(objs[j]) })
		for _, o := range objs {
			f.appendLocked(watch.Event{Type: watch.Deleted, Object: o})
		}
	}
	if f.appended > before {
		f.appendBookmarkLocked()
	}
	f.counters.synthetic.Add(f.appended - before)
	if n := f.appended - before; n > 0 {
		f.logger.V(4).Info("Queued synthetic deletes for released partitions", "events", n)
	}
	return releaseTicket{seq: f.appended, epoch: f.epoch}
}

// shadowCount returns the number of objects the store will hold.
func (f *feed) shadowCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, objs := range f.shadow {
		n += len(objs)
	}
	return n
}

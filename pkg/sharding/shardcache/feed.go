package shardcache

// The feed: the ListerWatcher of one filtered informer, between the apiserver and
// client-go's reflector. Its concerns live in files of their own (the package comment
// lists them), each opening with the invariants it keeps.
//
// What holds across them:
//   - f.mu guards all of the feed's mutable state, one lock for every concern: an upstream
//     event moves its stream's position, may be buffered by a warm-up or dropped by a
//     floor, and is queued and applied to the shadow in one step, atomic with respect to a
//     Release, a relist and a warm-up's merge.
//   - f.mu is held for bookkeeping only: never across a request to the apiserver or a wait,
//     and no other lock of the package is taken under it.
//   - The reflector receives nothing but the output queue's events (and watch errors,
//     handed over directly), delivered by the watch instance of the current generation.

import (
	"context"
	"sync"
	"sync/atomic"

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
//
// Its state is grouped by concern, each group defined (and its invariants written down)
// in the file that keeps it; mu guards them all.
type feed struct {
	rt          ResourceType
	client      kubernetes.Interface
	adm         *admission
	noWatchList bool
	logger      klog.Logger
	informer    toolscache.SharedIndexInformer // set once, right after construction
	public      *feedInformer                  // the informer controllers get
	hooks       *testHooks
	// health is set for an optional resource (optional.go); nil otherwise.
	health *health
	// filter is the server-side filter (ModeServerFilter); nil in ModeClientFilter.
	filter *serverFilter
	// restartBackoff spaces the restarts of a paged list whose continue token expired
	// (listRestartBackoff; shorter in tests).
	restartBackoff wait.Backoff

	counters feedCounters

	mu           sync.Mutex
	listState    // list.go: relist epochs and where the last relist ended
	mergeState   // merge.go: the watch instance allowed to deliver, the output queue
	injectState  // inject.go: floors, an owed bookmark
	shadowState  // shadow.go: the store as it will be once the queue is applied
	streamState  // streams.go: the upstream streams' positions and selector
	appliedState // applied.go: how far the store has applied each stream
	warmState    // nssync.go: the namespaces being warmed
	bulkState    // bulk.go: the cluster-wide warm-up loop
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

// newFeed builds the feed of rt. Metadata-only types relist with paged LISTs, not
// watch-list streams: at 10,000 namespaces (the large-cluster benchmark, 4 shards,
// garbage collector and quota, 2026-11-30) streaming them made each shard's start
// slower (Ready after 46–50 s instead of 36–38 s, 7.4 instead of 5.1 CPU-seconds, the API
// server 58.9 instead of 46.5 CPU-seconds) for no lower peak RSS (392–430 MiB, within
// the 362–453 MiB of the runs with LISTs).
func newFeed(rt ResourceType, client kubernetes.Interface, adm *admission, disableWatchList bool, logger klog.Logger) *feed {
	return &feed{
		rt:          rt,
		client:      client,
		adm:         adm,
		noWatchList: disableWatchList || rt.Metadata || watchlist.DoesClientNotSupportWatchListSemantics(client),
		logger:      logger,
		streamState: streamState{streams: make([]stream, 1)},
		shadowState: shadowState{shadow: map[string]map[string]runtime.Object{}},
		warmState:   warmState{syncs: map[string]*nsSync{}},
		injectState: injectState{floors: map[string]uint64{}},

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

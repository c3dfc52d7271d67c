package shardcache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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

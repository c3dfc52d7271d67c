package shardcache

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Mode selects where objects of partitions the shard does not hold are filtered out.
type Mode int

const (
	// ModeClientFilter (the default) watches each resource type cluster-wide and drops
	// other partitions' objects in the shard, before they reach the store. It works with
	// any apiserver; the shard's memory is its own share, its network ingress is not.
	ModeClientFilter Mode = iota
	// ModeServerFilter also asks the apiserver to filter (KEP-5866,
	// ListOptions.ShardSelector; kube-apiserver needs the ShardedListAndWatch feature
	// gate): the namespaced informers' lists and watches carry a shardRange selector over
	// the FNV-1a hash of the namespace that covers every known namespace of the admitted
	// partitions. One selector holds about 1,170 ranges, too few to name thousands of
	// scattered namespaces, so the hash space is split into up to
	// Options.MaxSelectorWatches slices, each watched with its own selector of at most
	// Options.MaxSelectorRanges ranges: exact while that suffices, a superset beyond (see
	// pkg/sharding/hashrange). The client-side filter stays authoritative, so an
	// apiserver that ignores the selector costs bandwidth, not correctness. When the
	// coverage must grow (Prepare, or a new namespace of an admitted partition outside
	// the ranges) the selector is recomputed (debounced), each feed reopens its watch
	// from its high-water mark with it, and warm-ups of newly covered namespaces list
	// them only once the new selector is in force. The Namespace informer and the
	// cluster-scoped ones stay unfiltered.
	ModeServerFilter
)

const (
	// DefaultMaxSelectorWatches is Options.MaxSelectorWatches's default: exact selectors
	// for a shard of 4 owning 2,500 of 10,000 namespaces need 4 to 8.
	DefaultMaxSelectorWatches = 16
	// MaxSelectorWatches is the most watches per resource type ModeServerFilter opens.
	MaxSelectorWatches = 1 << hashrange.MaxSliceBits
)

// DefaultClusterListThreshold is Options.ClusterListThreshold's default: 200 namespace
// lists are 4 s of a client at QPS 50.
const DefaultClusterListThreshold = 200

// Options configures a Cache. The zero value is ready to use.
type Options struct {
	// Mode selects client-side filtering (default) or server-side filtering as well.
	Mode Mode
	// MaxSelectorRanges bounds the shardRange calls of ModeServerFilter's selector
	// (default hashrange.DefaultMaxRanges, at most hashrange.MaxRanges), per slice.
	MaxSelectorRanges int
	// MaxSelectorWatches bounds the slices ModeServerFilter splits its selector into,
	// i.e. the watches per resource type (rounded down to a power of two; default
	// DefaultMaxSelectorWatches, at most MaxSelectorWatches). It uses as few as keep
	// every slice exact, and never fewer than it once used.
	MaxSelectorWatches int
	// SelectorDebounce is how long ModeServerFilter waits for more namespaces or
	// partitions before it recomputes the selector and restarts the watches (default
	// DefaultSelectorDebounce; at most four times as long after the first request).
	SelectorDebounce time.Duration
	// WarmupConcurrency bounds the namespace-scoped list calls that warm-ups run at the
	// same time, across all partitions and resource types (default 4). The client's own
	// QPS limit applies on top.
	WarmupConcurrency int
	// WarmupPageSize is the page size of warm-up lists (default 500).
	WarmupPageSize int64
	// ClusterListThreshold is the number of namespace lists (namespaces × resource
	// types) waiting in running warm-ups above which they are served by cluster-wide
	// lists instead, one paged list per type for all of them (default 200; negative:
	// never). Each namespace list costs a request of the shard's client QPS: a scale-out
	// or a killed shard hands a shard thousands of namespaces at once, which namespace by
	// namespace take minutes at QPS 50.
	ClusterListThreshold int
	// ClusterListPageSize is the page size of those cluster-wide lists (default 5000).
	ClusterListPageSize int64
	// ClusterListGather is how long a cluster-wide warm-up round waits for more
	// warm-ups to join it before it lists: it lists once no warm-up has joined for
	// ClusterListGather, and at the latest 10 × ClusterListGather after its first
	// (default 100ms). A scale-out's Prepares arrive as a burst over tens of
	// milliseconds; without the wait the first round starts with the first 200
	// namespaces and the rest of the burst needs a second list of the whole type.
	ClusterListGather time.Duration
	// DisableWatchList makes the informers use classic LIST + WATCH even where
	// client-go would stream the initial list (the WatchListClient feature). Streaming
	// is supported; this is an escape hatch.
	DisableWatchList bool
	// ResyncPeriod is the informers' default handler resync period (default 0: none).
	ResyncPeriod time.Duration
	// PollInterval is how often Prepare and Release check the stores (default 20ms).
	PollInterval time.Duration
	// StartWindow bounds how long, after Run, the first Prepare waits for more partitions
	// before the informers start (default 1s): a shard's first assignment is thousands
	// of partitions, and informers started after it fill them all with one filtered
	// cluster-wide list per type instead of thousands of namespace-scoped lists. The
	// informers start earlier, once no Prepare has added partitions for a tenth of it:
	// the coordinator grants a first assignment in one burst.
	StartWindow time.Duration
	// MetadataClient and RESTMapper serve metadata-only informers (Key.Metadata): the
	// mapper tells whether a resource is namespaced. Without them, asking for a
	// metadata-only informer is an error.
	MetadataClient metadata.Interface
	RESTMapper     meta.RESTMapper
}

func (o *Options) defaults() {
	if o.WarmupConcurrency <= 0 {
		o.WarmupConcurrency = 4
	}
	if o.WarmupPageSize <= 0 {
		o.WarmupPageSize = 500
	}
	if o.ClusterListThreshold == 0 {
		o.ClusterListThreshold = DefaultClusterListThreshold
	}
	if o.ClusterListPageSize <= 0 {
		o.ClusterListPageSize = 5000
	}
	if o.ClusterListGather <= 0 {
		o.ClusterListGather = 100 * time.Millisecond
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 20 * time.Millisecond
	}
	if o.StartWindow <= 0 {
		o.StartWindow = time.Second
	}
	if o.MaxSelectorRanges <= 0 {
		o.MaxSelectorRanges = hashrange.DefaultMaxRanges
	}
	o.MaxSelectorRanges = min(o.MaxSelectorRanges, hashrange.MaxRanges)
	if o.MaxSelectorWatches <= 0 {
		o.MaxSelectorWatches = DefaultMaxSelectorWatches
	}
	o.MaxSelectorWatches = min(o.MaxSelectorWatches, MaxSelectorWatches)
	if o.SelectorDebounce <= 0 {
		o.SelectorDebounce = DefaultSelectorDebounce
	}
}

// testHooks lets this package's tests act at precise points of a warm-up.
type testHooks struct {
	// afterNamespaceList runs after a warm-up list returned and before it is merged.
	afterNamespaceList func(resource, namespace string)
}

// Cache is a shard's cache layer: one informer per resource type, cluster-wide. The
// stores of namespaced types hold only objects of the partitions the shard has prepared
// or acquired; cluster-scoped types (the Namespace informer, indexed by partition, among
// them) are cached whole.
//
// Controllers get ordinary client-go informers from it through one accessor keyed by
// resource (Informer) and do not know about sharding. The cache owns the informers'
// start (Run: lazily, after the first assignment; or Start), warm-ups and "synced"
// (Prepare returns once a partition is cached; Synced answers readiness). The shard
// runtime drives Prepare and Release as the coordinator hands partitions over.
type Cache struct {
	client      kubernetes.Interface
	partitionOf PartitionFunc
	opts        Options
	adm         *admission
	sem         chan struct{} // warm-up list slots
	// waitingLists counts the namespace lists of running warm-ups not yet done: above
	// Options.ClusterListThreshold the feeds list cluster-wide instead.
	waitingLists atomic.Int64
	hooks        testHooks

	nsInformer toolscache.SharedIndexInformer
	// filter is ModeServerFilter's selector; nil in ModeClientFilter.
	filter *serverFilter

	mu sync.Mutex
	// feeds are the filtered informers of namespaced types, in registration order.
	feeds map[Key]*feed
	order []*feed
	// plain are the unfiltered informers of cluster-scoped types, the Namespace
	// informer first.
	plain      map[Key]toolscache.SharedIndexInformer
	plainOrder []plainInformer
	parts      map[uint32]*partitionState
	started    bool
	runCtx     context.Context
	// lazyCtx is Run's context: the first Prepare after Run arms startTimer;
	// firstPrepare and lastPrepare are when Prepares before the start came.
	firstPrepare, lastPrepare time.Time
	lazyCtx                   context.Context
	startTimer                *time.Timer
	// firstSync is closed once the informers started by Start have completed their first
	// list: the thousands of Prepares of a first assignment wait on it, instead of each
	// polling every informer.
	firstSync chan struct{}
}

type plainInformer struct {
	key Key
	inf toolscache.SharedIndexInformer
}

// partitionState is an admitted partition.
type partitionState struct {
	// warm is the partition's warm-up; nil when the partition was admitted before Start,
	// in which case the informers' first (filtered) list fills it.
	warm *warmup
}

// New returns a Cache that lists and watches through client and maps namespaces to
// partitions with partitionOf. No partition is admitted until Prepare.
func New(client kubernetes.Interface, partitionOf PartitionFunc, opts Options) (*Cache, error) {
	if client == nil || partitionOf == nil {
		return nil, errors.New("shardcache: New needs a client and a PartitionFunc")
	}
	if opts.Mode != ModeClientFilter && opts.Mode != ModeServerFilter {
		return nil, fmt.Errorf("shardcache: unknown mode %d", opts.Mode)
	}
	opts.defaults()
	c := &Cache{
		client:      client,
		partitionOf: partitionOf,
		opts:        opts,
		adm:         newAdmission(partitionOf),
		sem:         make(chan struct{}, opts.WarmupConcurrency),
		feeds:       map[Key]*feed{},
		plain:       map[Key]toolscache.SharedIndexInformer{},
		parts:       map[uint32]*partitionState{},
		firstSync:   make(chan struct{}),
	}
	if opts.Mode == ModeServerFilter {
		c.filter = newServerFilter(c, opts.MaxSelectorRanges, bits.Len(uint(opts.MaxSelectorWatches))-1, opts.SelectorDebounce)
	}
	c.nsInformer = c.newPlainInformer(namespacesType)
	_, _ = c.nsInformer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{AddFunc: c.onNamespaceAdded})
	c.plain[namespacesType.Key()] = c.nsInformer
	c.plainOrder = append(c.plainOrder, plainInformer{key: namespacesType.Key(), inf: c.nsInformer})
	return c, nil
}

// partitionIndexFunc indexes objects of a namespaced type by their namespace's partition.
func (c *Cache) partitionIndexFunc(obj any) ([]string, error) {
	key, _, ok := objectKeys(obj)
	if !ok {
		return nil, nil
	}
	return []string{PartitionIndexValue(c.partitionOf(key))}, nil
}

// clusterIndexFunc indexes every object of a cluster-scoped type under the cluster
// partition, the one partition that owns cluster-scoped work.
func (c *Cache) clusterIndexFunc(any) ([]string, error) {
	return []string{PartitionIndexValue(c.partitionOf(partition.ClusterKey))}, nil
}

// newPlainInformer builds an unfiltered informer of a cluster-scoped type. Namespace
// objects are indexed by the partition of their own name (Prepare needs them to know a
// partition's namespaces); other cluster-scoped objects by the cluster partition.
func (c *Cache) newPlainInformer(rt ResourceType) toolscache.SharedIndexInformer {
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return rt.List(ctx, c.client, "", opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return rt.Watch(ctx, c.client, "", opts)
		},
	}
	var lwi toolscache.ListerWatcher = toolscache.ToListWatcherWithWatchListSemantics(lw, c.client)
	if c.opts.DisableWatchList || rt.Metadata {
		lwi = unsupportedWatchList{lw}
	}
	index := c.clusterIndexFunc
	if rt.Resource == NamespacesResource {
		index = c.partitionIndexFunc
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lwi, rt.Object, toolscache.SharedIndexInformerOptions{
		ResyncPeriod:      c.opts.ResyncPeriod,
		Indexers:          toolscache.Indexers{PartitionIndex: index},
		ObjectDescription: rt.Name(),
	})
	_ = inf.SetTransform(StripManagedFields)
	return inf
}

// unsupportedWatchList forces classic LIST + WATCH on a ListWatch.
type unsupportedWatchList struct{ *toolscache.ListWatch }

func (unsupportedWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// Informer returns the shard's shared informer of key, creating it on first use: a typed
// informer for the built-in types (Builtin), a metadata-only one (objects are
// *metav1.PartialObjectMetadata) for any resource the API server serves when
// key.Metadata is set. Every caller asking for the same key shares one informer and one
// cluster-wide watch.
//
// Stores of namespaced types hold only objects of admitted partitions; their event
// handlers see synthetic adds when Prepare warms a partition and synthetic deletes when
// Release drops one. Stores of cluster-scoped types hold every object.
//
// Ask before the informers start, so that Prepare warms the informer too; an informer
// created later is started at once and fills from its own first (filtered) list.
func (c *Cache) Informer(key Key) (toolscache.SharedIndexInformer, error) {
	c.mu.Lock()
	if f := c.feeds[key]; f != nil {
		c.mu.Unlock()
		return f.public, nil
	}
	if inf := c.plain[key]; inf != nil {
		c.mu.Unlock()
		return inf, nil
	}
	c.mu.Unlock()
	rt, err := c.resourceType(key)
	if err != nil {
		return nil, err
	}
	return c.InformerFor(rt), nil
}

// resourceType resolves key to a descriptor: the built-in table, or a metadata-only
// descriptor whose scope the RESTMapper (discovery) tells.
func (c *Cache) resourceType(key Key) (ResourceType, error) {
	if !key.Metadata {
		rt, ok := Builtin(key.Resource)
		if !ok {
			return ResourceType{}, fmt.Errorf("shardcache: %s is not a built-in type of this cache: read it metadata-only, or add it to the built-in table (pkg/sharding/shardcache/resource.go)", key)
		}
		return rt, nil
	}
	if c.opts.MetadataClient == nil || c.opts.RESTMapper == nil {
		return ResourceType{}, fmt.Errorf("shardcache: %s: metadata-only informers need Options.MetadataClient and Options.RESTMapper", key)
	}
	gvk, err := c.opts.RESTMapper.KindFor(key.Resource)
	if err != nil {
		return ResourceType{}, fmt.Errorf("shardcache: %s: the API server does not serve it: %w", key, err)
	}
	mapping, err := c.opts.RESTMapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return ResourceType{}, fmt.Errorf("shardcache: %s: %w", key, err)
	}
	return metadataType(key.Resource, mapping.Scope.Name() != meta.RESTScopeNameNamespace, c.opts.MetadataClient), nil
}

// metadataType describes a resource read metadata-only through mc.
func metadataType(gvr schema.GroupVersionResource, clusterScoped bool, mc metadata.Interface) ResourceType {
	client := func(ns string) metadata.ResourceInterface {
		if clusterScoped {
			return mc.Resource(gvr)
		}
		return mc.Resource(gvr).Namespace(ns)
	}
	return ResourceType{
		Resource:      gvr,
		Metadata:      true,
		ClusterScoped: clusterScoped,
		Object:        &metav1.PartialObjectMetadata{},
		List: func(ctx context.Context, _ kubernetes.Interface, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := client(ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return list, nil
		},
		Watch: func(ctx context.Context, _ kubernetes.Interface, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return client(ns).Watch(ctx, opts)
		},
	}
}

// InformerFor returns the shard's informer for rt, creating it on first use (Informer
// resolves a Key to rt; this takes a descriptor directly). It panics if rt is
// incomplete, a programming error.
func (c *Cache) InformerFor(rt ResourceType) toolscache.SharedIndexInformer {
	if err := rt.validate(); err != nil {
		panic(err)
	}
	key := rt.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.feeds[key]; f != nil {
		return f.public
	}
	if inf := c.plain[key]; inf != nil {
		return inf
	}
	if rt.ClusterScoped {
		inf := c.newPlainInformer(rt)
		c.plain[key] = inf
		c.plainOrder = append(c.plainOrder, plainInformer{key: key, inf: inf})
		if c.started {
			go inf.RunWithContext(c.runCtx)
		}
		return inf
	}
	f := newFeed(rt, c.client, c.adm, c.opts.DisableWatchList, c.loggerLocked().WithValues("resource", rt.Name()))
	f.hooks = &c.hooks
	f.filter = c.filter
	if c.filter != nil {
		f.cov = c.filter.current()
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(f, rt.Object, toolscache.SharedIndexInformerOptions{
		ResyncPeriod: c.opts.ResyncPeriod,
		Indexers: toolscache.Indexers{
			toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc,
			PartitionIndex:            c.partitionIndexFunc,
		},
		ObjectDescription: rt.Name(),
	})
	_ = inf.SetTransform(StripManagedFields)
	if c.filter != nil { // only a server filter's selector is ever split
		_, _ = inf.AddEventHandler(f.appliedHandler())
	}
	f.informer = inf
	f.public = &feedInformer{SharedIndexInformer: inf, store: &feedStore{Indexer: inf.GetIndexer(), f: f}}
	c.feeds[key] = f
	c.order = append(c.order, f)
	if c.started {
		go inf.RunWithContext(c.runCtx)
	}
	return f.public
}

// loggerLocked is the cache's logger: the context's of Run once it runs (c.mu held).
func (c *Cache) loggerLocked() klog.Logger {
	logger := klog.Background()
	if c.runCtx != nil {
		logger = klog.FromContext(c.runCtx)
	}
	return logger.WithName("shardcache")
}

// logger is loggerLocked for callers that do not hold c.mu.
func (c *Cache) logger() klog.Logger {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loggerLocked()
}

// Keys returns the store keys (client-go's MetaNamespaceKeyFunc form: "namespace/name",
// or "name" for cluster-scoped objects) of key's cached objects that belong to
// partition, sorted. The shard enqueues them into a controller's queue when it acquires
// the partition. Objects of cluster-scoped types belong to the cluster partition only;
// Namespace objects to the partition of the namespace they describe.
func (c *Cache) Keys(key Key, partition uint32) ([]string, error) {
	inf, err := c.Informer(key)
	if err != nil {
		return nil, err
	}
	keys, err := inf.GetIndexer().IndexKeys(PartitionIndex, PartitionIndexValue(partition))
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	return keys, nil
}

// Run hands the informers' start to the cache: the first Prepare after Run arms a timer,
// collecting the partitions of the shard's first assignment until no Prepare has come for
// a tenth of Options.StartWindow (at most StartWindow after the first), after which the
// informers start with ctx and their first lists fill every partition admitted so far.
// Prepare, after Run, returns only once its partitions are cached. Run returns at once;
// calling it after Start has no effect.
func (c *Cache) Run(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lazyCtx == nil {
		c.lazyCtx = ctx
	}
}

// armStartLocked notes a Prepare before the start and arms the start's timer once;
// c.mu must be held.
func (c *Cache) armStartLocked() {
	if c.started || c.lazyCtx == nil {
		return
	}
	now := time.Now()
	c.lastPrepare = now
	if c.startTimer != nil {
		return
	}
	c.firstPrepare = now
	quiet := c.opts.StartWindow / 10
	c.startTimer = time.AfterFunc(quiet, c.startWhenQuiet)
}

// startWhenQuiet starts the informers once Prepares have paused for a tenth of
// StartWindow or StartWindow has passed since the first, and otherwise waits again.
func (c *Cache) startWhenQuiet() {
	c.mu.Lock()
	wait := untilQuiet(time.Now(), c.firstPrepare, c.lastPrepare, c.opts.StartWindow/10, c.opts.StartWindow)
	if wait > 0 {
		c.startTimer.Reset(wait)
		c.mu.Unlock()
		return
	}
	ctx := c.lazyCtx
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Starting informers", "admittedPartitions", len(c.adm.list()), "resources", c.Resources())
	c.Start(ctx)
}

// Start runs the informers until ctx is done. Partitions prepared before Start are
// filled by the informers' first list, one filtered cluster-wide list per type instead of
// one list per namespace. Calling Start again has no effect.
func (c *Cache) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return
	}
	c.started = true
	c.runCtx = ctx
	for _, p := range c.plainOrder {
		go p.inf.RunWithContext(ctx)
	}
	synced := make([]toolscache.InformerSynced, 0, len(c.plainOrder)+len(c.order))
	for _, p := range c.plainOrder {
		synced = append(synced, p.inf.HasSynced)
	}
	for _, f := range c.order {
		go f.informer.RunWithContext(ctx)
		synced = append(synced, f.informer.HasSynced)
	}
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), synced...) {
			close(c.firstSync)
		}
	}()
}

// Started reports whether the informers run.
func (c *Cache) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// synced returns the HasSynced funcs of every informer.
func (c *Cache) syncedFuncs() []toolscache.InformerSynced {
	c.mu.Lock()
	defer c.mu.Unlock()
	var synced []toolscache.InformerSynced
	for _, p := range c.plainOrder {
		synced = append(synced, p.inf.HasSynced)
	}
	for _, f := range c.order {
		synced = append(synced, f.informer.HasSynced)
	}
	return synced
}

// WaitForCacheSync waits until every informer has completed its first list, and so holds
// every partition prepared before Start. It returns ctx's error if ctx ends first.
func (c *Cache) WaitForCacheSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), c.syncedFuncs()...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("shardcache: caches did not sync")
	}
	return nil
}

// feedList returns the registered feeds in registration order.
func (c *Cache) feedList() []*feed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*feed(nil), c.order...)
}

// plainList returns the unfiltered informers, the Namespace informer first.
func (c *Cache) plainList() []plainInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]plainInformer(nil), c.plainOrder...)
}

// Resources returns the names of the registered resource types, sorted.
func (c *Cache) Resources() []string {
	var out []string
	for _, p := range c.plainList() {
		out = append(out, p.key.String())
	}
	for _, f := range c.feedList() {
		out = append(out, f.rt.Name())
	}
	sort.Strings(out)
	return out
}

// ClusterScoped reports whether key's resource is cluster-scoped (for a metadata-only key,
// as discovery tells).
func (c *Cache) ClusterScoped(key Key) (bool, error) {
	c.mu.Lock()
	if f := c.feeds[key]; f != nil {
		c.mu.Unlock()
		return false, nil
	}
	if c.plain[key] != nil {
		c.mu.Unlock()
		return true, nil
	}
	c.mu.Unlock()
	rt, err := c.resourceType(key)
	if err != nil {
		return false, err
	}
	return rt.ClusterScoped, nil
}

package shardcache

// The Cache and its informers, one per resource type, shared by every caller asking for
// the same Key. It keeps:
//   - Namespaced types are served by a feed (feed.go), filtered by admission before the
//     store; cluster-scoped types by plain informers, cached whole.
//   - Every informer maintains PartitionIndex: objects of a namespaced type by their
//     namespace's partition, Namespace objects by their own name's, other cluster-scoped
//     objects by the cluster partition. Keys answers from it.
//   - An informer created after the start is started at once, and fills from its own first
//     (filtered) list.
//   - Lock order: Cache.mu before serverFilter.mu and admission.mu; feed.mu is never taken
//     under Cache.mu.

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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
	// stops stop each running informer on its own (Remove); Run's context stops them all.
	stops map[Key]context.CancelFunc
	// health is the list state of each optional informer (optional.go).
	health  map[Key]*health
	parts   map[partition.ID]*partitionState
	started bool
	runCtx  context.Context
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
	// health is set for an optional informer.
	health *health
}

// synced is what the cache waits for of p: its HasSynced, or its failing (optional.go).
func (p plainInformer) synced() toolscache.InformerSynced { return syncedOrFailing(p.inf, p.health) }

// testHooks lets this package's tests act at precise points of a warm-up.
type testHooks struct {
	// afterNamespaceList runs after a warm-up list returned and before it is merged.
	afterNamespaceList func(resource, namespace string)
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
		parts:       map[partition.ID]*partitionState{},
		stops:       map[Key]context.CancelFunc{},
		health:      map[Key]*health{},
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

// newPlainInformer builds an informer not filtered by partition: of a cluster-scoped
// type, or of a field-selected one (every namespace, only the objects its selector
// selects, listed and watched with it). Namespace objects are indexed by the partition of
// their own name (Prepare needs them to know a partition's namespaces); other objects by
// the cluster partition, whose work reads them.
func (c *Cache) newPlainInformer(rt ResourceType) toolscache.SharedIndexInformer {
	selected := func(opts metav1.ListOptions) metav1.ListOptions {
		if rt.FieldSelector != "" {
			opts.FieldSelector = rt.FieldSelector
		}
		return opts
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return rt.List(ctx, c.client, "", selected(opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return rt.Watch(ctx, c.client, "", selected(opts))
		},
	}
	var lwi toolscache.ListerWatcher = toolscache.ToListWatcherWithWatchListSemantics(lw, c.client)
	if c.opts.DisableWatchList || rt.Metadata { // metadata: see newFeed
		lwi = unsupportedWatchList{lw}
	}
	index := c.clusterIndexFunc
	if rt.Resource == NamespacesResource && rt.FieldSelector == "" {
		index = c.partitionIndexFunc
	}
	indexers := toolscache.Indexers{PartitionIndex: index}
	if !rt.ClusterScoped {
		// A field-selected informer of a namespaced type: listers by namespace use it.
		indexers[toolscache.NamespaceIndex] = toolscache.MetaNamespaceIndexFunc
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lwi, rt.Object, toolscache.SharedIndexInformerOptions{
		ResyncPeriod:      c.opts.ResyncPeriod,
		Indexers:          indexers,
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
// Release drops one. Stores of cluster-scoped types hold every object, and so do those of
// a key with a FieldSelector, of every object the selector selects (a separate informer
// from the key's without it).
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
		rt.FieldSelector = key.FieldSelector
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
	rt := MetadataType(key.Resource, mapping.Scope.Name() != meta.RESTScopeNameNamespace, c.opts.MetadataClient)
	rt.FieldSelector = key.FieldSelector
	return rt, nil
}

// MetadataType describes a resource read metadata-only through mc, for a caller that
// knows its scope (from discovery) and passes it to InformerFor.
func MetadataType(gvr schema.GroupVersionResource, clusterScoped bool, mc metadata.Interface) ResourceType {
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
	rt, h := c.optionalLocked(rt)
	if rt.whole() {
		inf := c.newPlainInformer(rt)
		c.plain[key] = inf
		c.plainOrder = append(c.plainOrder, plainInformer{key: key, inf: inf, health: h})
		if c.started {
			c.runInformerLocked(key, inf)
		}
		return inf
	}
	f := newFeed(rt, c.client, c.adm, c.opts.DisableWatchList, c.loggerLocked().WithValues("resource", rt.Name()))
	f.hooks = &c.hooks
	f.health = h
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
		c.runInformerLocked(key, inf)
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
func (c *Cache) Keys(key Key, partition partition.ID) ([]string, error) {
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
// as discovery tells). A field-selected key of a namespaced resource is not, though its
// informer is cached whole.
func (c *Cache) ClusterScoped(key Key) (bool, error) {
	c.mu.Lock()
	if f := c.feeds[key]; f != nil {
		c.mu.Unlock()
		return false, nil
	}
	if c.plain[key] != nil && key.FieldSelector == "" {
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

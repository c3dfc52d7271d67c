package shardcache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Mode selects where objects of partitions the shard does not hold are filtered out.
type Mode int

const (
	// ModeClientFilter (the default) watches each resource type cluster-wide and drops
	// other partitions' objects in the shard, before they reach the store. It works with
	// any apiserver; the shard's memory is its own share, its network ingress is not.
	//
	// Server-side filtering (KEP-5866, ListOptions.ShardSelector with kube-apiserver's
	// ShardedListAndWatch gate) would be a second Mode: the feed would send shardRange()
	// selectors covering the admitted partitions' FNV-1a ranges and re-establish its
	// watch when admission changes. It pays off only when a shard's namespaces form few
	// ranges, so it is left for when that is measured.
	ModeClientFilter Mode = iota
)

// Options configures a Cache. The zero value is ready to use.
type Options struct {
	// Mode selects client-side filtering (default) or, later, server-side filtering.
	Mode Mode
	// WarmupConcurrency bounds the namespace-scoped list calls that warm-ups run at the
	// same time, across all partitions and resource types (default 4). The client's own
	// QPS limit applies on top.
	WarmupConcurrency int
	// WarmupPageSize is the page size of warm-up lists (default 500).
	WarmupPageSize int64
	// DisableWatchList makes the informers use classic LIST + WATCH even where
	// client-go would stream the initial list (the WatchListClient feature). Streaming
	// is supported; this is an escape hatch.
	DisableWatchList bool
	// ResyncPeriod is the informers' default handler resync period (default 0: none).
	ResyncPeriod time.Duration
	// PollInterval is how often Prepare and Release check the stores (default 20ms).
	PollInterval time.Duration
}

func (o *Options) defaults() {
	if o.WarmupConcurrency <= 0 {
		o.WarmupConcurrency = 4
	}
	if o.WarmupPageSize <= 0 {
		o.WarmupPageSize = 500
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 20 * time.Millisecond
	}
}

// testHooks lets this package's tests act at precise points of a warm-up.
type testHooks struct {
	// afterNamespaceList runs after a warm-up list returned and before it is merged.
	afterNamespaceList func(resource, namespace string)
}

// Cache is a shard's cache layer: one informer per resource type, cluster-wide, whose
// store holds only objects of the partitions the shard has prepared or acquired, plus an
// unfiltered Namespace informer indexed by partition.
//
// Controllers get ordinary client-go informers and listers from it (InformerFor, or the
// typed accessors such as Pods) and do not know about sharding. The shard runtime drives
// Prepare and Release as the coordinator hands partitions over.
type Cache struct {
	client      kubernetes.Interface
	partitionOf PartitionFunc
	opts        Options
	adm         *admission
	sem         chan struct{} // warm-up list slots
	hooks       testHooks

	nsInformer toolscache.SharedIndexInformer

	mu      sync.Mutex
	feeds   map[schema.GroupVersionResource]*feed
	order   []*feed
	parts   map[uint32]*partitionState
	started bool
	runCtx  context.Context
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
		return nil, errors.New("sharding cache: New needs a client and a PartitionFunc")
	}
	if opts.Mode != ModeClientFilter {
		return nil, fmt.Errorf("sharding cache: unknown mode %d (only ModeClientFilter exists)", opts.Mode)
	}
	opts.defaults()
	c := &Cache{
		client:      client,
		partitionOf: partitionOf,
		opts:        opts,
		adm:         newAdmission(partitionOf),
		sem:         make(chan struct{}, opts.WarmupConcurrency),
		feeds:       map[schema.GroupVersionResource]*feed{},
		parts:       map[uint32]*partitionState{},
	}
	c.nsInformer = c.newNamespaceInformer()
	return c, nil
}

// partitionIndexFunc indexes objects by partition (PartitionIndex).
func (c *Cache) partitionIndexFunc(obj any) ([]string, error) {
	key, _, ok := objectKeys(obj)
	if !ok {
		return nil, nil
	}
	return []string{PartitionIndexValue(c.partitionOf(key))}, nil
}

// newNamespaceInformer builds the Namespace informer. It is not filtered: namespaces are
// few, and Prepare needs all of them to know which namespaces a partition has.
func (c *Cache) newNamespaceInformer() toolscache.SharedIndexInformer {
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return namespaces.List(ctx, c.client, "", opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return namespaces.Watch(ctx, c.client, "", opts)
		},
	}
	var lwi toolscache.ListerWatcher = toolscache.ToListWatcherWithWatchListSemantics(lw, c.client)
	if c.opts.DisableWatchList {
		lwi = unsupportedWatchList{lw}
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lwi, &corev1.Namespace{}, toolscache.SharedIndexInformerOptions{
		ResyncPeriod:      c.opts.ResyncPeriod,
		Indexers:          toolscache.Indexers{PartitionIndex: c.partitionIndexFunc},
		ObjectDescription: namespaces.Name(),
	})
	_ = inf.SetTransform(StripManagedFields)
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{AddFunc: c.onNamespaceAdded})
	return inf
}

// unsupportedWatchList forces classic LIST + WATCH on a ListWatch.
type unsupportedWatchList struct{ *toolscache.ListWatch }

func (unsupportedWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// InformerFor returns the shard's informer for rt, creating it on first use. Every caller
// asking for the same resource shares one informer and one cluster-wide watch. Its store
// holds only objects of admitted partitions; event handlers see synthetic adds when
// Prepare warms a partition and synthetic deletes when Release drops one.
//
// Ask before Start, so that Prepare warms the informer too; an informer created after
// Start is started at once and fills from its own first (filtered) list. It panics if rt
// is incomplete, a programming error.
func (c *Cache) InformerFor(rt ResourceType) toolscache.SharedIndexInformer {
	if err := rt.validate(); err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.feeds[rt.Resource]; f != nil {
		return f.informer
	}
	logger := klog.Background()
	if c.runCtx != nil {
		logger = klog.FromContext(c.runCtx)
	}
	f := newFeed(rt, c.client, c.adm, c.opts.DisableWatchList, logger.WithName("sharding-cache").WithValues("resource", rt.Name()))
	f.hooks = &c.hooks
	inf := toolscache.NewSharedIndexInformerWithOptions(f, rt.Object, toolscache.SharedIndexInformerOptions{
		ResyncPeriod: c.opts.ResyncPeriod,
		Indexers: toolscache.Indexers{
			toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc,
			PartitionIndex:            c.partitionIndexFunc,
		},
		ObjectDescription: rt.Name(),
	})
	_ = inf.SetTransform(StripManagedFields)
	f.informer = inf
	c.feeds[rt.Resource] = f
	c.order = append(c.order, f)
	if c.started {
		go inf.RunWithContext(c.runCtx)
	}
	return inf
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
	go c.nsInformer.RunWithContext(ctx)
	for _, f := range c.order {
		go f.informer.RunWithContext(ctx)
	}
}

// WaitForCacheSync waits until every informer has completed its first list, and so holds
// every partition prepared before Start. It returns ctx's error if ctx ends first.
func (c *Cache) WaitForCacheSync(ctx context.Context) error {
	c.mu.Lock()
	synced := []toolscache.InformerSynced{c.nsInformer.HasSynced}
	for _, f := range c.order {
		synced = append(synced, f.informer.HasSynced)
	}
	c.mu.Unlock()
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("sharding cache: caches did not sync")
	}
	return nil
}

// feedList returns the registered feeds in registration order.
func (c *Cache) feedList() []*feed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*feed(nil), c.order...)
}

// Resources returns the names of the registered resource types, sorted.
func (c *Cache) Resources() []string {
	var out []string
	for _, f := range c.feedList() {
		out = append(out, f.rt.Name())
	}
	sort.Strings(out)
	return out
}

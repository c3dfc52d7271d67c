package shardcache

// The Cache's options and filtering modes. The zero Options is ready to use: defaults
// fills every field left zero, and bounds the selector's ranges and watches by what
// pkg/sharding/hashrange supports.

import (
	"time"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/metadata"
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

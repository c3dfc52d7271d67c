package shardcache

// Statistics and metrics. They are computed at scrape time from the stores and the feeds'
// counters, which are atomics read without the feeds' lock; nothing is registered
// globally.

import (
	"sort"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// ResourceStats describes one informer of the Cache.
type ResourceStats struct {
	// Resource is the resource's name ("pods", "deployments.apps", "namespaces").
	Resource string
	// Objects is the number of objects in the informer's store. For a filtered informer
	// it is counted in the feed's shadow (the store as it will be once the events queued
	// for it are applied, a moment ahead of it), which costs no allocation: listing the
	// store's keys at every heartbeat and scrape made a slice of every cached key each
	// time, most of it at the shard's start, when its heap peaks.
	Objects int
	// ClusterLists counts cluster-wide list calls (pages) of the informer's reflector.
	ClusterLists uint64
	// NamespaceLists counts namespace-scoped list calls (pages) made by warm-ups.
	NamespaceLists uint64
	// Watches counts watch calls.
	Watches uint64
	// DroppedObjects counts listed objects and watch events of partitions that were not
	// admitted: the data the shard received but does not keep.
	DroppedObjects uint64
	// SyntheticEvents counts events the cache made up: warm-up merges, release deletes
	// and bookmarks.
	SyntheticEvents uint64
	// BulkLists counts the cluster-wide list calls (pages) that warmed many namespaces at
	// once (Options.ClusterListThreshold); ClusterLists does not include them.
	BulkLists uint64
	// SelectorRanges is the number of shardRange calls of the selectors the informer's
	// watches use, over every slice (ModeServerFilter; 0 otherwise).
	SelectorRanges int
	// SelectorRestarts counts the upstream watches reopened because the selector changed.
	SelectorRestarts uint64
}

// Stats returns the statistics of every informer, the unfiltered ones (Namespaces and
// other cluster-scoped types) included, without counters, sorted by resource. It backs kshard_shard_cached_objects.
func (c *Cache) Stats() []ResourceStats {
	var out []ResourceStats
	for _, p := range c.plainList() {
		out = append(out, ResourceStats{Resource: p.key.String(), Objects: len(p.inf.GetIndexer().ListKeys())})
	}
	for _, f := range c.feedList() {
		out = append(out, ResourceStats{
			Resource:         f.rt.Name(),
			Objects:          f.shadowCount(),
			ClusterLists:     f.counters.clusterLists.Load(),
			NamespaceLists:   f.counters.namespaceLists.Load(),
			Watches:          f.counters.watches.Load(),
			DroppedObjects:   f.counters.dropped.Load(),
			SyntheticEvents:  f.counters.synthetic.Load(),
			BulkLists:        f.counters.bulkLists.Load(),
			SelectorRanges:   f.selectorRanges(),
			SelectorRestarts: f.counters.selectorRestarts.Load(),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// CachedObjects returns the number of objects in each informer's store by resource.
func (c *Cache) CachedObjects() map[string]int {
	out := map[string]int{}
	for _, s := range c.Stats() {
		out[s.Resource] = s.Objects
	}
	return out
}

// ObjectsOf returns how many objects of partition the shard's partition-filtered
// informers hold (every namespaced type's, over all its namespaces): what a shard that
// takes the partition over must list and cache before it can work it, the cost of
// moving it. Objects of cluster-scoped types and of field-selected informers are cached
// whole by every shard and do not count. It counts the partition index's entries with
// ByIndex, which lists them unsorted (IndexKeys copies and sorts every key): the load
// report calls it for every held partition.
func (c *Cache) ObjectsOf(partition partition.ID) int {
	value := PartitionIndexValue(partition)
	n := 0
	for _, f := range c.feedList() {
		objs, err := f.informer.GetIndexer().ByIndex(PartitionIndex, value)
		if err == nil {
			n += len(objs)
		}
	}
	return n
}

// OpenWatches returns, for each filtered resource type, the number of cluster-wide watch
// streams open towards the apiserver: one per stream (one, or in ModeServerFilter one per
// slice of the selector) while the feed's current watch call runs, 0 between a watch's
// end and the reflector's next call. It does not depend on the number of admitted
// partitions. The Namespace informer's own watch (always one, unfiltered) is not
// included.
func (c *Cache) OpenWatches() map[string]int {
	out := map[string]int{}
	for _, f := range c.feedList() {
		out[f.rt.Name()] += f.openWatches()
	}
	return out
}

// openWatches is the number of streams while the feed's active watch instance runs.
func (f *feed) openWatches() int {
	f.mu.Lock()
	w, n := f.active, len(f.streams)
	f.mu.Unlock()
	if w == nil {
		return 0
	}
	select {
	case <-w.done:
		return 0
	default:
		return n
	}
}

// selectorRanges is the number of ranges of the feed's selector, over every slice.
func (f *feed) selectorRanges() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cov == nil {
		return 0
	}
	return f.cov.set.Ranges()
}

// NamespacesCoveredNotOwned returns, in ModeServerFilter, how many known namespaces the
// selector in force covers although their partition is not admitted: the apiserver
// sends their objects and the shard drops them. It is 0 in ModeClientFilter.
func (c *Cache) NamespacesCoveredNotOwned() int {
	if c.filter == nil {
		return 0
	}
	foreign, _ := c.filter.coveredNotOwned()
	return foreign
}

var selectorRangesDesc = prometheus.NewDesc(
	"kshard_shard_cache_selector_ranges",
	"shardRange calls in the server-side shard selectors (KEP-5866) of the shard's filtered informers, over "+
		"every slice of the hash space, by resource (--server-side-filtering only).",
	[]string{"resource"}, nil,
)

var selectorRestartsDesc = prometheus.NewDesc(
	"kshard_shard_cache_selector_restarts_total",
	"Watches of the shard's filtered informers reopened with a new server-side shard selector, by resource "+
		"(--server-side-filtering only).",
	[]string{"resource"}, nil,
)

var coveredNotOwnedDesc = prometheus.NewDesc(
	"kshard_shard_cache_namespaces_covered_not_owned",
	"Namespaces the server-side shard selector covers although the shard does not hold their partition "+
		"(their objects reach the shard and are dropped; --server-side-filtering only).",
	nil, nil,
)

var cachedObjectsDesc = prometheus.NewDesc(
	"kshard_shard_cached_objects",
	"Objects in the shard's informer stores, by resource.",
	[]string{"resource"}, nil,
)

var watchesDesc = prometheus.NewDesc(
	"kshard_shard_cache_watches",
	"Watch streams the shard's filtered informers hold open to the apiserver, by resource "+
		"(one cluster-wide watch per resource type, or with --server-side-filtering one per slice of "+
		"the shard selector; the unfiltered Namespace informer's watch is not included).",
	[]string{"resource"}, nil,
)

var listsDesc = prometheus.NewDesc(
	"kshard_shard_cache_lists_total",
	"LIST calls (pages) of the shard's filtered informers, by resource and kind: relist (the "+
		"informer's own cluster-wide list), namespace (a warm-up's list of one namespace), "+
		"cluster-warmup (a cluster-wide list that warmed many namespaces at once).",
	[]string{"resource", "kind"}, nil,
)

var failingDesc = prometheus.NewDesc(
	"kshard_shard_cache_resource_failing",
	"1 while the lists of an optional resource (one found by discovery, for the garbage collector and "+
		"ResourceQuota) fail: the shard does not wait for it and its objects are missing from the cache; 0 "+
		"once it lists again. By resource.",
	[]string{"resource"}, nil,
)

// collector exports the Cache's statistics to Prometheus at scrape time.
type metricsCollector struct{ c *Cache }

// Describe implements prometheus.Collector.
func (metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cachedObjectsDesc
	ch <- watchesDesc
	ch <- listsDesc
	ch <- selectorRangesDesc
	ch <- selectorRestartsDesc
	ch <- coveredNotOwnedDesc
	ch <- failingDesc
}

// Collect implements prometheus.Collector.
func (k metricsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range k.c.Stats() {
		ch <- prometheus.MustNewConstMetric(cachedObjectsDesc, prometheus.GaugeValue, float64(s.Objects), s.Resource)
	}
	for _, f := range k.c.feedList() { // the unfiltered informers have no counters
		for kind, n := range map[string]*atomic.Uint64{"relist": &f.counters.clusterLists, "namespace": &f.counters.namespaceLists, "cluster-warmup": &f.counters.bulkLists} {
			ch <- prometheus.MustNewConstMetric(listsDesc, prometheus.CounterValue, float64(n.Load()), f.rt.Name(), kind)
		}
	}
	if k.c.filter != nil {
		for _, f := range k.c.feedList() {
			ch <- prometheus.MustNewConstMetric(selectorRangesDesc, prometheus.GaugeValue, float64(f.selectorRanges()), f.rt.Name())
			ch <- prometheus.MustNewConstMetric(selectorRestartsDesc, prometheus.CounterValue, float64(f.counters.selectorRestarts.Load()), f.rt.Name())
		}
		ch <- prometheus.MustNewConstMetric(coveredNotOwnedDesc, prometheus.GaugeValue, float64(k.c.NamespacesCoveredNotOwned()))
	}
	for _, h := range k.c.healthList() {
		v := 0.0
		if h.isFailing() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(failingDesc, prometheus.GaugeValue, v, h.name)
	}
	for resource, n := range k.c.OpenWatches() {
		ch <- prometheus.MustNewConstMetric(watchesDesc, prometheus.GaugeValue, float64(n), resource)
	}
}

// RegisterMetrics registers kshard_shard_cached_objects{resource},
// kshard_shard_cache_watches{resource} and kshard_shard_cache_lists_total{resource,kind}
// with reg. The values are computed from the stores
// and feeds at scrape time. Nothing is registered globally.
func (c *Cache) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(metricsCollector{c})
}

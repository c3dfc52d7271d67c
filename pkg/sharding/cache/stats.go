package cache

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// ResourceStats describes one informer of the Cache.
type ResourceStats struct {
	// Resource is the resource's name ("pods", "deployments.apps", "namespaces").
	Resource string
	// Objects is the number of objects in the informer's store.
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
}

// Stats returns the statistics of every informer, the Namespace informer included
// (it has no counters), sorted by resource. It backs kshard_shard_cached_objects.
func (c *Cache) Stats() []ResourceStats {
	out := []ResourceStats{{Resource: namespaces.Name(), Objects: len(c.nsInformer.GetIndexer().ListKeys())}}
	for _, f := range c.feedList() {
		out = append(out, ResourceStats{
			Resource:        f.rt.Name(),
			Objects:         len(f.informer.GetIndexer().ListKeys()),
			ClusterLists:    f.counters.clusterLists.Load(),
			NamespaceLists:  f.counters.namespaceLists.Load(),
			Watches:         f.counters.watches.Load(),
			DroppedObjects:  f.counters.dropped.Load(),
			SyntheticEvents: f.counters.synthetic.Load(),
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

var cachedObjectsDesc = prometheus.NewDesc(
	"kshard_shard_cached_objects",
	"Objects in the shard's informer stores, by resource.",
	[]string{"resource"}, nil,
)

// collector exports the Cache's statistics to Prometheus at scrape time.
type metricsCollector struct{ c *Cache }

// Describe implements prometheus.Collector.
func (metricsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cachedObjectsDesc }

// Collect implements prometheus.Collector.
func (k metricsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range k.c.Stats() {
		ch <- prometheus.MustNewConstMetric(cachedObjectsDesc, prometheus.GaugeValue, float64(s.Objects), s.Resource)
	}
}

// RegisterMetrics registers kshard_shard_cached_objects{resource} with reg. The value is
// computed from the stores at scrape time. Nothing is registered globally.
func (c *Cache) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(metricsCollector{c})
}

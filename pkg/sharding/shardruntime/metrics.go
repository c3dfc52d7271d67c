package shardruntime

import "github.com/prometheus/client_golang/prometheus"

var (
	acquiredDesc = prometheus.NewDesc("kshard_shard_acquired_partitions", "Partitions this shard works.", nil, nil)
	preparedDesc = prometheus.NewDesc("kshard_shard_prepared_partitions", "Partitions whose caches this shard keeps without working them (handoff in progress).", nil, nil)
	nsDesc       = prometheus.NewDesc("kshard_shard_namespaces", "Namespaces of the partitions this shard works.", nil, nil)
)

// Collector exposes the runtime's partition and namespace counts, computed at scrape time.
type Collector struct{ rt *Runtime }

// NewCollector returns a collector for rt.
func NewCollector(rt *Runtime) *Collector { return &Collector{rt: rt} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- acquiredDesc
	ch <- preparedDesc
	ch <- nsDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.rt.Stats()
	ch <- prometheus.MustNewConstMetric(acquiredDesc, prometheus.GaugeValue, float64(s.AcquiredPartitions))
	ch <- prometheus.MustNewConstMetric(preparedDesc, prometheus.GaugeValue, float64(s.PreparedPartitions))
	ch <- prometheus.MustNewConstMetric(nsDesc, prometheus.GaugeValue, float64(s.Namespaces))
}

package shardruntime

import "github.com/prometheus/client_golang/prometheus"

var (
	acquiredDesc = prometheus.NewDesc("kshard_shard_acquired_partitions", "Partitions this shard works.", nil, nil)
	preparedDesc = prometheus.NewDesc("kshard_shard_prepared_partitions", "Partitions whose caches this shard keeps without working them (handoff in progress).", nil, nil)
	nsDesc       = prometheus.NewDesc("kshard_shard_namespaces", "Namespaces of the partitions this shard works.", nil, nil)
)

// RegisterMetrics registers kshard_shard_acquired_partitions, _prepared_partitions and
// _namespaces with reg, computed from the runtime at scrape time.
func (r *Runtime) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(collector{rt: r})
}

// collector exposes the runtime's partition and namespace counts.
type collector struct{ rt *Runtime }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- acquiredDesc
	ch <- preparedDesc
	ch <- nsDesc
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.rt.Stats()
	ch <- prometheus.MustNewConstMetric(acquiredDesc, prometheus.GaugeValue, float64(s.AcquiredPartitions))
	ch <- prometheus.MustNewConstMetric(preparedDesc, prometheus.GaugeValue, float64(s.PreparedPartitions))
	ch <- prometheus.MustNewConstMetric(nsDesc, prometheus.GaugeValue, float64(s.Namespaces))
}

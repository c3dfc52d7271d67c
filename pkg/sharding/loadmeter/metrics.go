package loadmeter

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of kshard_shard_partition_load: a partition gets a series only while it carries
// at least partitionSeriesShare of the shard's load, and at most maxPartitionSeries do
// (the busiest), so a shard of thousands of partitions exports a handful of series.
const (
	partitionSeriesShare = 0.05
	maxPartitionSeries   = 20
)

var (
	loadDesc = prometheus.NewDesc("kshard_shard_load",
		"The shard's load, smoothed (half-life 5 min by default) since the shard started, by kind: requests (its "+
			"controllers' API requests per second, each weighted 1/the controller's client QPS scale), reconciles "+
			"(completed reconciles per second), cost (requests + the reconcile weight × reconciles: what "+
			"placement by load is to use; the half-life and weight are the coordinator's).",
		[]string{"kind"}, nil)
	controllerWaitDesc = prometheus.NewDesc("kshard_controller_rate_limiter_wait_seconds_total",
		"Time the requests of a controller's API clients waited for a token of their client-side rate limiter, by controller.",
		[]string{"controller"}, nil)
	partitionLoadDesc = prometheus.NewDesc("kshard_shard_partition_load",
		"Load (cost, as kshard_shard_load) of each partition the shard has held for the meter's minimum age that "+
			"carries at least 5 % of the sum over those partitions, the 20 busiest at most.",
		[]string{"partition"}, nil)
)

// RegisterMetrics registers kshard_shard_load{kind},
// kshard_controller_rate_limiter_wait_seconds_total{controller} and
// kshard_shard_partition_load{partition} with reg. Every scrape samples the counters
// (Snapshot at the meter's clock). Nothing is registered globally.
func (m *Meter) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(collector{m})
}

type collector struct{ m *Meter }

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- loadDesc
	ch <- controllerWaitDesc
	ch <- partitionLoadDesc
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Snapshot(c.m.Now())
	ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, s.Requests, "requests")
	ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, s.Reconciles, "reconciles")
	ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, s.Load, "cost")
	for _, w := range c.m.controllerWaits() {
		ch <- prometheus.MustNewConstMetric(controllerWaitDesc, prometheus.CounterValue, w.wait.Seconds(), w.controller)
	}
	for _, p := range busiest(s) {
		ch <- prometheus.MustNewConstMetric(partitionLoadDesc, prometheus.GaugeValue, p.Load, strconv.FormatUint(uint64(p.Partition), 10))
	}
}

type controllerWait struct {
	controller string
	wait       time.Duration
}

// controllerWaits returns every controller's wait, by name.
func (m *Meter) controllerWaits() []controllerWait {
	m.mu.Lock()
	out := make([]controllerWait, 0, len(m.controllers))
	for name, c := range m.controllers {
		out = append(out, controllerWait{name, time.Duration(c.Load())})
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b controllerWait) int { return cmp.Compare(a.controller, b.controller) })
	return out
}

// busiest returns the partitions of s that get a kshard_shard_partition_load series:
// those carrying at least partitionSeriesShare of the load of all of s's partitions, the
// maxPartitionSeries busiest at most, busiest first.
func busiest(s Snapshot) []PartitionLoad {
	var total float64
	for _, p := range s.Partitions {
		total += p.Load
	}
	if total <= 0 {
		return nil
	}
	var out []PartitionLoad
	for _, p := range s.Partitions {
		if p.Load >= partitionSeriesShare*total {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b PartitionLoad) int {
		if c := cmp.Compare(b.Load, a.Load); c != 0 {
			return c
		}
		return cmp.Compare(a.Partition, b.Partition)
	})
	if len(out) > maxPartitionSeries {
		out = out[:maxPartitionSeries]
	}
	return out
}

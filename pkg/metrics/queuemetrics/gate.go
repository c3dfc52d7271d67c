package queuemetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/gate"
)

// StatsSource is what RegisterGateMetrics reads at scrape time; *gate.Gate implements it.
// It is an interface so that the collector can be tested without a live gate.
type StatsSource interface {
	Stats() gate.Stats
}

// GateCollector exports the sharding layer's view of the work queues, which client-go's
// metrics cannot show: admission drops, stale keys counted in depth, in-flight work, and
// in-flight work. It reads a fresh snapshot on every scrape, so it holds no state of its own.
// Shard-wide state (fenced, acquired partitions) is the shard's series
// (kshard_shard_fenced, kshard_shard_acquired_partitions), not exported here again.
type GateCollector struct {
	src StatsSource

	dropped   *prometheus.Desc
	discarded *prometheus.Desc
	stale     *prometheus.Desc
	pending   *prometheus.Desc
	inFlight  *prometheus.Desc
	refused   *prometheus.Desc
}

var _ prometheus.Collector = (*GateCollector)(nil)

// RegisterGateMetrics registers the per-queue series of src with reg; use the same
// registerer and constant labels as the Provider so the series line up.
func RegisterGateMetrics(reg prometheus.Registerer, src StatsSource, constLabels prometheus.Labels) error {
	return reg.Register(newGateCollector(src, constLabels))
}

// newGateCollector returns a collector for src.
func newGateCollector(src StatsSource, constLabels prometheus.Labels) *GateCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, subsystem, n) }
	perQueue := []string{nameLabel}
	return &GateCollector{
		src: src,
		dropped: prometheus.NewDesc(name("dropped_total"),
			"Total number of keys refused by Add, AddAfter or AddRateLimited because their partition is not acquired by this shard (or the key maps to no partition).",
			perQueue, constLabels),
		discarded: prometheus.NewDesc(name("discarded_total"),
			"Total number of stale keys taken from the queue by a worker and thrown away without work because their partition had been released.",
			perQueue, constLabels),
		stale: prometheus.NewDesc(name("stale_keys"),
			"Keys still held by the queue (ready or delayed) whose partition has been released; client-go cannot remove them, so ready ones are counted in kshard_workqueue_depth until a worker discards them.",
			perQueue, constLabels),
		pending: prometheus.NewDesc(name("pending_keys"),
			"Keys of acquired partitions waiting in the queue (ready or delayed): the live part of the backlog.",
			perQueue, constLabels),
		inFlight: prometheus.NewDesc(name("in_flight_keys"),
			"Keys taken by a worker and not yet done.",
			perQueue, constLabels),
		refused: prometheus.NewDesc(prometheus.BuildFQName(namespace, "shard", "refused_writes_total"),
			"Total number of API writes of the controllers refused or cancelled by the shard's own write fence, by reason: "+
				"fenced (the session lease ran out), not_held (the namespace's partition is not held, e.g. revoked meanwhile), "+
				"revoked (cancelled while in flight because its partition was revoked).",
			[]string{"reason"}, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *GateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dropped, c.discarded, c.stale, c.pending, c.inFlight, c.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *GateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"fenced", s.RefusedWrites.Fenced}, {"not_held", s.RefusedWrites.NotHeld}, {"revoked", s.RefusedWrites.Revoked}} {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(r.n), r.reason)
	}
	// Queues may share a name (client-go's metrics then share series too); sum them so
	// that one name yields one series.
	byName := map[string]*gate.QueueStats{}
	var names []string
	for _, q := range s.Queues {
		sum, ok := byName[q.Name]
		if !ok {
			sum = &gate.QueueStats{Name: q.Name}
			byName[q.Name] = sum
			names = append(names, q.Name)
		}
		sum.Dropped += q.Dropped
		sum.Discarded += q.Discarded
		sum.Stale += q.Stale
		sum.Pending += q.Pending
		sum.InFlight += q.InFlight
	}
	for _, name := range names {
		q := byName[name]
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(q.Dropped), q.Name)
		ch <- prometheus.MustNewConstMetric(c.discarded, prometheus.CounterValue, float64(q.Discarded), q.Name)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(q.Stale), q.Name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(q.Pending), q.Name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(q.InFlight), q.Name)
	}
}

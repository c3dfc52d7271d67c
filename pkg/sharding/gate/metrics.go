package gate

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics registers the gate's series with reg, computed from a fresh Stats at
// every scrape: per queue (label name, the controller name, as on client-go's
// kshard_workqueue_* series) the keys dropped because their partition is not acquired,
// the stale keys discarded and still held, the pending and the in-flight keys; and
// kshard_shard_refused_writes_total{reason}, the writes the fence refused or cancelled.
// Shard-wide state (fenced, acquired partitions) is the shard's series
// (kshard_shard_fenced, kshard_shard_acquired_partitions), not exported here again.
// Nothing is registered globally.
func (g *Gate) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(newCollector(g.Stats))
}

// nameLabel carries the queue name, as on client-go's workqueue series.
const nameLabel = "name"

// collector exports what only the gate knows of the work queues, which client-go's
// metrics cannot show. It reads a fresh snapshot on every scrape and holds no state.
type collector struct {
	stats func() Stats

	dropped   *prometheus.Desc
	discarded *prometheus.Desc
	stale     *prometheus.Desc
	pending   *prometheus.Desc
	inFlight  *prometheus.Desc
	refused   *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// newCollector returns a collector of the snapshots stats takes.
func newCollector(stats func() Stats) *collector {
	name := func(n string) string { return prometheus.BuildFQName("kshard", "workqueue", n) }
	perQueue := []string{nameLabel}
	return &collector{
		stats: stats,
		dropped: prometheus.NewDesc(name("dropped_total"),
			"Total number of keys refused by Add, AddAfter or AddRateLimited because their partition is not acquired by this shard (or the key maps to no partition).",
			perQueue, nil),
		discarded: prometheus.NewDesc(name("discarded_total"),
			"Total number of stale keys taken from the queue by a worker and thrown away without work because their partition had been released.",
			perQueue, nil),
		stale: prometheus.NewDesc(name("stale_keys"),
			"Keys still held by the queue (ready or delayed) whose partition has been released; client-go cannot remove them, so ready ones are counted in kshard_workqueue_depth until a worker discards them.",
			perQueue, nil),
		pending: prometheus.NewDesc(name("pending_keys"),
			"Keys of acquired partitions waiting in the queue (ready or delayed): the live part of the backlog.",
			perQueue, nil),
		inFlight: prometheus.NewDesc(name("in_flight_keys"),
			"Keys taken by a worker and not yet done.",
			perQueue, nil),
		refused: prometheus.NewDesc(prometheus.BuildFQName("kshard", "shard", "refused_writes_total"),
			"Total number of API writes of the controllers refused or cancelled by the shard's own write fence, by reason: "+
				"fenced (the session lease ran out), not_held (the namespace's partition is not held, e.g. revoked meanwhile), "+
				"revoked (cancelled while in flight because its partition was revoked).",
			[]string{"reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dropped, c.discarded, c.stale, c.pending, c.inFlight, c.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"fenced", s.RefusedWrites.Fenced}, {"not_held", s.RefusedWrites.NotHeld}, {"revoked", s.RefusedWrites.Revoked}} {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(r.n), r.reason)
	}
	for _, q := range byName(s.Queues) {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(q.Dropped), q.Name)
		ch <- prometheus.MustNewConstMetric(c.discarded, prometheus.CounterValue, float64(q.Discarded), q.Name)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(q.Stale), q.Name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(q.Pending), q.Name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(q.InFlight), q.Name)
	}
}

// byName sums the stats of queues that share a name, in the order the names first come:
// client-go's metrics of such queues share series too, and one name must yield one series.
func byName(queues []QueueStats) []QueueStats {
	var out []QueueStats
	index := map[string]int{}
	for _, q := range queues {
		i, ok := index[q.Name]
		if !ok {
			i = len(out)
			index[q.Name] = i
			out = append(out, QueueStats{Name: q.Name})
		}
		sum := &out[i]
		sum.Dropped += q.Dropped
		sum.Discarded += q.Discarded
		sum.Stale += q.Stale
		sum.Pending += q.Pending
		sum.InFlight += q.InFlight
	}
	return out
}

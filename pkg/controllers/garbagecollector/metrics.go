package garbagecollector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is kube-controller-manager's subsystem of the garbage collector's
// series: the names are upstream's, so that its dashboards and alerts read kshard's
// shards unchanged.
const metricsSubsystem = "garbagecollector_controller"

// Metrics are the garbage collector's own series. Upstream 1.37 has one; its workqueue
// series (garbage_collector_attempt_to_delete, …_attempt_to_orphan, …_graph_changes)
// come from client-go's workqueue metrics.
type Metrics struct {
	// ResourcesSyncError: garbagecollector_controller_resources_sync_error_total, a
	// discovery round that found nothing or failed for some groups, or resources that did
	// not sync in time. Discovery is the shard's, so the shard counts it (DiscoveryFailed).
	ResourcesSyncError prometheus.Counter
	// CrossPartitionSweeps: kshard_gc_cross_partition_sweeps_total{result}, the sweeps of
	// the cross-shard barrier ("complete", or "failed" when some resource could not be
	// listed).
	CrossPartitionSweeps *prometheus.CounterVec
	// CrossPartitionSweepSeconds: kshard_gc_cross_partition_sweep_seconds, how long one
	// sweep took.
	CrossPartitionSweepSeconds prometheus.Histogram
	// CrossPartitionWaitingOwners: kshard_gc_cross_partition_waiting_owners, the
	// cluster-scoped owners whose last answer from the barrier was pending.
	CrossPartitionWaitingOwners prometheus.Gauge
}

// NewMetrics registers the series with reg; nil registers them nowhere (unit tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ResourcesSyncError: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: metricsSubsystem, Name: "resources_sync_error_total",
			Help: "Number of garbage collector resources sync errors",
		}),
		CrossPartitionSweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_gc_cross_partition_sweeps_total",
			Help: "Sweeps of every namespaced resource for references to cluster-scoped owners in foreground or orphan deletion, by result (complete, failed)."},
			[]string{"result"}),
		CrossPartitionSweepSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_gc_cross_partition_sweep_seconds",
			Help:    "Duration of one sweep of every namespaced resource for references to cluster-scoped owners.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		CrossPartitionWaitingOwners: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_gc_cross_partition_waiting_owners",
			Help: "Cluster-scoped owners waiting for dependents in other shards' namespaces (their last sweep found a reference)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.ResourcesSyncError, m.CrossPartitionSweeps, m.CrossPartitionSweepSeconds, m.CrossPartitionWaitingOwners} {
		if err := promutil.Register(reg, c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// DiscoveryFailed counts one failed discovery round (controllers.DiscoveryFailureCounter): the shard's discovery calls it
// (see the package documentation).
func (c *Controller) DiscoveryFailed() { c.gcm.ResourcesSyncError.Inc() }

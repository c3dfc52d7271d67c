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
}

// NewMetrics registers the series with reg; nil registers them nowhere (unit tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ResourcesSyncError: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: metricsSubsystem, Name: "resources_sync_error_total",
			Help: "Number of garbage collector resources sync errors",
		}),
	}
	if reg == nil {
		return m, nil
	}
	if err := promutil.Register(reg, m.ResourcesSyncError); err != nil {
		return nil, err
	}
	return m, nil
}

// DiscoveryFailed counts one failed discovery round (controllers.DiscoveryFailureCounter): the shard's discovery calls it
// (see the package documentation).
func (c *Controller) DiscoveryFailed() { c.gcm.ResourcesSyncError.Inc() }

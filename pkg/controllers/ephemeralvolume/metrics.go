package ephemeralvolume

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is kube-controller-manager's subsystem of the controller's series: the
// names are upstream's, so dashboards and alerts written for it read kshard's shards.
const metricsSubsystem = "ephemeral_volume_controller"

// createMetrics count the controller's claim creates: every request (create_total) and
// the failed ones (create_failures_total), with upstream's help text (the same for both).
// Under sharding each shard counts its own.
type createMetrics struct {
	attempts prometheus.Counter
	failures prometheus.Counter
}

// newCreateMetrics registers the series with reg; nil reg (unit tests) keeps them
// unregistered.
func newCreateMetrics(reg prometheus.Registerer) (*createMetrics, error) {
	m := &createMetrics{
		attempts: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "create_total",
			Help: "Number of PersistentVolumeClaim creation requests"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "create_failures_total",
			Help: "Number of PersistentVolumeClaim creation requests"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := promutil.Register(reg, m.attempts, m.failures); err != nil {
		return nil, err
	}
	return m, nil
}

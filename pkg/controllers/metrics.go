package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// ReconcileMetrics count reconciles per controller.
type ReconcileMetrics struct {
	Reconciles *prometheus.CounterVec
	Errors     *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
}

// NewReconcileMetrics registers the reconcile metrics with reg.
func NewReconcileMetrics(reg prometheus.Registerer) (*ReconcileMetrics, error) {
	m := &ReconcileMetrics{
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_controller_reconciles_total",
			Help: "Reconciles (syncs of one key) by controller."}, []string{"controller"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_controller_reconcile_errors_total",
			Help: "Reconciles that returned an error (and were retried with backoff), by controller."}, []string{"controller"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kshard_controller_reconcile_duration_seconds",
			Help:    "Duration of one reconcile, by controller.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"controller"}),
	}
	if err := promutil.Register(reg, m.Reconciles, m.Errors, m.Duration); err != nil {
		return nil, err
	}
	return m, nil
}

// Init creates controller's series at zero, so that a rate or an error ratio has a series
// (and a dashboard panel shows 0, not "no data") before the first reconcile or error.
func (m *ReconcileMetrics) Init(controller string) {
	if m == nil {
		return
	}
	m.Reconciles.WithLabelValues(controller)
	m.Errors.WithLabelValues(controller)
	m.Duration.WithLabelValues(controller)
}

// Observe records one reconcile of controller that started at start.
func (m *ReconcileMetrics) Observe(controller string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.Reconciles.WithLabelValues(controller).Inc()
	m.Duration.WithLabelValues(controller).Observe(time.Since(start).Seconds())
	if err != nil {
		m.Errors.WithLabelValues(controller).Inc()
	}
}

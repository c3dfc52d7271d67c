package horizontalpodautoscaling

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/kshard/kshard/pkg/controllers/horizontalpodautoscaling/replicacalc"
	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is upstream's subsystem of the controller's series.
const metricsSubsystem = "horizontal_pod_autoscaler_controller"

// monitor holds the series upstream's monitor exports, under upstream's names, and
// kshard's rebuild series.
type monitor struct {
	reconciliations  *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	computations     *prometheus.CounterVec
	computationTimes *prometheus.HistogramVec
	numHPAs          prometheus.Gauge
	desired          *prometheus.GaugeVec
	staleSkips       *prometheus.CounterVec
	// rebuilds counts histories rebuilt by what they recovered ("none": no rescale within
	// the horizon, "events", "status", "failed": the events could not be listed);
	// rebuildIncomplete the rescales within a policy period whose change was unknown.
	rebuilds          *prometheus.CounterVec
	rebuildIncomplete prometheus.Counter
}

func newMonitor(reg prometheus.Registerer) (*monitor, error) {
	if reg == nil {
		reg = prometheus.NewRegistry() // nobody collects them
	}
	m := &monitor{
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "reconciliations_total",
			Help: "Number of reconciliations of HPA controller. The label 'action' should be either 'scale_down', 'scale_up', or 'none'. Also, the label 'error' should be either 'spec', 'internal', or 'none'."},
			[]string{"action", "error"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: metricsSubsystem, Name: "reconciliation_duration_seconds",
			Help:    "The time(seconds) that the HPA controller takes to reconcile once.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"action", "error"}),
		computations: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "metric_computation_total",
			Help: "Number of metric computations. The label 'action' should be either 'scale_down', 'scale_up', or 'none'. Also, the label 'error' should be either 'spec', 'internal', or 'none'. The label 'metric_type' corresponds to HPA.spec.metrics[*].type"},
			[]string{"action", "error", "metric_type"}),
		computationTimes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: metricsSubsystem, Name: "metric_computation_duration_seconds",
			Help:    "The time(seconds) that the HPA controller takes to calculate one metric.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"action", "error", "metric_type"}),
		numHPAs: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: metricsSubsystem, Name: "num_horizontal_pod_autoscalers",
			Help: "Current number of controlled HPA objects (on this shard)."}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: metricsSubsystem, Name: "desired_replicas",
			Help: "Current desired replica count for HPA objects."}, []string{"namespace", "hpa_name"}),
		staleSkips: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "stale_sync_skips_total",
			Help: "Total number of HPA syncs skipped due to a stale watch cache."}, []string{"group", "resource"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "history_rebuilds_total",
			Help: "kshard: HPA histories rebuilt when an HPA came to this shard, by source: none (no rescale within the horizon), events, status, failed (events not listed)."},
			[]string{"source"}),
		rebuildIncomplete: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "rebuild_incomplete_total",
			Help: "kshard: rescales within a policy period whose change a rebuild could not tell (not counted against the policy)."}),
	}
	if err := promutil.Register(reg, m.reconciliations, m.duration, m.computations, m.computationTimes, m.numHPAs, m.desired, m.staleSkips, m.rebuilds, m.rebuildIncomplete); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *monitor) observeReconciliation(action replicacalc.ActionLabel, errLabel replicacalc.ErrorLabel, d time.Duration) {
	m.reconciliations.WithLabelValues(string(action), string(errLabel)).Inc()
	m.duration.WithLabelValues(string(action), string(errLabel)).Observe(d.Seconds())
}

// observeMetricComputation is the calculator's ObserveMetricComputation.
func (m *monitor) observeMetricComputation(action replicacalc.ActionLabel, errLabel replicacalc.ErrorLabel, d time.Duration, t autoscalingv2.MetricSourceType) {
	m.computations.WithLabelValues(string(action), string(errLabel), string(t)).Inc()
	m.computationTimes.WithLabelValues(string(action), string(errLabel), string(t)).Observe(d.Seconds())
}

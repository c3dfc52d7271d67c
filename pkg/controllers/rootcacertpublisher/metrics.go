package rootcacertpublisher

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is kube-controller-manager's subsystem of the publisher's series: the
// names are upstream's, so dashboards and alerts written for it read kshard's shards.
const metricsSubsystem = "root_ca_cert_publisher"

// syncMetrics are root_ca_cert_publisher_sync_total and
// root_ca_cert_publisher_sync_duration_seconds, by the sync's code: "200" on success, the
// API status code of a failed request, "500" for any other error (upstream's labels).
// Under sharding each shard counts its own syncs.
type syncMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newSyncMetrics registers the series with reg; nil reg (unit tests) keeps them
// unregistered.
func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	m := &syncMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: metricsSubsystem, Name: "sync_total",
			Help: "Number of namespace syncs happened in root ca cert publisher.",
		}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: metricsSubsystem, Name: "sync_duration_seconds",
			Help:    "Number of namespace syncs happened in root ca cert publisher.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"code"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := promutil.Register(reg, m.total, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *syncMetrics) observe(start time.Time, err error) {
	code := syncCode(err)
	m.duration.WithLabelValues(code).Observe(time.Since(start).Seconds())
	m.total.WithLabelValues(code).Inc()
}

// syncCode is upstream's code label of a sync's outcome.
func syncCode(err error) string {
	if err == nil {
		return "200"
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.Status().Code != 0 {
		return strconv.Itoa(int(se.Status().Code))
	}
	return "500"
}

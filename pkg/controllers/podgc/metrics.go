package podgc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is kube-controller-manager's subsystem of the controller's series: the
// names, labels and reasons are upstream's, so that dashboards and alerts written for it
// read kshard's shards.
const metricsSubsystem = "pod_gc_collector"

// The values of the reason label: which pass deleted the pod.
const (
	reasonTerminated   = "terminated"
	reasonOutOfService = "out-of-service"
	reasonOrphaned     = "orphaned"
	reasonUnscheduled  = "unscheduled"
)

// Metrics are the controller's series: force_delete_pods_total and
// force_delete_pod_errors_total{namespace,reason}, counted as upstream counts them (an
// attempt counts whether or not it failed). Under sharding each shard counts the pods of
// its own namespaces.
type Metrics struct {
	Deleting *prometheus.CounterVec
	Errors   *prometheus.CounterVec
}

// NewMetrics registers the series with reg; nil reg (unit tests) keeps them unregistered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Deleting: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "force_delete_pods_total",
			Help: "Number of pods that are being forcefully deleted since the Pod GC Controller started."}, []string{"namespace", "reason"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: "force_delete_pod_errors_total",
			Help: "Number of errors encountered when forcefully deleting the pods since the Pod GC Controller started."}, []string{"namespace", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := promutil.Register(reg, m.Deleting, m.Errors); err != nil {
		return nil, err
	}
	return m, nil
}

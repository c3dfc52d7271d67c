package queuemetrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

const (
	namespace = "kshard"
	subsystem = "workqueue"
	// nameLabel carries the queue name, which kshard sets to the controller name.
	nameLabel = "name"
)

// latencyBuckets span 10µs to ~42s in ×4 steps. Controller work is dominated by API
// calls (milliseconds to seconds) and queue waits grow to tens of seconds under backlog;
// client-go's upstream nanosecond-to-10s buckets waste most of their resolution below
// what a reconcile can take.
var latencyBuckets = prometheus.ExponentialBuckets(1e-5, 4, 12)

// Provider is a workqueue.MetricsProvider that exports client-go's queue metrics to a
// caller-supplied Prometheus registerer. One Provider serves all queues of a process;
// each queue gets its own series through the name label. Pass it as
// QueueConfig.MetricsProvider rather than through client-go's process-global
// workqueue.SetProvider, which only honours its first caller.
type Provider struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	queueDuration  *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinishedWork *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*Provider)(nil)

// NewProvider creates the metric vectors and registers them with reg. constLabels (for
// example {"shard": "shard-0"}) are attached to every series. If reg already holds
// identical collectors (another Provider with the same constant labels), they are reused,
// so creating a Provider twice for one registry is safe; any other registration conflict
// is returned as an error.
func NewProvider(reg prometheus.Registerer, constLabels prometheus.Labels) (*Provider, error) {
	if reg == nil {
		return nil, errors.New("workqueue metrics: nil prometheus.Registerer")
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, ConstLabels: constLabels,
		}, []string{nameLabel})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, ConstLabels: constLabels,
		}, []string{nameLabel})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, ConstLabels: constLabels,
			Buckets: latencyBuckets,
		}, []string{nameLabel})
	}

	p := &Provider{
		depth: gauge("depth",
			"Current number of ready keys in the work queue, including stale keys of released partitions not yet discarded (see kshard_workqueue_stale_keys)."),
		adds: counter("adds_total",
			"Total number of keys added to the work queue (after partition admission)."),
		queueDuration: histogram("queue_duration_seconds",
			"How long a key stays in the work queue before a worker takes it, in seconds."),
		workDuration: histogram("work_duration_seconds",
			"How long processing a key takes, in seconds; discarded stale keys count as near-zero observations."),
		unfinishedWork: gauge("unfinished_work_seconds",
			"Seconds of work in progress that has not been observed by work_duration_seconds; a large value suggests stuck workers."),
		longestRunning: gauge("longest_running_processor_seconds",
			"How long the longest-running worker of the queue has been processing its key, in seconds."),
		retries: counter("retries_total",
			"Total number of delayed or rate-limited re-adds handled by the work queue."),
	}
	var err error
	if p.depth, err = register(reg, p.depth); err != nil {
		return nil, err
	}
	if p.adds, err = register(reg, p.adds); err != nil {
		return nil, err
	}
	if p.queueDuration, err = register(reg, p.queueDuration); err != nil {
		return nil, err
	}
	if p.workDuration, err = register(reg, p.workDuration); err != nil {
		return nil, err
	}
	if p.unfinishedWork, err = register(reg, p.unfinishedWork); err != nil {
		return nil, err
	}
	if p.longestRunning, err = register(reg, p.longestRunning); err != nil {
		return nil, err
	}
	if p.retries, err = register(reg, p.retries); err != nil {
		return nil, err
	}
	return p, nil
}

// register registers c, or returns the identical collector already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("workqueue metrics: register: %w", err)
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *Provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

// NewLatencyMetric implements workqueue.MetricsProvider (time spent queued).
func (p *Provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.queueDuration.WithLabelValues(name)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *Provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinishedWork.WithLabelValues(name)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *Provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(name)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *Provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}

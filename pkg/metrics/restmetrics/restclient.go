package restmetrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
	"k8s.io/client-go/tools/metrics"
)

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

type latency struct{ h *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, _ url.URL, d time.Duration) {
	l.h.WithLabelValues(verb).Observe(d.Seconds())
}

type result struct{ c *prometheus.CounterVec }

func (r result) Increment(_ context.Context, code, method, _ string) {
	r.c.WithLabelValues(code, method).Inc()
}

func (r result) IncrementRetry(_ context.Context, code, method, _ string) {
	r.c.WithLabelValues(code, method).Inc()
}

// Register sends client-go's REST client metrics to reg. Only the first call in a process
// has an effect (client-go's rule).
func Register(reg prometheus.Registerer) error {
	req := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kshard_rest_client_request_duration_seconds",
		Help: "Latency of Kubernetes API requests, by verb.", Buckets: latencyBuckets}, []string{"verb"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kshard_rest_client_rate_limiter_duration_seconds",
		Help: "Time Kubernetes API requests waited for the client-side rate limiter, by verb.", Buckets: latencyBuckets}, []string{"verb"})
	res := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_rest_client_requests_total",
		Help: "Kubernetes API requests, by HTTP status code and method."}, []string{"code", "method"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_rest_client_request_retries_total",
		Help: "Kubernetes API request retries, by HTTP status code and method."}, []string{"code", "method"})
	if err := promutil.Register(reg, req, wait, res, retries); err != nil {
		return err
	}
	metrics.Register(metrics.RegisterOpts{
		RequestLatency:     latency{req},
		RateLimiterLatency: latency{wait},
		RequestResult:      result{res},
		RequestRetry:       result{retries},
	})
	return nil
}

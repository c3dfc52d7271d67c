package queuemetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

var shardLabels = prometheus.Labels{"shard": "s1"}

// partitionByDigit maps namespace "nsN" (single digit) to partition N.
var partitionByDigit = gate.NamespaceNameKeys(func(ns string) partition.ID {
	return partition.ID(ns[len(ns)-1] - '0')
})

// sample returns the value of the series name{labels} gathered from g: the counter,
// gauge or histogram sample count. It fails the test if the series does not exist.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestProviderExportsClientGoQueueMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := NewProvider(reg, shardLabels)
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	g := gate.New(partitionByDigit)
	g.Acquire(1)
	q := g.NewQueue(gate.QueueConfig{
		Name:            "deployment",
		MetricsProvider: p,
		// Zero backoff: AddRateLimited re-adds at once, so counts are deterministic.
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0),
	})
	defer q.ShutDown()

	q.Add("ns1/a")
	q.Add("ns1/b")
	q.Add("ns2/x") // partition not acquired: dropped before client-go sees it
	q.AddRateLimited("ns1/c")
	k, _ := q.Get()
	q.Done(k)

	series := map[string]string{"name": "deployment", "shard": "s1"}
	tests := []struct {
		name   string
		metric string
		want   float64
	}{
		{name: "adds count only admitted keys", metric: "kshard_workqueue_adds_total", want: 3},
		{name: "depth", metric: "kshard_workqueue_depth", want: 2},
		{name: "retries", metric: "kshard_workqueue_retries_total", want: 1},
		{name: "queue duration observed once", metric: "kshard_workqueue_queue_duration_seconds", want: 1},
		{name: "work duration observed once", metric: "kshard_workqueue_work_duration_seconds", want: 1},
		{name: "unfinished work exists", metric: "kshard_workqueue_unfinished_work_seconds", want: 0},
		{name: "longest running processor exists", metric: "kshard_workqueue_longest_running_processor_seconds", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sample(t, reg, tt.metric, series); got != tt.want {
				t.Fatalf("%s = %v, want %v", tt.metric, got, tt.want)
			}
		})
	}

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
}

func TestNewProviderRegistration(t *testing.T) {
	tests := []struct {
		name    string
		reg     func() prometheus.Registerer
		wantErr string
	}{
		{name: "nil registerer", reg: func() prometheus.Registerer { return nil }, wantErr: "nil prometheus.Registerer"},
		{
			name: "second provider on one registry shares the collectors",
			reg: func() prometheus.Registerer {
				r := prometheus.NewRegistry()
				if _, err := NewProvider(r, shardLabels); err != nil {
					panic(err)
				}
				return r
			},
		},
		{
			name: "conflicting collector is an error",
			reg: func() prometheus.Registerer {
				r := prometheus.NewRegistry()
				r.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_workqueue_depth", Help: "other", ConstLabels: shardLabels}))
				return r
			},
			wantErr: "kshard_workqueue_depth",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewProvider(tt.reg(), shardLabels)
			if tt.wantErr == "" {
				if err != nil || p == nil {
					t.Fatalf("NewProvider = %v, %v; want a provider", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewProvider error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestProvidersOnOneRegistryShareSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	p1, err := NewProvider(reg, shardLabels)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := NewProvider(reg, shardLabels)
	if err != nil {
		t.Fatal(err)
	}
	p1.NewAddsMetric("job").Inc()
	p2.NewAddsMetric("job").Inc()
	if got := sample(t, reg, "kshard_workqueue_adds_total", map[string]string{"name": "job", "shard": "s1"}); got != 2 {
		t.Fatalf("adds_total = %v, want 2", got)
	}
}

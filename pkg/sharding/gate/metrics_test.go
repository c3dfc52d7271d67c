package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gathered returns every sample reg gathers as "name{label=value,…}" (labels sorted) →
// value, after checking the series with Prometheus's linter.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			slices.Sort(labels)
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[fmt.Sprintf("%s{%s}", mf.GetName(), strings.Join(labels, ","))] = v
		}
	}
	return out
}

// register registers c as the shard does: through a registerer that adds the shard label.
func register(t *testing.T, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := prometheus.WrapRegistererWith(prometheus.Labels{"shard": "s1"}, reg).Register(c); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestMetrics(t *testing.T) {
	tests := []struct {
		name  string
		stats Stats
		want  map[string]float64 // a subset of the series
	}{
		{
			name:  "a gate without queues exports no queue series: shard-wide state is the shard's series",
			stats: Stats{Acquired: 3, Fenced: true, RefusedWrites: RefusedWrites{NotHeld: 2}},
			want: map[string]float64{
				"kshard_shard_refused_writes_total{reason=fenced,shard=s1}":   0,
				"kshard_shard_refused_writes_total{reason=not_held,shard=s1}": 2,
				"kshard_shard_refused_writes_total{reason=revoked,shard=s1}":  0,
			},
		},
		{
			name: "queues with the same name are summed",
			stats: Stats{Fenced: true, Queues: []QueueStats{
				{Name: "job", Dropped: 2, Discarded: 1, Stale: 4, Pending: 5, InFlight: 1},
				{Name: "job", Dropped: 1, Stale: 1},
				{Name: "cronjob", Pending: 7},
			}},
			want: map[string]float64{
				"kshard_workqueue_dropped_total{name=job,shard=s1}":      3,
				"kshard_workqueue_discarded_total{name=job,shard=s1}":    1,
				"kshard_workqueue_stale_keys{name=job,shard=s1}":         5,
				"kshard_workqueue_pending_keys{name=job,shard=s1}":       5,
				"kshard_workqueue_in_flight_keys{name=job,shard=s1}":     1,
				"kshard_workqueue_pending_keys{name=cronjob,shard=s1}":   7,
				"kshard_workqueue_dropped_total{name=cronjob,shard=s1}":  0,
				"kshard_workqueue_in_flight_keys{name=cronjob,shard=s1}": 0,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gathered(t, register(t, newCollector(func() Stats { return tt.stats })))
			for series, want := range tt.want {
				if v, ok := got[series]; !ok || v != want {
					t.Errorf("%s = %v (present: %v), want %v", series, v, ok, want)
				}
			}
			if len(tt.stats.Queues) == 0 {
				for series := range got {
					if strings.HasPrefix(series, "kshard_workqueue_") {
						t.Errorf("%s exported for a gate without queues", series)
					}
				}
			}
		})
	}
}

func TestMetricsOfLiveGate(t *testing.T) {
	g := New(testPartition)
	g.Acquire(1)
	g.Acquire(2)
	q := g.NewQueue(QueueConfig{Name: "replicaset"})
	defer q.ShutDown()
	q.Add("ns1/a")
	q.Add("ns2/b")
	q.Add("ns3/c") // dropped
	if err := g.Release(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	g.SetDeadline(time.Unix(1, 0))

	reg := prometheus.NewRegistry()
	if err := g.RegisterMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"shard": "s1"}, reg)); err != nil {
		t.Fatal(err)
	}
	got := gathered(t, reg)
	for series, want := range map[string]float64{
		"kshard_workqueue_dropped_total{name=replicaset,shard=s1}":  1,
		"kshard_workqueue_stale_keys{name=replicaset,shard=s1}":     1,
		"kshard_workqueue_pending_keys{name=replicaset,shard=s1}":   1,
		"kshard_workqueue_in_flight_keys{name=replicaset,shard=s1}": 0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present: %v), want %v", series, v, ok, want)
		}
	}
	for series := range got {
		if strings.HasPrefix(series, "kshard_workqueue_fenced") || strings.HasPrefix(series, "kshard_workqueue_acquired_partitions") {
			t.Errorf("%s is exported: it duplicates the shard's kshard_shard_* series", series)
		}
	}
}

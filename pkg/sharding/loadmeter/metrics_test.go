package loadmeter

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestBusiest: which partitions get a kshard_shard_partition_load series: those with at
// least 5 % of the shard's load, busiest first, 20 at most.
func TestBusiest(t *testing.T) {
	loads := func(ls ...float64) Snapshot {
		var s Snapshot
		for i, l := range ls {
			s.Partitions = append(s.Partitions, PartitionLoad{Partition: partition.ID(i), Load: l})
		}
		return s
	}
	even := make([]float64, 30)
	for i := range even {
		even[i] = 1
	}
	twenty := make([]float64, 20)
	for i := range twenty {
		twenty[i] = 1
	}
	tests := []struct {
		name string
		s    Snapshot
		want []partition.ID
	}{
		{name: "no load", s: loads(0, 0, 0)},
		{name: "no partitions", s: Snapshot{}},
		{name: "one hot, a cold tail", s: loads(0.1, 50, 0.2, 3, 0.4), want: []partition.ID{1, 3}},
		{name: "thirty even partitions: none above 5 %", s: loads(even...)},
		{name: "twenty even partitions: all at 5 %", s: loads(twenty...), want: []partition.ID{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}},
		{name: "ties by partition", s: loads(1, 2, 2, 1), want: []partition.ID{1, 2, 0, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []partition.ID
			for _, p := range busiest(tc.s) {
				got = append(got, p.Partition)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("series for %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMetrics: the series a shard exports, registered as its other series are.
func TestMetrics(t *testing.T) {
	m, c := newTestMeter(t, DefaultOptions())
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"shard": "s1"}, reg)); err != nil {
		t.Fatal(err)
	}
	m.Acquired(1)
	m.Acquired(2)
	send(t, Transport(m, nsPartition, 1)(okRT{}), "/api/v1/namespaces/ns1/pods", 100)
	send(t, Transport(m, nsPartition, 1)(okRT{}), "/api/v1/namespaces/ns2/pods", 1)
	m.Done(1)
	lim := Limiter(m, "job", instant{wait: time.Millisecond})
	if err := lim.Wait(gate.WithPartition(context.Background(), 1)); err != nil {
		t.Fatal(err)
	}
	Limiter(m, "cronjob", instant{}) // a controller that never waited still has its series
	c.advance(10 * time.Second)

	got := gather(t, reg)
	want := map[string]float64{
		`kshard_shard_load{kind="requests",shard="s1"}`:   10.1, // 101 requests in 10 s
		`kshard_shard_load{kind="reconciles",shard="s1"}`: 0.1,
		`kshard_shard_load{kind="cost",shard="s1"}`:       10.1 + 0.1*0.1,
		// Partition 1 carries 99 % of the load; 2, 1 %, gets no series.
		`kshard_shard_partition_load{partition="1",shard="s1"}`: 10 + 0.1*0.1,
	}
	for series, v := range want {
		if g, ok := got[series]; !ok || !near(g, v) {
			t.Errorf("%s = %v (exported: %t), want %v", series, g, ok, v)
		}
	}
	var partitions, waits []string
	for series, v := range got {
		switch {
		case strings.HasPrefix(series, "kshard_shard_partition_load{"):
			partitions = append(partitions, series)
		case strings.HasPrefix(series, "kshard_controller_rate_limiter_wait_seconds_total{"):
			waits = append(waits, series)
			if strings.Contains(series, `controller="job"`) && v < time.Millisecond.Seconds() {
				t.Errorf("%s = %v, want at least 1 ms", series, v)
			}
		}
	}
	if len(partitions) != 1 {
		t.Errorf("partition series %v, want partition 1's only", partitions)
	}
	slices.Sort(waits)
	if want := []string{`kshard_controller_rate_limiter_wait_seconds_total{controller="cronjob",shard="s1"}`,
		`kshard_controller_rate_limiter_wait_seconds_total{controller="job",shard="s1"}`}; !slices.Equal(waits, want) {
		t.Errorf("wait series %v, want %v", waits, want)
	}
}

// gather returns every sample of reg by name{labels}, labels sorted by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := s.GetGauge().GetValue()
			if s.GetCounter() != nil {
				v = s.GetCounter().GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

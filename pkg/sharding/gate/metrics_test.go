package gate

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsSumQueuesByName(t *testing.T) {
	got := byName([]QueueStats{
		{Name: "job", Dropped: 2, Discarded: 1, Stale: 4, Pending: 5, InFlight: 1},
		{Name: "cronjob", Pending: 7},
		{Name: "job", Dropped: 1, Stale: 1},
	})
	want := []QueueStats{
		{Name: "job", Dropped: 3, Discarded: 1, Stale: 5, Pending: 5, InFlight: 1},
		{Name: "cronjob", Pending: 7},
	}
	if !slices.Equal(got, want) {
		t.Errorf("byName = %+v, want %+v", got, want)
	}
}

func TestMetricsWithoutQueues(t *testing.T) {
	c := newCollector(func() Stats { return Stats{Acquired: 3, Fenced: true} })
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	// Shard-wide state is the shard's series (kshard_shard_*), not the gate's.
	if n := testutil.CollectAndCount(c); n != 3 {
		t.Errorf("%d series, want only kshard_shard_refused_writes_total's 3 reasons", n)
	}
	if n := testutil.CollectAndCount(c, "kshard_shard_refused_writes_total"); n != 3 {
		t.Errorf("%d kshard_shard_refused_writes_total series, want 3", n)
	}
}

// TestMetricsOfLiveGate pins the series' names, help, types and labels: dashboards and
// alerts use them.
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

	reg := prometheus.NewPedanticRegistry()
	if err := g.RegisterMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"shard": "s1"}, reg)); err != nil {
		t.Fatal(err)
	}
	want := `# HELP kshard_shard_refused_writes_total Total number of API writes of the controllers refused or cancelled by the shard's own write fence, by reason: fenced (the session lease ran out), not_held (the namespace's partition is not held, e.g. revoked meanwhile), revoked (cancelled while in flight because its partition was revoked).
# TYPE kshard_shard_refused_writes_total counter
kshard_shard_refused_writes_total{reason="fenced",shard="s1"} 0
kshard_shard_refused_writes_total{reason="not_held",shard="s1"} 0
kshard_shard_refused_writes_total{reason="revoked",shard="s1"} 0
# HELP kshard_workqueue_discarded_total Total number of stale keys taken from the queue by a worker and thrown away without work because their partition had been released.
# TYPE kshard_workqueue_discarded_total counter
kshard_workqueue_discarded_total{name="replicaset",shard="s1"} 0
# HELP kshard_workqueue_dropped_total Total number of keys refused by Add, AddAfter or AddRateLimited because their partition is not acquired by this shard (or the key maps to no partition).
# TYPE kshard_workqueue_dropped_total counter
kshard_workqueue_dropped_total{name="replicaset",shard="s1"} 1
# HELP kshard_workqueue_in_flight_keys Keys taken by a worker and not yet done.
# TYPE kshard_workqueue_in_flight_keys gauge
kshard_workqueue_in_flight_keys{name="replicaset",shard="s1"} 0
# HELP kshard_workqueue_pending_keys Keys of acquired partitions waiting in the queue (ready or delayed): the live part of the backlog.
# TYPE kshard_workqueue_pending_keys gauge
kshard_workqueue_pending_keys{name="replicaset",shard="s1"} 1
# HELP kshard_workqueue_stale_keys Keys still held by the queue (ready or delayed) whose partition has been released; client-go cannot remove them, so ready ones are counted in kshard_workqueue_depth until a worker discards them.
# TYPE kshard_workqueue_stale_keys gauge
kshard_workqueue_stale_keys{name="replicaset",shard="s1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

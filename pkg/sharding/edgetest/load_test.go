package edgetest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
)

// testLoad are the load settings of these tests: a report every second heartbeat.
var testLoad = handoff.LoadSettings{ReportInterval: 2 * testConfig().HeartbeatInterval, HalfLife: 10 * time.Second, ReconcileWeight: 0.25}

// shardView returns the coordinator's view of one shard, if it is a member.
func shardView(a coordinatorrpc.Assignments, id string) (coordinatorrpc.ShardView, bool) {
	for _, s := range a.Shards {
		if s.Shard == id {
			return s, true
		}
	}
	return coordinatorrpc.ShardView{}, false
}

// TestLoadReportRaw: a hand-written shard is welcomed with the coordinator's load
// settings, and its heartbeat with a load report of partitions it does not hold (every
// partition, while it holds none) is acknowledged and reaches the state machine, which
// records it for the shard: the report is no reason to refuse or fence anybody. A
// heartbeat without a report records nothing; a report sooner than half the cadence after
// the last is dropped, its heartbeat acknowledged all the same.
func TestLoadReportRaw(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) {
		o.Config.Load = testLoad
		// A raw shard heartbeats only when the test says: a lease far longer than the test
		// keeps it a member throughout, however slow the machine.
		o.Config.SessionTTL, o.Config.Margin = time.Minute, 2*time.Second
	})
	co.lead(t, 1)
	const shard = "raw-load"
	malformed0 := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues("malformed"))

	stream := openStream(t, co.addr)
	if err := stream.Send(hello(shard, 1)); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil || m.GetWelcome() == nil {
		t.Fatalf("got %v, %v; want a Welcome", m, err)
	}
	wel := m.GetWelcome()
	if got := (handoff.LoadSettings{ReportInterval: wel.LoadReportInterval.AsDuration(), HalfLife: wel.LoadHalfLife.AsDuration(),
		ReconcileWeight: wel.ReconcileWeight}); got != testLoad {
		t.Fatalf("welcome's load settings %+v, want %+v", got, testLoad)
	}
	every := make([]uint32, partitions)
	for p := range every {
		every[p] = uint32(p)
	}
	ones := slices.Repeat([]uint32{1}, partitions)
	// awaitAck reads until the acknowledgement of seq (a grant to the raw shard may come
	// first once the new leader's grace is over).
	awaitAck := func(seq uint64) {
		t.Helper()
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for the ack of heartbeat %d: %v", seq, err)
			}
			if m.GetSessionEnded() != nil {
				t.Fatalf("session ended waiting for the ack of heartbeat %d", seq)
			}
			if a := m.GetAck(); a != nil && a.Seq == seq {
				return
			}
		}
	}
	view := func() coordinatorrpc.ShardView {
		t.Helper()
		a, ok := co.assignments(t)
		if !ok {
			t.Fatal("the coordinator is not leading")
		}
		v, ok := shardView(a, shard)
		if !ok {
			t.Fatalf("%s is not a member: %+v", shard, a.Shards)
		}
		return v
	}
	if v := view(); v.LoadReports != 0 || v.LoadEntries != 0 {
		t.Fatalf("before any report: %d reports, %d entries", v.LoadReports, v.LoadEntries)
	}

	if err := stream.Send(loadHeartbeat(1, 1, every, ones, ones, ones)); err != nil {
		t.Fatal(err)
	}
	awaitAck(1)
	acked1 := time.Now() // the coordinator took report 1 before this
	if v := view(); v.LoadReports != 1 || v.LoadEntries != partitions {
		t.Fatalf("after a report of %d partitions: %d reports, the last of %d entries", partitions, v.LoadReports, v.LoadEntries)
	}
	if err := stream.Send(heartbeat(1, 2)); err != nil {
		t.Fatal(err)
	}
	awaitAck(2)
	if v := view(); v.LoadReports != 1 {
		t.Fatalf("a heartbeat without a report counted as one: %d reports", v.LoadReports)
	}
	if err := stream.Send(loadHeartbeat(1, 3, nil, nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	awaitAck(3)
	if v := view(); v.LoadReports != 1 || v.LoadEntries != partitions {
		t.Fatalf("a report at once after the last was taken: %d reports, the last of %d entries; want 1 and %d", v.LoadReports, v.LoadEntries, partitions)
	}
	// The protocol's own clock: reports are due every cadence (two heartbeats here);
	// one half a cadence after the last is taken.
	cadence := testLoad.Cadence(testConfig().HeartbeatInterval)
	time.Sleep(time.Until(acked1.Add(cadence / 2)))
	if err := stream.Send(loadHeartbeat(1, 4, nil, nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	awaitAck(4)
	if v := view(); v.LoadReports != 2 || v.LoadEntries != 0 {
		t.Fatalf("after an empty report: %d reports, the last of %d entries; want 2 and 0", v.LoadReports, v.LoadEntries)
	}
	if n := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues("malformed")); n != malformed0 {
		t.Errorf("malformed messages went from %v to %v", malformed0, n)
	}
}

// loadReporter is a shardrpc.LoadReporter that reports the same entries every time and
// records the settings each Welcome gave it.
type loadReporter struct {
	mu       sync.Mutex
	report   protocol.LoadReport
	settings []protocol.LoadSettings
}

func (r *loadReporter) Load() protocol.LoadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.report
	out.Partitions = slices.Clone(r.report.Partitions)
	return out
}

func (r *loadReporter) SetLoadSettings(l protocol.LoadSettings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings = append(r.settings, l)
}

// TestLoadReportsFromClients: real shard clients with a load reporter, each reporting
// every partition (half of them held by the other shard), are given the coordinator's
// settings, and their reports reach the state machine at the Welcome's cadence (their
// rate-limiter wait shown in /assignments); every
// heartbeat is acknowledged (nobody fences, nothing moves, no message is refused) and no
// partition is worked twice meanwhile.
func TestLoadReportsFromClients(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) { o.Config.Load = testLoad })
	co.lead(t, 1)
	every := make([]protocol.PartitionLoad, partitions)
	for p := range every {
		every[p] = protocol.PartitionLoad{Partition: partition.ID(p), LoadMilli: uint32(100 * p), Objects: uint32(p), AgeSeconds: 5}
	}
	var live []*shard
	reporters := map[string]*loadReporter{}
	for _, id := range []string{"shard-a", "shard-b"} {
		r := &loadReporter{report: protocol.LoadReport{Partitions: every, LimiterWaitPermille: 7}}
		reporters[id] = r
		live = append(live, startShard(t, w, id, insecureClient(t), []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) { o.LoadReporter = r }))
	}
	owners := co.waitSettled(t, w, live...)
	malformed0 := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues("malformed"))
	moves0 := testutil.ToFloat64(co.metrics.MovesStarted)
	const reports = 4
	waitFor(t, settleTimeout, fmt.Sprintf("%d load reports of %d entries from each shard", reports, partitions), func() (bool, string) {
		a, ok := co.assignments(t)
		if !ok {
			return false, "not leading"
		}
		for _, s := range live {
			v, ok := shardView(a, s.id)
			if !ok || v.LoadReports < reports || v.LoadEntries != partitions {
				return false, fmt.Sprintf("%s: member %v, %d reports, the last of %d entries", s.id, ok, v.LoadReports, v.LoadEntries)
			}
			// Shown whatever the placement: the shard's measurement, not the balancer's.
			if v.LimiterWaitPermille != 7 {
				return false, fmt.Sprintf("%s: limiter wait %d‰, want the reported 7‰", s.id, v.LimiterWaitPermille)
			}
		}
		return true, ""
	})
	for _, s := range live {
		if n := testutil.ToFloat64(s.metrics.LoadReports.WithLabelValues("sent")); n < reports {
			t.Errorf("%s sent %v load reports, the coordinator recorded at least %d", s.id, n, reports)
		}
		if n := testutil.ToFloat64(s.metrics.LoadReports.WithLabelValues("invalid")); n != 0 {
			t.Errorf("%s left %v invalid reports off", s.id, n)
		}
		if n := testutil.ToFloat64(s.metrics.Fenced); n != 0 || !s.c.Welcomed() {
			t.Errorf("%s fenced=%v welcomed=%v", s.id, n, s.c.Welcomed())
		}
		r := reporters[s.id]
		r.mu.Lock()
		if len(r.settings) == 0 || slices.ContainsFunc(r.settings, func(l protocol.LoadSettings) bool { return l != testLoad }) {
			t.Errorf("%s's reporter was given %+v, want the Welcome's %+v", s.id, r.settings, testLoad)
		}
		r.mu.Unlock()
	}
	if n := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues("malformed")); n != malformed0 {
		t.Errorf("malformed messages went from %v to %v", malformed0, n)
	}
	if n := testutil.ToFloat64(co.metrics.MovesStarted); n != moves0 {
		t.Errorf("moves started went from %v to %v: load reports move nothing yet", moves0, n)
	}
	if after := co.waitSettled(t, w, live...); !maps.Equal(after, owners) {
		t.Errorf("owners changed while the shards reported load:\nbefore %v\nafter  %v", byShard(owners), byShard(after))
	}
}

// TestLoadsFromClients: with placement by load, GET /assignments?loads=true lists the
// costliest partitions as real shard clients reported them over gRPC: at most
// coordinatorrpc.MaxLoads, costliest first, each with its owner, its reported load and
// objects, and its last move (membership: this leader granted every partition); each
// shard's share of the cost and rate-limiter wait come with them.
func TestLoadsFromClients(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) {
		o.Config.Load = testLoad
		o.Config.Balance = handoff.BalanceConfig{Placement: handoff.PlacementLoad} // membership plans only: nothing moves for load
	})
	co.lead(t, 1)
	// Every partition at 0.1 × its ID requests/s: partition 0 costs nothing (no load, no
	// namespace counted) and is left out, the others in descending order.
	every := make([]protocol.PartitionLoad, partitions)
	for p := range every {
		every[p] = protocol.PartitionLoad{Partition: partition.ID(p), LoadMilli: uint32(100 * p), Objects: uint32(p), AgeSeconds: 5}
	}
	var live []*shard
	for i, id := range []string{"shard-a", "shard-b"} {
		r := &loadReporter{report: protocol.LoadReport{Partitions: every, LimiterWaitPermille: uint32(10 * (i + 1))}}
		live = append(live, startShard(t, w, id, insecureClient(t), []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) { o.LoadReporter = r }))
	}
	owners := co.waitSettled(t, w, live...)
	var a coordinatorrpc.Assignments
	waitFor(t, settleTimeout, fmt.Sprintf("the %d costliest partitions as reported", coordinatorrpc.MaxLoads), func() (bool, string) {
		code, body := co.get("?loads=true")
		if code != 200 {
			return false, fmt.Sprintf("GET /assignments?loads=true = %d %s", code, body)
		}
		a = coordinatorrpc.Assignments{}
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
		if len(a.Loads) != coordinatorrpc.MaxLoads {
			return false, fmt.Sprintf("%d loads listed", len(a.Loads))
		}
		for i, l := range a.Loads {
			p := partitions - 1 - i
			want := coordinatorrpc.PartitionLoadView{Partition: uint32(p), Owner: owners[partition.ID(p)], Cost: float64(float32(float64(100*p) / 1000)),
				Load: float64(float32(float64(100*p) / 1000)), Objects: uint32(p), LastMove: "membership"}
			if l != want {
				return false, fmt.Sprintf("entry %d: %+v, want %+v", i, l, want)
			}
		}
		return true, ""
	})
	share := 0.0
	for i, s := range live {
		v, ok := shardView(a, s.id)
		if !ok || v.LimiterWaitPermille != uint32(10*(i+1)) || v.LoadShare <= 0 {
			t.Errorf("%s: member %v, limiter wait %d‰ (want %d‰), share %v", s.id, ok, v.LimiterWaitPermille, 10*(i+1), v.LoadShare)
		}
		share += v.LoadShare
	}
	if math.Abs(share-1) > 1e-9 {
		t.Errorf("the shards' shares sum to %v, want 1", share)
	}
}

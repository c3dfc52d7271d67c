package coordinatorrpc

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

// newLoadServer returns a Server placing p partitions by load that waits for placement
// inputs, with a fake clock.
func newLoadServer(t *testing.T, p int, claimTimeout time.Duration) (*Server, *fakeClock) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{}
	cfg := handoff.Config{PartitionCount: p, Balance: handoff.BalanceConfig{Placement: handoff.PlacementLoad}}
	s, err := New(Options{Config: cfg, Metrics: m, Now: clk.now, TickInterval: 5 * time.Millisecond,
		WaitForPlacement: true, ClaimTimeout: claimTimeout}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// TestLeadWaitsForPlacement: with WaitForPlacement, Lead leads only once the first
// placement inputs arrived, and gives up after ClaimTimeout without them.
func TestLeadWaitsForPlacement(t *testing.T) {
	tests := []struct {
		name    string
		set     bool // SetPlacement before Lead
		wantErr string
	}{
		{name: "inputs never come", wantErr: "no namespace counts within 50ms"},
		{name: "inputs came", set: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newLoadServer(t, 8, 50*time.Millisecond)
			pm, _ := partition.NewMap(8)
			if tt.set {
				s.SetPlacement(placement.Resolve(pm, placement.Rules{}, nil))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			led := make(chan error, 1)
			go func() { led <- s.Lead(ctx, 1, alwaysValid{}) }()
			if tt.wantErr != "" {
				err := <-led
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Lead = %v, want an error containing %q", err, tt.wantErr)
				}
				if s.Leading() {
					t.Fatal("leading without placement inputs")
				}
				return
			}
			waitFor(t, "leading", s.Leading)
			cancel()
			if err := <-led; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSetPlacement: the namespace counts and pins reach the state machine of the current
// leadership and of the next one, show in /assignments and in the pin gauges; counts of
// another partition count are dropped.
func TestSetPlacement(t *testing.T) {
	const p = 16
	s, clk := newLoadServer(t, p, time.Second)
	pm, _ := partition.NewMap(p)
	var nss []placement.Namespace
	for i := range 40 {
		nss = append(nss, placement.Namespace{Name: fmt.Sprintf("ns-%d", i)})
	}
	pinned := pm.For("ns-0")
	in := placement.Resolve(pm, placement.Rules{Partitions: map[partition.ID]string{pinned: "hot"}}, nss)
	s.SetPlacement(in)
	s.SetPlacement(placement.Resolve(partition.Map{Count: p + 1}, placement.Rules{}, nil)) // dropped

	var start time.Duration // of the leadership, on clk
	for term := uint32(1); term <= 2; term++ {
		clk.set(start)
		ctx, cancel := context.WithCancel(context.Background())
		led := make(chan error, 1)
		go func() { led <- s.Lead(ctx, term, alwaysValid{}) }()
		waitFor(t, "leading", s.Leading)
		// As TestRingComputedOutsideTheLock: the grace ends at TTL+Margin = 12s; the
		// shards say hello at 11s, the target is computed at 13s.
		clk.set(start + 11*time.Second)
		s.mu.Lock()
		for i := range 2 {
			if err := s.core.Step(clk.now(), handoff.Report{Kind: handoff.ReportHello, Shard: fmt.Sprintf("s%d", i),
				Session: handoff.Session{Incarnation: uint64(term), Seq: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		clk.set(start + 13*time.Second)
		s.core.Tick(clk.now())
		s.flushLocked()
		s.mu.Unlock()
		waitFor(t, "every partition granted", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.core.Stats().ByState[handoff.StateAcquiring] == p
		})
		// The shards confirm: a shard's cost is of the partitions it owns.
		s.mu.Lock()
		for _, a := range s.core.Assignments() {
			if err := s.core.Step(clk.now(), handoff.Report{Kind: handoff.ReportAcquired, Shard: a.Owner, Partition: a.Partition,
				Epoch: a.Epoch, Session: handoff.Session{Incarnation: uint64(term), Seq: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		s.flushLocked()
		owned := s.core.Stats().ByState[handoff.StateOwned]
		s.mu.Unlock()
		if owned != p {
			t.Fatalf("term %d: %d partitions owned after the confirmations, want %d", term, owned, p)
		}

		a, _, _ := s.assignmentsSnapshot(assignmentsQuery{})
		all := a.(Assignments)
		// No load reported: λ = balance.LambdaMin, so the shards' costs sum to
		// LambdaMin × the namespaces, which only the counts can have brought.
		var sum float64
		for _, sv := range all.Shards {
			sum += sv.Load
		}
		if want := balance.LambdaMin * 40; math.Abs(sum-want) > 1e-6 || all.Namespaces != 40 || all.Placement != "load" {
			t.Errorf("term %d: shard loads sum to %v (want %v), namespaces %d (want 40), placement %q", term, sum, want, all.Namespaces, all.Placement)
		}
		if want := map[string]int{placement.StateSatisfied: 0, placement.StateUnsatisfied: 1, placement.StateConflict: 0}; fmt.Sprint(all.PinsByState) != fmt.Sprint(want) {
			t.Errorf("term %d: pins by state %v, want %v", term, all.PinsByState, want)
		}
		o, _, _ := s.assignmentsSnapshot(assignmentsQuery{namespace: "ns-0"})
		owner := o.(Owner)
		if owner.PinnedTo != "hot" || owner.PinSource != "flag" || owner.PinState != placement.StateUnsatisfied || owner.PartitionNamespaces != in.Namespaces[pinned] {
			t.Errorf("term %d: owner %+v, want pinned to hot by flag, unsatisfied, %d namespaces", term, owner, in.Namespaces[pinned])
		}
		s.updateGauges()
		if got := testutil.ToFloat64(s.opts.Metrics.Pins.WithLabelValues(placement.StateUnsatisfied)); got != 1 {
			t.Errorf("term %d: pins{state=unsatisfied} = %v, want 1", term, got)
		}
		cancel()
		if err := <-led; err != nil {
			t.Fatal(err)
		}
		start += time.Hour
	}
}

// TestBalanceCounters: the state machine's cumulative balancer counters become
// Prometheus counters that only grow, across leaderships whose counts start again at 0.
func TestBalanceCounters(t *testing.T) {
	s, _ := newTestServer(t, 8)
	m := s.opts.Metrics
	steps := []struct {
		name       string
		newLeader  bool
		rounds     map[string]uint64
		wantWarmup float64
	}{
		{name: "first counts", rounds: map[string]uint64{"warmup": 3}, wantWarmup: 3},
		{name: "grown", rounds: map[string]uint64{"warmup": 5}, wantWarmup: 5},
		{name: "unchanged", rounds: map[string]uint64{"warmup": 5}, wantWarmup: 5},
		{name: "a new leadership starts at 0", newLeader: true, rounds: map[string]uint64{"warmup": 2}, wantWarmup: 7},
	}
	for _, st := range steps {
		if st.newLeader {
			s.balanceSeen = balanceCounters{}
		}
		s.countBalanceLocked(handoff.BalanceStats{Rounds: st.rounds, ReportsRejected: map[string]uint64{"absurd": 1}})
		if got := testutil.ToFloat64(m.BalancerRounds.WithLabelValues("warmup")); got != st.wantWarmup {
			t.Errorf("%s: rounds{warmup} = %v, want %v", st.name, got, st.wantWarmup)
		}
	}
	if got := testutil.ToFloat64(m.LoadReportsRejected.WithLabelValues("absurd")); got != 2 {
		t.Errorf("reports rejected{absurd} = %v, want 2 (one per leadership)", got)
	}
}

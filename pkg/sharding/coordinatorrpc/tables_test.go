package coordinatorrpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/protocol"
)

// TestShardTablesBounded: the server's per-shard tables (reported stats, build versions)
// hold only current members. Shard IDs are pod names, new with every rollout: entries of
// shards that expired, of IDs that never became members, and of an ended leadership
// must go, or the tables grow with every ID ever seen.
func TestShardTablesBounded(t *testing.T) {
	tests := []struct {
		name string
		// run is what happens after `members` shards said hello at 11s (their
		// entries written as Session writes them); it returns the shards expected to
		// keep entries.
		members int
		run     func(t *testing.T, s *Server, clk *fakeClock, stop func()) int
	}{
		{name: "a rollout's shards expire", members: 50, run: func(t *testing.T, s *Server, clk *fakeClock, _ func()) int {
			clk.set(time.Minute) // far past every lease
			s.mu.Lock()
			s.core.Tick(clk.now())
			s.flushLocked()
			s.mu.Unlock()
			return 0
		}},
		{name: "an ID that is not a member", members: 3, run: func(t *testing.T, s *Server, _ *fakeClock, _ func()) int {
			s.mu.Lock()
			s.versions["kshard-shard-gone"], s.stats["kshard-shard-gone"] = "v1", protocol.Stats{Namespaces: 7}
			s.mu.Unlock()
			s.updateGauges()
			return 3
		}},
		{name: "the leadership ends", members: 5, run: func(t *testing.T, s *Server, _ *fakeClock, stop func()) int {
			stop()
			return 0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newTestServer(t, 64)
			ctx, cancel := context.WithCancel(context.Background())
			led := make(chan error, 1)
			go func() { led <- s.Lead(ctx, 1, alwaysValid{}) }()
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					cancel()
					if err := <-led; err != nil {
						t.Error(err)
					}
				}
			}
			defer stop()
			waitFor(t, "leading", func() bool { return s.Leading() })

			clk.set(11 * time.Second)
			s.mu.Lock()
			for i := range tc.members {
				id := fmt.Sprintf("kshard-shard-%d", i)
				if err := s.core.Step(clk.now(), handoff.Report{Kind: handoff.ReportHello, Shard: id,
					Session: handoff.Session{Incarnation: 1, Seq: 1}}); err != nil {
					t.Fatal(err)
				}
				s.versions[id], s.stats[id] = "v1", protocol.Stats{Namespaces: 1}
			}
			s.flushLocked()
			s.mu.Unlock()

			want := tc.run(t, s, clk, stop)
			s.mu.Lock()
			nv, ns := len(s.versions), len(s.stats)
			s.mu.Unlock()
			if nv != want || ns != want {
				t.Errorf("%d build versions and %d stats kept, want %d of each", nv, ns, want)
			}
		})
	}
}

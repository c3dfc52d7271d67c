package coordinatorrpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
)

// TestRingComputedOutsideTheLock: the leader's state machine does not compute the target
// under the server's lock (its result cannot arrive while the lock is held); the edge
// computes it on its own goroutine and feeds it back, after which partitions are granted.
func TestRingComputedOutsideTheLock(t *testing.T) {
	s, clk := newTestServer(t, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	led := make(chan error, 1)
	go func() { led <- s.Lead(ctx, 1, alwaysValid{}) }()
	waitFor(t, "leading", func() bool { return s.Leading() })

	// Default timings: the grace ends at TTL+Margin = 12s. Shards say hello at 11s.
	clk.set(11 * time.Second)
	s.mu.Lock()
	for i := range 3 {
		if err := s.core.Step(clk.now(), handoff.Report{Kind: handoff.ReportHello, Shard: fmt.Sprintf("s%d", i),
			Session: handoff.Session{Incarnation: 1, Seq: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	s.flushLocked()
	clk.set(13 * time.Second)
	s.core.Tick(clk.now())
	s.flushLocked() // takes the ring request and starts computing it
	st := s.core.Stats()
	s.mu.Unlock()
	if st.TargetChanges != 0 || !st.RingPending {
		t.Fatalf("under the lock: %d target changes, ring pending %v; want 0 and true", st.TargetChanges, st.RingPending)
	}
	waitFor(t, "the target applied", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.core.Stats()
		return st.TargetChanges == 1 && !st.RingPending && st.ByState[handoff.StateAcquiring] == 64
	})
	cancel()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// alwaysValid is the tenure of a leader whose Lease never lapses.
type alwaysValid struct{}

func (alwaysValid) Valid() bool { return true }

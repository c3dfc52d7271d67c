package coordinatorrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
)

// fakeRecord is an OwnerRecord whose Claim answers what the test says.
type fakeRecord struct {
	claimed  ownerrecord.Claimed
	err      error
	claims   atomic.Int32
	released atomic.Int32
}

func (r *fakeRecord) Claim(context.Context, uint32, Tenure) (ownerrecord.Claimed, error) {
	r.claims.Add(1)
	return r.claimed, r.err
}

func (r *fakeRecord) Apply(context.Context, map[partition.ID]string) (ownerrecord.Applied, error) {
	return ownerrecord.Applied{}, nil
}

func (r *fakeRecord) Release() { r.released.Add(1) }

func newRecordServer(t *testing.T, rec *fakeRecord, claimTimeout time.Duration) *Server {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{}
	s, err := New(Options{Config: handoff.Config{PartitionCount: 8, OwnerRecord: true}, Metrics: m, Now: clk.now,
		TickInterval: 5 * time.Millisecond, Record: rec, ClaimTimeout: claimTimeout}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeadClaim: what the owner record says never makes a leader hold the Lease without
// serving. A plausible term above its own (left by a lost term record) is returned as a
// TermBehindError before anything is served, so that the caller leads again above it;
// forged terms (which the record counts apart) are led over; a record that cannot be
// claimed ends Lead within ClaimTimeout with an error. On main, Activate's ErrDeposed made
// Lead return an error that the coordinator only logged, holding the Lease for good.
func TestLeadClaim(t *testing.T) {
	tests := []struct {
		name        string
		claimed     ownerrecord.Claimed
		claimErr    error
		wantBehind  uint32 // a TermBehindError with this term
		wantErr     string // another error containing this
		wantServing bool
	}{
		{name: "no terms above", claimed: ownerrecord.Claimed{HighestTerm: 4, HighestIn: "a"}, wantServing: true},
		{name: "plausible term above", claimed: ownerrecord.Claimed{HighestTerm: 901, HighestIn: "stale", Above: 3}, wantBehind: 901},
		{name: "clock term above", claimed: ownerrecord.Claimed{HighestTerm: uint32(time.Now().Unix()), HighestIn: "clock", Above: 1},
			wantBehind: uint32(time.Now().Unix())},
		{name: "forged term above", claimed: ownerrecord.Claimed{HighestTerm: 4, HighestIn: "a", Forged: 1, ForgedIn: "forged"}, wantServing: true},
		{name: "record cannot be claimed", claimErr: errors.New("informer not synced"), wantErr: "informer not synced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &fakeRecord{claimed: tt.claimed, err: tt.claimErr}
			s := newRecordServer(t, rec, 300*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			led := make(chan error, 1)
			go func() { led <- s.Lead(ctx, 5, alwaysValid{}) }()
			if tt.wantServing {
				waitFor(t, "serving", s.Leading)
				cancel()
			}
			var err error
			select {
			case err = <-led:
			case <-time.After(10 * time.Second):
				t.Fatal("Lead did not return")
			}
			var behind *TermBehindError
			switch {
			case tt.wantBehind != 0:
				if !errors.As(err, &behind) || behind.Term != tt.wantBehind || !strings.Contains(behind.Source, tt.claimed.HighestIn) {
					t.Fatalf("Lead = %v, want a TermBehindError for term %d naming %s", err, tt.wantBehind, tt.claimed.HighestIn)
				}
			case tt.wantErr != "":
				if err == nil || errors.As(err, &behind) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Lead = %v, want an error containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("Lead = %v, want nil", err)
			}
			if !tt.wantServing && s.Leading() {
				t.Error("still serving after Lead returned")
			}
			if rec.released.Load() == 0 {
				t.Error("the record was not released when Lead returned")
			}
		})
	}
}

// TestNewerTermClaim: a hello holding epochs of a term above the leader's is refused,
// and the server remembers who claimed it and the highest term claimed, for the step-down
// callback to weigh (cmd/coordinator/app skips past a plausible one).
func TestNewerTermClaim(t *testing.T) {
	s := newRecordServer(t, &fakeRecord{}, time.Second)
	var reasons atomic.Value
	s.opts.StepDown = func(reason string) { reasons.Store(reason) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	led := make(chan error, 1)
	go func() { led <- s.Lead(ctx, 5, alwaysValid{}) }()
	waitFor(t, "serving", s.Leading)
	if shard, term := s.NewerTermClaim(); shard != "" || term != 0 {
		t.Fatalf("NewerTermClaim = %q, %d before any claim", shard, term)
	}
	hello := func(shard string, terms ...uint32) error {
		var held []handoff.Held
		for i, term := range terms {
			held = append(held, handoff.Held{Partition: partition.ID(i), Epoch: handoff.Epoch(uint64(term)<<32 | 1), State: handoff.SlotPrepared})
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.feedLocked(protocol.Incoming{Report: handoff.Report{Kind: handoff.ReportHello, Shard: shard,
			Session: handoff.Session{Incarnation: 1, Seq: 1}, Held: held}}, logr.Discard())
	}
	if err := hello("s1", 3, 9); err == nil {
		t.Fatal("a hello with an epoch of term 9 was accepted by the leader of term 5")
	}
	if err := hello("s2", 12); err == nil {
		t.Fatal("a hello with an epoch of term 12 was accepted by the leader of term 5")
	}
	if shard, term := s.NewerTermClaim(); shard != "s1" || term != 12 {
		t.Fatalf("NewerTermClaim = %q, %d, want s1, 12", shard, term)
	}
	s.updateGauges()
	waitFor(t, "the step-down callback", func() bool { return reasons.Load() != nil })
	if r := reasons.Load().(string); !strings.Contains(r, fmt.Sprint(12)) || !strings.Contains(r, "s1") {
		t.Errorf("step-down reason %q does not name the shard and the term", r)
	}
	cancel()
	<-led
}

package app

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
)

// scriptedServer is a leadServer whose Lead answers, term after term, what the script
// says; a nil answer serves until the term's context ends.
type scriptedServer struct {
	mu      sync.Mutex
	script  []error
	terms   []uint32
	serving bool
	started chan uint32
}

func (s *scriptedServer) Lead(ctx context.Context, term uint32, _ coordinatorrpc.Tenure) error {
	s.mu.Lock()
	s.terms = append(s.terms, term)
	var answer error
	if len(s.script) > 0 {
		answer, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()
	if answer != nil {
		return answer
	}
	s.setServing(true)
	defer s.setServing(false)
	s.started <- term
	<-ctx.Done()
	return nil
}

func (s *scriptedServer) setServing(v bool) { s.mu.Lock(); s.serving = v; s.mu.Unlock() }

func (s *scriptedServer) Leading() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.serving }

func (s *scriptedServer) NewerTermClaim() (string, uint32) { return "", 0 }

func (s *scriptedServer) led() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint32(nil), s.terms...)
}

type recordedTerms struct {
	mu    sync.Mutex
	above []uint64
	err   error
}

func (r *recordedTerms) termAbove(_ context.Context, seen uint64) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.above = append(r.above, seen)
	return seen + 1, r.err
}

// TestLeadershipRun: a term found above the leader's makes it lead again above it
// (recorded through termAbove) without giving the Lease up; any other failure to lead
// gives the Lease up (stepDown) instead of holding it without serving, which is what main
// did ("cannot lead" logged, the Lease kept).
func TestLeadershipRun(t *testing.T) {
	behind := &coordinatorrpc.TermBehindError{Term: 900, Source: "namespace x"}
	tests := []struct {
		name      string
		script    []error
		recordErr error
		wantTerms []uint32
		wantAbove []uint64
		wantServe bool
		wantCause string
	}{
		{name: "serves", wantTerms: []uint32{3}, wantServe: true},
		{name: "term found above", script: []error{behind}, wantTerms: []uint32{3, 901}, wantAbove: []uint64{900}, wantServe: true},
		{name: "cannot claim", script: []error{errors.New("owner record: informer not synced")}, wantTerms: []uint32{3},
			wantCause: "cannot lead: owner record: informer not synced"},
		{name: "cannot record the term above", script: []error{behind}, recordErr: errors.New("forbidden"), wantTerms: []uint32{3},
			wantAbove: []uint64{900}, wantCause: "cannot record a term above 900"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &scriptedServer{script: tt.script, started: make(chan uint32, 4)}
			rec := &recordedTerms{err: tt.recordErr}
			ctx, stepDown := context.WithCancelCause(context.Background())
			defer stepDown(nil)
			l := &leadership{log: logr.Discard(), srv: srv, termAbove: rec.termAbove, stepDown: stepDown}
			done := make(chan struct{})
			go func() { defer close(done); l.run(ctx, 3, alwaysValid{}) }()
			if tt.wantServe {
				select {
				case <-srv.started:
				case <-time.After(10 * time.Second):
					t.Fatal("never served")
				}
				if err := l.stuck(time.Now().Add(time.Hour), time.Minute); err != nil {
					t.Errorf("stuck while serving: %v", err)
				}
				stepDown(nil)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return")
			}
			if got := srv.led(); !slices.Equal(got, tt.wantTerms) {
				t.Errorf("led terms %v, want %v", got, tt.wantTerms)
			}
			if !slices.Equal(rec.above, tt.wantAbove) {
				t.Errorf("recorded terms above %v, want %v", rec.above, tt.wantAbove)
			}
			cause := context.Cause(ctx)
			if tt.wantCause == "" && cause != nil && !errors.Is(cause, context.Canceled) {
				t.Errorf("stepped down: %v", cause)
			}
			if tt.wantCause != "" && (cause == nil || !strings.Contains(cause.Error(), tt.wantCause)) {
				t.Errorf("step-down cause %v, want %q", cause, tt.wantCause)
			}
			if l.term.Load() != 0 || l.waiting.Load() != 0 {
				t.Errorf("after run: term %d, waiting %d; want 0, 0", l.term.Load(), l.waiting.Load())
			}
		})
	}
}

// TestLeadershipSkipPast: a shard's claim of a newer term that the Lease does not explain
// makes the leader lead again above it, once per reLeadEvery, and never above a term no
// coordinator can have led yet.
func TestLeadershipSkipPast(t *testing.T) {
	srv := &scriptedServer{started: make(chan uint32, 4)}
	rec := &recordedTerms{}
	ctx, stepDown := context.WithCancelCause(context.Background())
	defer stepDown(nil)
	l := &leadership{log: logr.Discard(), srv: srv, termAbove: rec.termAbove, stepDown: stepDown}
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, 3, alwaysValid{}) }()
	<-srv.started
	now := time.Now()
	steps := []struct {
		name  string
		claim uint32
		at    time.Time
		want  bool
	}{
		{name: "not above", claim: 3, at: now, want: false},
		{name: "forged", claim: 4294967295, at: now, want: false},
		{name: "plausible", claim: 700, at: now, want: true},
		{name: "again too soon", claim: 800, at: now.Add(reLeadEvery / 2), want: false},
		{name: "again later", claim: 800, at: now.Add(reLeadEvery + time.Second), want: true},
	}
	for _, st := range steps {
		if got := l.skipPast("mallory", st.claim, st.at); got != st.want {
			t.Fatalf("%s: skipPast(%d) = %v, want %v", st.name, st.claim, got, st.want)
		}
		if st.want {
			select {
			case term := <-srv.started:
				if term != st.claim+1 {
					t.Fatalf("%s: led again at term %d, want %d", st.name, term, st.claim+1)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: did not lead again", st.name)
			}
		}
	}
	stepDown(nil)
	<-done
}

// TestLeadershipStuck: holding the Lease without serving past the bound fails liveness.
func TestLeadershipStuck(t *testing.T) {
	srv := &scriptedServer{}
	l := &leadership{log: logr.Discard(), srv: srv}
	now := time.Now()
	if err := l.stuck(now, time.Minute); err != nil {
		t.Fatalf("stuck while following: %v", err)
	}
	l.waiting.Store(now.UnixNano())
	if err := l.stuck(now.Add(30*time.Second), time.Minute); err != nil {
		t.Fatalf("stuck within the bound: %v", err)
	}
	if err := l.stuck(now.Add(2*time.Minute), time.Minute); err == nil {
		t.Fatal("not stuck after holding the Lease 2m without serving")
	}
}

type alwaysValid struct{}

func (alwaysValid) Valid() bool { return true }

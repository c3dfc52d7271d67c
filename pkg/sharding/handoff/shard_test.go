package handoff

import (
	"slices"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// sec is t0 plus s seconds.
func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// welcomed returns a shard with a welcomed session at time 0 (lease until
// TTL 10s) holding nothing.
func welcomed() *Shard {
	s := NewShard("a", 1)
	s.Connect(sec(0))
	s.Step(sec(0), Command{Kind: CmdWelcome, To: "a", Session: s.Session(), TTL: 10 * time.Second, HeartbeatInterval: 3 * time.Second})
	s.Outbox()
	s.Actions()
	return s
}

func cmd(s *Shard, k CommandKind, p partition.ID, e Epoch) Command {
	return Command{Kind: k, To: s.ID(), Session: s.Session(), Partition: p, Epoch: e}
}

func TestShard(t *testing.T) {
	e1, e2, e3 := MakeEpoch(1, 1), MakeEpoch(1, 2), MakeEpoch(1, 3)
	type step struct {
		at      float64
		do      func(s *Shard, now time.Time) error
		wantErr Reason
	}
	on := func(k CommandKind, p partition.ID, e Epoch) func(*Shard, time.Time) error {
		return func(s *Shard, now time.Time) error { return s.Step(now, cmd(s, k, p, e)) }
	}
	tests := []struct {
		name        string
		steps       []step
		checkAt     float64
		wantWorking []partition.ID
		wantHeld    []Held
		wantReports []ReportKind // reports of the last step
		needsHello  bool
	}{
		{
			name:        "cold acquire warms, works and confirms",
			steps:       []step{{at: 1, do: on(CmdAcquire, 3, e1)}},
			checkAt:     2,
			wantWorking: []partition.ID{3},
			wantHeld:    []Held{{3, e1, SlotAcquired}},
			wantReports: []ReportKind{ReportAcquired},
		},
		{
			name: "prepare reports once synced, then acquire of the same epoch",
			steps: []step{
				{at: 1, do: on(CmdPrepare, 3, e1)},
				{at: 1, do: func(s *Shard, now time.Time) error { s.Synced(now, 3, e1); return nil }},
			},
			checkAt:     1,
			wantHeld:    []Held{{3, e1, SlotPrepared}},
			wantReports: []ReportKind{ReportPrepared},
		},
		{
			name: "release drains before it reports released",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 2, do: on(CmdRelease, 3, e2)},
			},
			checkAt:     2,
			wantWorking: []partition.ID{3}, // in-flight work still drains
			wantHeld:    []Held{{3, e1, SlotReleasing}},
		},
		{
			name: "drained reports released; an older acquire stays refused",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 2, do: on(CmdRelease, 3, e2)},
				{at: 2, do: func(s *Shard, now time.Time) error { s.Drained(now, 3); return nil }},
				{at: 3, do: on(CmdAcquire, 3, e2), wantErr: ReasonStaleEpoch},
			},
			checkAt: 3,
		},
		{
			name: "a newer acquire after release is accepted",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 2, do: on(CmdRelease, 3, e2)},
				{at: 2, do: func(s *Shard, now time.Time) error { s.Drained(now, 3); return nil }},
				{at: 3, do: on(CmdAcquire, 3, e3)},
			},
			checkAt:     3,
			wantWorking: []partition.ID{3},
			wantHeld:    []Held{{3, e3, SlotAcquired}},
			wantReports: []ReportKind{ReportAcquired},
		},
		{
			// A lease lapse stops a draining partition's work by cancelling it, which
			// does not wait: the retried release must wait for the drain to finish.
			name: "release of a draining partition stopped by a lapse waits for the drain",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 2, do: on(CmdRelease, 3, e2)},
				{at: 12, do: func(s *Shard, now time.Time) error { s.Heartbeat(now); return nil }}, // lease ended at 10
				{at: 12, do: func(s *Shard, now time.Time) error { s.Connect(now); return nil }},
				{at: 12, do: func(s *Shard, now time.Time) error {
					return s.Step(now, Command{Kind: CmdWelcome, To: "a", Session: s.Session(), TTL: 10 * time.Second,
						Keep: []Held{{3, e1, SlotReleasing}}})
				}},
				{at: 13, do: on(CmdRelease, 3, e2)},
			},
			checkAt:     13,
			wantHeld:    []Held{{3, e1, SlotReleasing}},
			wantReports: nil, // not Released: its cancelled work may still run
		},
		{
			name: "a stopped draining partition reports released once drained",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 2, do: on(CmdRelease, 3, e2)},
				{at: 12, do: func(s *Shard, now time.Time) error { s.Heartbeat(now); return nil }},
				{at: 12, do: func(s *Shard, now time.Time) error { s.Connect(now); return nil }},
				{at: 12, do: func(s *Shard, now time.Time) error {
					return s.Step(now, Command{Kind: CmdWelcome, To: "a", Session: s.Session(), TTL: 10 * time.Second,
						Keep: []Held{{3, e1, SlotReleasing}}})
				}},
				{at: 13, do: on(CmdRelease, 3, e2)},
				{at: 13, do: func(s *Shard, now time.Time) error { s.Drained(now, 3); return nil }},
			},
			checkAt:     13,
			wantReports: []ReportKind{ReportReleased},
		},
		{
			name: "release of something not held answers released (retries are idempotent)",
			steps: []step{
				{at: 1, do: on(CmdRelease, 5, e2)},
			},
			checkAt:     1,
			wantReports: []ReportKind{ReportReleased},
		},
		{
			name: "command of another session is refused",
			steps: []step{{at: 1, do: func(s *Shard, now time.Time) error {
				c := cmd(s, CmdAcquire, 3, e1)
				c.Session.Seq--
				return s.Step(now, c)
			}, wantErr: ReasonStaleSession}},
			checkAt: 1,
		},
		{
			name: "command before the welcome is refused",
			steps: []step{
				{at: 1, do: func(s *Shard, now time.Time) error { s.Connect(now); return nil }},
				{at: 1, do: on(CmdAcquire, 3, e1), wantErr: ReasonNotWelcomed},
			},
			checkAt: 1,
		},
		{
			name: "welcome drops what is not kept, then extends the lease",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 1, do: on(CmdAcquire, 4, e2)},
				{at: 2, do: func(s *Shard, now time.Time) error { s.Connect(now); return nil }},
				{at: 2, do: func(s *Shard, now time.Time) error {
					return s.Step(now, Command{Kind: CmdWelcome, To: "a", Session: s.Session(), TTL: 10 * time.Second, Keep: []Held{{4, e2, SlotAcquired}}})
				}},
			},
			checkAt:     11, // the first lease ended at 10; the welcome acknowledged the hello at 2
			wantWorking: []partition.ID{4},
			wantHeld:    []Held{{4, e2, SlotAcquired}},
		},
		{
			name:       "past the deadline nothing is worked and acquired partitions are demoted",
			steps:      []step{{at: 1, do: on(CmdAcquire, 3, e1)}, {at: 10, do: func(s *Shard, now time.Time) error { s.Heartbeat(now); return nil }}},
			checkAt:    10,
			wantHeld:   []Held{{3, e1, SlotWarming}}, // acquired cold, never synced
			needsHello: true,
		},
		{
			name: "an ack extends from the heartbeat's send time, not its arrival",
			steps: []step{
				{at: 1, do: on(CmdAcquire, 3, e1)},
				{at: 6, do: func(s *Shard, now time.Time) error { s.Heartbeat(now); return nil }},
				{at: 9, do: func(s *Shard, now time.Time) error {
					return s.Step(now, Command{Kind: CmdAck, To: "a", Session: s.Session(), Seq: 1})
				}},
			},
			checkAt:     15.9,
			wantWorking: []partition.ID{3},
			wantHeld:    []Held{{3, e1, SlotAcquired}},
		},
		{
			name:       "session ended stops work at once",
			steps:      []step{{at: 1, do: on(CmdAcquire, 3, e1)}, {at: 2, do: on(CmdSessionEnded, 0, 0)}},
			checkAt:    2,
			wantHeld:   []Held{{3, e1, SlotWarming}},
			needsHello: true,
		},
		{
			name:        "cancel drops prepared caches but never an acquired partition",
			steps:       []step{{at: 1, do: on(CmdPrepare, 3, e1)}, {at: 1, do: on(CmdAcquire, 4, e1)}, {at: 2, do: on(CmdCancel, 3, e1)}, {at: 2, do: on(CmdCancel, 4, e1)}},
			checkAt:     2,
			wantWorking: []partition.ID{4},
			wantHeld:    []Held{{4, e1, SlotAcquired}},
		},
		{
			name:        "a stale prepare after cancel is refused",
			steps:       []step{{at: 1, do: on(CmdPrepare, 3, e1)}, {at: 2, do: on(CmdCancel, 3, e1)}, {at: 3, do: on(CmdPrepare, 3, e1), wantErr: ReasonStaleEpoch}},
			checkAt:     3,
			wantReports: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := welcomed()
			var reports []Report
			for i, st := range tt.steps {
				err := st.do(s, sec(st.at))
				if got := ReasonOf(err); got != st.wantErr {
					t.Fatalf("step %d: reason %v (%v), want %v", i, got, err, st.wantErr)
				}
				reports = s.Outbox()
			}
			now := sec(tt.checkAt)
			var working []partition.ID
			for p := range partition.ID(8) {
				if s.Working(now, p) {
					working = append(working, p)
				}
			}
			if !slices.Equal(working, tt.wantWorking) {
				t.Errorf("working = %v, want %v", working, tt.wantWorking)
			}
			s.Heartbeat(now) // applies the deadline, like any input
			if got := s.Held(); !slices.Equal(got, tt.wantHeld) && !(len(got) == 0 && len(tt.wantHeld) == 0) {
				t.Errorf("held = %v, want %v", got, tt.wantHeld)
			}
			var kinds []ReportKind
			for _, r := range reports {
				kinds = append(kinds, r.Kind)
			}
			if !slices.Equal(kinds, tt.wantReports) {
				t.Errorf("reports of the last step = %v, want %v", kinds, tt.wantReports)
			}
			if s.NeedsHello() != tt.needsHello {
				t.Errorf("NeedsHello = %v, want %v", s.NeedsHello(), tt.needsHello)
			}
		})
	}
}

// TestShardHelloReportsAcquiredOnlyWithLease: a shard whose lease ran out
// must not claim ownership to a (new) coordinator.
func TestShardHelloReportsAcquiredOnlyWithLease(t *testing.T) {
	e1 := MakeEpoch(1, 1)
	tests := []struct {
		name  string
		hello float64
		want  SlotState
	}{
		{name: "lease valid", hello: 9, want: SlotAcquired},
		{name: "lease expired", hello: 11, want: SlotWarming},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := welcomed()
			s.Step(sec(1), cmd(s, CmdAcquire, 2, e1))
			s.Outbox()
			s.Connect(sec(tt.hello))
			out := s.Outbox()
			if len(out) != 1 || out[0].Kind != ReportHello || len(out[0].Held) != 1 {
				t.Fatalf("outbox = %v", out)
			}
			if got := out[0].Held[0].State; got != tt.want {
				t.Fatalf("hello reports %v, want %v", got, tt.want)
			}
		})
	}
}

func TestShardFarewell(t *testing.T) {
	tests := []struct {
		name    string
		leaving bool
		want    bool
	}{
		{name: "ignored unless leaving", leaving: false, want: false},
		{name: "done when leaving", leaving: true, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := welcomed()
			if tt.leaving {
				s.Leave(sec(1))
				if out := s.Outbox(); len(out) != 1 || !out[0].Leaving {
					t.Fatalf("Leave did not send a leaving heartbeat: %v", out)
				}
			}
			s.Step(sec(2), cmd(s, CmdFarewell, 0, 0))
			if s.Done() != tt.want {
				t.Fatalf("Done = %v, want %v", s.Done(), tt.want)
			}
		})
	}
}

// TestShardAcquireRefresh: an Acquire's Refresh reaches the Work action only for a
// partition this shard prepared (its caches were warmed while the source still wrote); a
// cold partition is warmed by the Acquire itself, after the source stopped.
func TestShardAcquireRefresh(t *testing.T) {
	e1 := MakeEpoch(1, 1)
	tests := []struct {
		name        string
		prepared    bool
		refresh     bool
		wantActions []Action
	}{
		{name: "prepared, moved from a shard that released it", prepared: true, refresh: true,
			wantActions: []Action{{Kind: ActionWork, Partition: 3, Epoch: e1, Refresh: true}}},
		{name: "prepared, Acquire without Refresh", prepared: true,
			wantActions: []Action{{Kind: ActionWork, Partition: 3, Epoch: e1}}},
		{name: "cold", refresh: true,
			wantActions: []Action{{Kind: ActionWarm, Partition: 3, Epoch: e1}, {Kind: ActionWork, Partition: 3, Epoch: e1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := welcomed()
			if tt.prepared {
				if err := s.Step(sec(1), cmd(s, CmdPrepare, 3, e1)); err != nil {
					t.Fatal(err)
				}
				s.Synced(sec(1), 3, e1)
				s.Actions()
			}
			c := cmd(s, CmdAcquire, 3, e1)
			c.Refresh = tt.refresh
			if err := s.Step(sec(2), c); err != nil {
				t.Fatal(err)
			}
			if got := s.Actions(); !slices.Equal(got, tt.wantActions) {
				t.Errorf("actions %+v, want %+v", got, tt.wantActions)
			}
		})
	}
}

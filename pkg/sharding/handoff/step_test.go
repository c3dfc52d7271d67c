package handoff

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestMessagesLeaveTimedWorkToTick pins what a message sends at once and what it leaves
// to the next Tick (see Step): heartbeats and Acquired only answer for themselves, so
// that the messages that come by the thousand do not each walk every partition, while
// Prepared and Released keep a move going without waiting for a tick.
func TestMessagesLeaveTimedWorkToTick(t *testing.T) {
	heartbeat := func(shard string) Report {
		return Report{Kind: ReportHeartbeat, Shard: shard, Session: Session{1, 1}, Seq: 3}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, c *Coordinator)
	}{
		{
			name: "a heartbeat does not resend overdue Acquires; the tick does",
			run: func(t *testing.T, c *Coordinator) {
				serve(t, c, at(13)) // 16 Acquires out, none confirmed
				if err := c.Step(at(14.5), heartbeat("a")); err != nil {
					t.Fatal(err)
				}
				if out := c.Outbox(); len(out) != 1 || out[0].Kind != CmdAck {
					t.Fatalf("heartbeat sent %v, want only its Ack", out)
				}
				c.Tick(at(14.5))
				if got := countKind(c.Outbox(), CmdAcquire); got != 16 {
					t.Fatalf("tick resent %d Acquires, want 16", got)
				}
			},
		},
		{
			name: "Acquired confirms and sends nothing",
			run: func(t *testing.T, c *Coordinator) {
				serve(t, c, at(13))
				a, _ := c.Assignment(0)
				if err := c.Step(at(14.5), Report{Kind: ReportAcquired, Shard: a.Owner, Session: Session{1, 1}, Partition: 0, Epoch: a.Epoch}); err != nil {
					t.Fatal(err)
				}
				if out := c.Outbox(); len(out) != 0 {
					t.Fatalf("Acquired sent %v, want nothing", out)
				}
				if a, _ := c.Assignment(0); a.State != StateOwned {
					t.Fatalf("partition 0 is %v after Acquired", a.State)
				}
				c.Tick(at(14.5))
				if got := countKind(c.Outbox(), CmdAcquire); got != 15 {
					t.Fatalf("tick resent %d Acquires, want the 15 unconfirmed", got)
				}
			},
		},
		{
			name: "Prepared sends its Release at once, Released the Acquire and the next move",
			run: func(t *testing.T, c *Coordinator) {
				c.cfg.MaxConcurrentMoves = 1
				serve(t, c, at(13))
				confirmAll(t, c, at(13))
				if err := c.Step(at(14), hello("c", 1)); err != nil {
					t.Fatal(err)
				}
				c.Outbox()
				c.Tick(at(15.5)) // debounce over
				req, _ := c.TakeRingRequest()
				target, err := req.Compute()
				c.RingComputed(at(15.5), req.Gen, target, err)
				prepares := commandsOf(c.Outbox(), CmdPrepare)
				if len(prepares) != 1 {
					t.Fatalf("%d moves started with MaxConcurrentMoves 1", len(prepares))
				}
				p := prepares[0]
				if err := c.Step(at(15.6), Report{Kind: ReportPrepared, Shard: "c", Session: Session{1, 1}, Partition: p.Partition, Epoch: p.Epoch}); err != nil {
					t.Fatal(err)
				}
				out := c.Outbox()
				if len(out) != 1 || out[0].Kind != CmdRelease || out[0].Partition != p.Partition {
					t.Fatalf("Prepared sent %v, want the Release of p%d", out, p.Partition)
				}
				if err := c.Step(at(15.7), Report{Kind: ReportReleased, Shard: out[0].To, Session: Session{1, 1}, Partition: p.Partition, Epoch: p.Epoch}); err != nil {
					t.Fatal(err)
				}
				out = c.Outbox()
				if countKind(out, CmdAcquire) != 1 || countKind(out, CmdPrepare) != 1 {
					t.Fatalf("Released sent %v, want the Acquire and the next move's Prepare", out)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, offloaded(t, 16, "a", "b"))
		})
	}
}

// confirmAll answers every Acquire the coordinator has out.
func confirmAll(t *testing.T, c *Coordinator, now time.Time) {
	t.Helper()
	for _, a := range c.Assignments() {
		if a.State != StateAcquiring {
			continue
		}
		if err := c.Step(now, Report{Kind: ReportAcquired, Shard: a.Owner, Session: Session{1, 1}, Partition: a.Partition, Epoch: a.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	c.Outbox()
}

func commandsOf(cmds []Command, k CommandKind) []Command {
	var out []Command
	for _, c := range cmds {
		if c.Kind == k {
			out = append(out, c)
		}
	}
	return out
}

// TestExpiryFloor: expire looks at members and tombs only once the earliest may have
// come, and still drops each at its exact time: a member joining after the floor was
// taken, the first member after all had gone, and a tomb older than others.
func TestExpiryFloor(t *testing.T) {
	c := offloaded(t, 16, "a", "b") // hellos at 10: both expire at 22 (TTL 10s + Margin 2s)
	step := func(s float64, r Report) error {
		t.Helper()
		err := c.Step(at(s), r)
		c.Outbox()
		return err
	}
	members := func() []string {
		var ids []string
		for _, m := range c.Members() {
			ids = append(ids, m.ID)
		}
		return ids
	}
	want := func(s float64, ids ...string) {
		t.Helper()
		if got := members(); !slices.Equal(got, ids) {
			t.Fatalf("members at %vs: %v, want %v", s, got, ids)
		}
	}
	beat := func(shard string) Report {
		return Report{Kind: ReportHeartbeat, Shard: shard, Session: Session{1, 1}, Seq: 1}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(step(20, beat("a"))) // a now expires at 32
	must(step(21.9, beat("a")))
	want(21.9, "a", "b")
	must(step(22, beat("a"))) // b's time, on a message, not a tick
	want(22, "a")
	must(step(23, hello("c", 1))) // c expires at 35, after the floor taken at 22 (a's 33.9)
	must(step(30, beat("a")))     // a: 42
	must(step(34.9, beat("a")))
	want(34.9, "a", "c")
	must(step(35, beat("a")))
	want(35, "a")
	c.Tick(at(46.9)) // a's last heartbeat at 35: expires at 47
	want(46.9, "a")
	c.Tick(at(47))
	want(47)
	must(step(50, hello("d", 1))) // the first member after all had gone: expires at 62
	c.Tick(at(61.9))
	want(61.9, "d")
	c.Tick(at(62))
	want(62)

	// Tombs last 4×(TTL+Margin) = 48s: b's (from 22) until 70, c's (35) until 83. Until
	// then a hello of the ended session is stale; after, it is a new member.
	var rej *Rejection
	if err := step(70, hello("b", 1)); !errors.As(err, &rej) || rej.Reason != ReasonStaleSession {
		t.Fatalf("hello of b's ended session at 70s: %v, want %v", err, ReasonStaleSession)
	}
	must(step(70.1, hello("b", 1)))
	must(step(80, beat("b")))
	if err := step(70.2, hello("c", 1)); !errors.As(err, &rej) || rej.Reason != ReasonStaleSession {
		t.Fatalf("hello of c's ended session at 70.2s: %v, want %v", err, ReasonStaleSession)
	}
	must(step(83.1, hello("c", 1)))
	want(83.1, "b", "c")
}

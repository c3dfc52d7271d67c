package handoff

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func hello(id string, inc uint64) Report {
	return Report{Kind: ReportHello, Shard: id, Session: Session{Incarnation: inc, Seq: 1}}
}

// offloaded returns a coordinator whose ring the test computes, with the
// given shards said hello at 10s: the grace of testConfig ends at 12s,
// their sessions at 22s.
func offloaded(t *testing.T, p int, ids ...string) *Coordinator {
	t.Helper()
	c, err := New(testConfig(p), 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	c.OffloadRing()
	for _, id := range ids {
		if err := c.Step(at(10), hello(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	c.Outbox()
	return c
}

func countKind(cmds []Command, k CommandKind) int {
	n := 0
	for _, c := range cmds {
		if c.Kind == k {
			n++
		}
	}
	return n
}

// TestOffloadedRingIsNotComputedInline: with OffloadRing the coordinator
// only asks for the target, keeps acknowledging heartbeats while it is
// computed elsewhere, and plans as soon as the result comes back.
func TestOffloadedRingIsNotComputedInline(t *testing.T) {
	c := offloaded(t, 16, "a", "b")
	c.Tick(at(13))
	if a, _ := c.Assignment(0); a.Target != "" || countKind(c.Outbox(), CmdAcquire) != 0 {
		t.Fatal("target computed or partitions granted without a ring result")
	}
	req, ok := c.TakeRingRequest()
	if !ok || !slices.Equal(req.Members, []string{"a", "b"}) {
		t.Fatalf("TakeRingRequest() = %+v, %v; want members [a b]", req, ok)
	}
	if len(req.Current) != 16 || slices.ContainsFunc(req.Current, func(o string) bool { return o != "" }) {
		t.Fatalf("first request's current owners = %q, want 16 times nobody", req.Current)
	}
	if _, again := c.TakeRingRequest(); again {
		t.Fatal("the same request was handed out twice")
	}
	if !c.Stats().RingPending || c.Converged() {
		t.Fatal("a pending target must show in Stats and keep Converged false")
	}
	// Meanwhile the coordinator still serves shards.
	if err := c.Step(at(13.5), Report{Kind: ReportHeartbeat, Shard: "a", Session: Session{1, 1}, Seq: 7}); err != nil {
		t.Fatal(err)
	}
	if out := c.Outbox(); countKind(out, CmdAck) != 1 {
		t.Fatalf("heartbeat not acknowledged while the ring is computed: %v", out)
	}
	target, err := req.Compute()
	if err != nil {
		t.Fatal(err)
	}
	c.RingComputed(at(14), req.Gen, target, nil)
	if got := countKind(c.Outbox(), CmdAcquire); got != 16 {
		t.Fatalf("%d Acquires after the ring result, want 16", got)
	}
	if st := c.Stats(); st.RingPending || st.TargetChanges != 1 || st.RingRequests != 1 {
		t.Fatalf("stats after the result: %+v", st)
	}
}

// TestRingGenerations: results of superseded generations are ignored, at
// most one computation is outstanding, and a failed or malformed result
// keeps the previous target.
func TestRingGenerations(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, c *Coordinator)
	}{
		{
			name: "result of an outdated generation is ignored",
			run: func(t *testing.T, c *Coordinator) {
				c.Tick(at(13))
				old, _ := c.TakeRingRequest()
				if err := c.Step(at(13.1), hello("c", 1)); err != nil {
					t.Fatal(err)
				}
				if _, ok := c.TakeRingRequest(); ok {
					t.Fatal("a second computation was handed out while one is outstanding")
				}
				target, _ := old.Compute()
				c.RingComputed(at(13.2), old.Gen, target, nil)
				if a, _ := c.Assignment(0); a.Target != "" || c.Stats().RingResultsStale != 1 {
					t.Fatalf("stale result applied: target %q, stats %+v", a.Target, c.Stats())
				}
				req, ok := c.TakeRingRequest()
				if !ok || req.Gen <= old.Gen || !slices.Equal(req.Members, []string{"a", "b", "c"}) {
					t.Fatalf("after the stale result: %+v, %v; want the newer generation for [a b c]", req, ok)
				}
				target, _ = req.Compute()
				c.RingComputed(at(13.3), req.Gen, target, nil)
				if st := c.Stats(); st.TargetChanges != 1 || st.RingPending {
					t.Fatalf("stats %+v", st)
				}
			},
		},
		{
			name: "membership back to the applied set cancels the request",
			run: func(t *testing.T, c *Coordinator) {
				serve(t, c, at(13))
				if err := c.Step(at(14), hello("c", 1)); err != nil {
					t.Fatal(err)
				}
				c.Tick(at(15.5)) // debounce (1s) over: a request for [a b c]
				req, ok := c.TakeRingRequest()
				if !ok {
					t.Fatal("no request after the debounce")
				}
				if err := c.Step(at(15.6), Report{Kind: ReportHeartbeat, Shard: "c", Session: Session{1, 1}, Leaving: true}); err != nil {
					t.Fatal(err)
				}
				c.Tick(at(17)) // [a b] again, which the target is for
				target, _ := req.Compute()
				c.RingComputed(at(17.1), req.Gen, target, nil)
				if st := c.Stats(); st.RingPending || st.TargetChanges != 1 || st.RingResultsStale != 1 {
					t.Fatalf("stats %+v", st)
				}
				if _, ok := c.TakeRingRequest(); ok {
					t.Fatal("a request for the member set already applied")
				}
			},
		},
		{
			name: "first result failing starts from an empty target",
			run: func(t *testing.T, c *Coordinator) {
				c.Tick(at(13))
				req, _ := c.TakeRingRequest()
				c.RingComputed(at(13.1), req.Gen, RingResult{}, errors.New("boom"))
				st := c.Stats()
				if st.RingErrors != 1 || st.LastRingError != "boom" || st.RingPending {
					t.Fatalf("stats %+v", st)
				}
				if a, _ := c.Assignment(0); a.Target != "" {
					t.Fatalf("target %q after a failed first ring", a.Target)
				}
			},
		},
		{
			name: "result of the wrong length keeps the old target",
			run: func(t *testing.T, c *Coordinator) {
				serve(t, c, at(13))
				if err := c.Step(at(14), hello("c", 1)); err != nil {
					t.Fatal(err)
				}
				c.Tick(at(15.5))
				req, _ := c.TakeRingRequest()
				c.RingComputed(at(15.6), req.Gen, RingResult{Target: []string{"c"}}, nil)
				if st := c.Stats(); st.RingErrors != 1 || st.TargetChanges != 1 {
					t.Fatalf("stats %+v", st)
				}
				if a, _ := c.Assignment(0); a.Target == "" || a.Target == "c" {
					t.Fatalf("target %q, want the previous one", a.Target)
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

// serve ticks at now and computes the requested target synchronously.
func serve(t *testing.T, c *Coordinator, now time.Time) {
	t.Helper()
	c.Tick(now)
	req, ok := c.TakeRingRequest()
	if !ok {
		t.Fatal("no ring request")
	}
	target, err := req.Compute()
	c.RingComputed(now, req.Gen, target, err)
	c.Outbox()
}

// TestMaxMembers: a hello from a new shard beyond MaxMembers is refused
// with its own reason; members already in, and new incarnations of them,
// are not affected; a slot freed by expiry is taken again.
func TestMaxMembers(t *testing.T) {
	cfg := testConfig(16)
	cfg.MaxMembers = 2
	c, err := New(cfg, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		at         float64
		r          Report
		wantReason Reason
	}{
		{name: "first", at: 0, r: hello("a", 1)},
		{name: "second", at: 0, r: hello("b", 1)},
		{name: "third is refused", at: 1, r: hello("c", 1), wantReason: ReasonTooManyMembers},
		{name: "reconnect of a member", at: 2, r: Report{Kind: ReportHello, Shard: "a", Session: Session{1, 2}}},
		{name: "restart of a member", at: 3, r: hello("b", 2)},
		{name: "still refused", at: 4, r: hello("c", 1), wantReason: ReasonTooManyMembers},
		{name: "b keeps its session", at: 10, r: Report{Kind: ReportHeartbeat, Shard: "b", Session: Session{2, 1}}},
		// a was last heard at 2s: expired at 2+10+2 = 14s, which frees a slot.
		{name: "slot freed by expiry", at: 14, r: hello("c", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Step(at(tt.at), tt.r)
			if got := ReasonOf(err); got != tt.wantReason {
				t.Fatalf("Step() = %v, want reason %v", err, tt.wantReason)
			}
			if n := len(c.Members()); n > cfg.MaxMembers {
				t.Fatalf("%d members, cap %d", n, cfg.MaxMembers)
			}
		})
	}
	if got := c.Stats().Rejected[ReasonTooManyMembers]; got != 2 {
		t.Fatalf("%d too_many_members rejections counted, want 2", got)
	}
}

// TestMaxMembersValidation: the cap must be positive, and bounded together
// with the replication factor since their product is the ring's size.
func TestMaxMembersValidation(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{name: "default", mutate: func(*Config) {}},
		{name: "negative", mutate: func(c *Config) { c.MaxMembers = -1 }, wantErr: true},
		{name: "default cap at the largest replication factor", mutate: func(c *Config) { c.Ring.ReplicationFactor = 10000 }},
		{name: "cap times replication factor too large", mutate: func(c *Config) { c.MaxMembers = 100_001; c.Ring.ReplicationFactor = 100 }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(16)
			tt.mutate(&cfg)
			err := cfg.WithDefaults().Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

// BenchmarkMembershipChange measures what one membership change costs the
// caller of Tick, which in coordinatorrpc holds the server's lock: with the
// ring computed inline, and offloaded (the edge computes it outside the
// lock; only taking the request and applying the result are counted).
func BenchmarkMembershipChange(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, offload := range []bool{false, true} {
			mode := "inline"
			if offload {
				mode = "offloaded"
			}
			b.Run(fmt.Sprintf("P=4096/members=%d/%s", n, mode), func(b *testing.B) {
				cfg := testConfig(4096)
				cfg.Debounce, cfg.MaxDebounce = time.Millisecond, time.Millisecond
				// Sessions outlive the run without heartbeats.
				cfg.SessionTTL, cfg.HeartbeatInterval, cfg.Margin = time.Hour, time.Minute, 2*time.Minute
				c, err := New(cfg, 1, t0)
				if err != nil {
					b.Fatal(err)
				}
				if offload {
					c.OffloadRing()
				}
				now := t0.Add(cfg.SessionTTL + cfg.Margin - time.Second) // just before the grace ends
				for i := range n {
					c.Step(now, hello(fmt.Sprintf("s%d", i), 1))
				}
				// The ring result, computed outside the measurement.
				var pending RingResult
				var gen uint64
				tick := func() {
					c.Tick(now)
					if req, ok := c.TakeRingRequest(); ok {
						b.StopTimer()
						pending, _ = req.Compute()
						gen = req.Gen
						b.StartTimer()
						c.RingComputed(now, gen, pending, nil)
					}
					c.Outbox()
					c.Events()
				}
				now = now.Add(2 * time.Second)
				tick()
				inc := uint64(1)
				b.ResetTimer()
				for b.Loop() {
					// One member restarts with a new incarnation: it leaves
					// the member set (its old lease must run out) and comes
					// back, so the target changes twice per iteration.
					inc++
					now = now.Add(time.Millisecond)
					c.Step(now, Report{Kind: ReportHeartbeat, Shard: "s0", Session: Session{inc - 1, 1}, Leaving: true})
					now = now.Add(time.Millisecond) // past the debounce
					tick()
					now = now.Add(time.Millisecond)
					c.Step(now, hello("s0", inc))
					now = now.Add(time.Millisecond)
					tick()
				}
				b.StopTimer()
				st := c.Stats()
				if st.Members != n {
					b.Fatalf("%d members, want %d", st.Members, n)
				}
				b.ReportMetric(float64(st.TargetChanges-1)/float64(b.N), "targets/op")
			})
		}
	}
}

// TestTargetKeepsOwners: the target is computed from the current owners
// (RingRequest.Current), so from a converged cluster a join moves partitions
// only to the new shard, floor(P/N) or ceil(P/N) of them, and a leave moves
// only the leaver's; each moved partition is moved once.
func TestTargetKeepsOwners(t *testing.T) {
	tests := []struct {
		name   string
		p      int
		shards []string
		join   string // the shard that joins, or
		leave  string // the shard that leaves
	}{
		{name: "join", p: 64, shards: []string{"a", "b", "c"}, join: "d"},
		{name: "join, more shards than partitions", p: 4, shards: []string{"a", "b", "c", "d"}, join: "e"},
		{name: "leave", p: 64, shards: []string{"a", "b", "c", "d"}, leave: "b"},
		{name: "leave of the last name", p: 61, shards: []string{"a", "b", "c", "d", "e"}, leave: "e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := converged(t, tt.p, tt.shards...)
			before := k.c.Assignments()
			started := k.c.Stats().MovesStarted
			if tt.join != "" {
				k.addShard(tt.join, 1)
			} else {
				k.shards[tt.leave].Leave(k.now)
				k.pump()
			}
			k.run(20*time.Second, 500*time.Millisecond)
			if !k.c.Converged() {
				t.Fatalf("not converged: %+v", k.c.Stats())
			}
			moved := 0
			for i, a := range k.c.Assignments() {
				from := before[i].Owner
				if a.Owner == from {
					continue
				}
				moved++
				if (tt.join != "" && a.Owner != tt.join) || (tt.leave != "" && from != tt.leave) {
					t.Fatalf("partition %d moved needlessly: %s → %s", i, from, a.Owner)
				}
			}
			if n := k.c.Stats().MovesStarted - started; n != uint64(moved) {
				t.Fatalf("%d moves started for %d partitions that changed owner", n, moved)
			}
			if tt.join != "" {
				if lo := tt.p / (len(tt.shards) + 1); moved < lo || moved > lo+1 {
					t.Fatalf("join moved %d partitions, want %d or %d", moved, lo, lo+1)
				}
			}
		})
	}
}

// TestExpectedMembers: with Config.ExpectedMembers, a cold coordinator (its target assigns
// nothing) computes the target at the tick the expected count of shards is reached, not
// Debounce later; without it, with fewer shards, and once a target assigns partitions,
// membership changes wait for the debounce (testConfig: 1 s).
func TestExpectedMembers(t *testing.T) {
	type join struct {
		id string
		at time.Duration
	}
	type target struct {
		members  int
		from, to time.Duration // when the target for members is computed, after the grace
	}
	abc := []join{{"a", 100 * time.Millisecond}, {"b", 200 * time.Millisecond}, {"c", 300 * time.Millisecond}}
	for _, tc := range []struct {
		name     string
		expected int
		joins    []join
		want     []target
	}{
		{name: "unknown: debounced", joins: abc, want: []target{{3, 1300 * time.Millisecond, 1400 * time.Millisecond}}},
		{name: "every expected shard: at once", expected: 3, joins: abc, want: []target{{3, 300 * time.Millisecond, 300 * time.Millisecond}}},
		{name: "fewer than expected: debounced", expected: 4, joins: abc, want: []target{{3, 1300 * time.Millisecond, 1400 * time.Millisecond}}},
		{name: "more than expected: the expected at once, the rest debounced", expected: 2, joins: abc,
			want: []target{{2, 200 * time.Millisecond, 200 * time.Millisecond}, {3, 1300 * time.Millisecond, 1400 * time.Millisecond}}},
		{name: "a join after a target with members: debounced", expected: 3, joins: append(slices.Clone(abc), join{"d", 2 * time.Second}),
			want: []target{{3, 300 * time.Millisecond, 300 * time.Millisecond}, {4, 3 * time.Second, 3100 * time.Millisecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(32)
			cfg.ExpectedMembers = tc.expected
			k := newCluster(t, cfg, 1)
			// The first target, at the end of the new leader's grace, is for no member.
			base := t0.Add(cfg.SessionTTL + cfg.Margin)
			k.now = base
			k.c.Tick(k.now)
			k.c.Events()
			var got []target
			for step := time.Duration(0); step <= 5*time.Second; step += 100 * time.Millisecond {
				k.now = base.Add(step)
				for _, j := range tc.joins {
					if j.at == step {
						k.addShard(j.id, 1)
					}
				}
				k.c.Tick(k.now)
				k.pump()
				for _, e := range k.c.Events() {
					if e.Kind == EventTargetChanged && e.Members > 0 {
						got = append(got, target{members: e.Members, from: step, to: step})
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("targets computed (members, at): %v, want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].members != w.members || got[i].from < w.from || got[i].from > w.to {
					t.Errorf("target %d: for %d members at %s, want %d members in [%s, %s]", i, got[i].members, got[i].from, w.members, w.from, w.to)
				}
			}
		})
	}
}

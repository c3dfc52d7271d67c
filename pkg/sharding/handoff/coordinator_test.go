package handoff

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestGraceBeforeGrants: a new leader grants nothing it was not told about
// until TTL+Margin after it started, then grants everything.
func TestGraceBeforeGrants(t *testing.T) {
	k := newCluster(t, testConfig(16), 1)
	k.addShard("a", 1)
	k.addShard("b", 1)
	k.run(11*time.Second, 500*time.Millisecond)
	if n := len(k.workers()); n != 0 {
		t.Fatalf("%d partitions worked before the grace of %v ended", n, 12*time.Second)
	}
	k.run(3*time.Second, 500*time.Millisecond)
	if n := len(k.workers()); n != 16 {
		t.Fatalf("%d of 16 partitions worked after the grace", n)
	}
	if !k.c.Converged() {
		t.Fatalf("not converged: %+v", k.c.Stats())
	}
}

// converged returns a cluster of the given shards that owns everything.
func converged(t *testing.T, p int, ids ...string) *cluster {
	k := newCluster(t, testConfig(p), 1)
	for _, id := range ids {
		k.addShard(id, 1)
	}
	k.run(20*time.Second, 500*time.Millisecond)
	if !k.c.Converged() {
		t.Fatalf("setup did not converge: %+v", k.c.Stats())
	}
	k.sent = nil
	return k
}

// TestMoveOrder: when a shard joins, every moved partition goes Prepare →
// Release → Acquire, the Acquire only after the old owner released, and no
// partition is ever worked twice.
func TestMoveOrder(t *testing.T) {
	k := converged(t, 32, "a", "b")
	k.addShard("c", 1)
	for range 40 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkSafe()
	}
	if !k.c.Converged() {
		t.Fatalf("not converged after join: %+v", k.c.Stats())
	}
	type seen struct{ prepare, release, acquire int }
	order := map[partition.ID]*seen{}
	for i, c := range k.sent {
		o := order[c.Partition]
		if o == nil {
			o = &seen{-1, -1, -1}
			order[c.Partition] = o
		}
		switch c.Kind {
		case CmdPrepare:
			o.prepare = i
		case CmdRelease:
			o.release = i
		case CmdAcquire:
			o.acquire = i
			// The move's new owner warmed while the source still wrote: it lists
			// again. A first grant has nobody's writes to catch up with.
			if moved := o.release >= 0; c.Refresh != moved {
				t.Fatalf("partition %d: acquire %d has Refresh %v; a release was sent before it: %v", c.Partition, i, c.Refresh, moved)
			}
		}
	}
	moved := 0
	for p, o := range order {
		if o.prepare < 0 {
			continue
		}
		moved++
		if !(o.prepare < o.release && o.release < o.acquire) {
			t.Fatalf("partition %d: prepare %d, release %d, acquire %d out of order", p, o.prepare, o.release, o.acquire)
		}
	}
	if st := k.c.Stats(); moved == 0 || st.MovesFinished != uint64(moved) {
		t.Fatalf("moved %d partitions, stats %+v", moved, st)
	}
}

// TestExpiry: a silent shard's partitions are granted elsewhere only after
// its last heartbeat + TTL + Margin.
func TestExpiry(t *testing.T) {
	k := converged(t, 16, "a", "b")
	lastHeard := k.c.Members()[0].LastHeard
	var ofA []partition.ID
	for _, a := range k.c.Assignments() {
		if a.Owner == "a" {
			ofA = append(ofA, a.Partition)
		}
	}
	k.down["a"] = true
	expiry := lastHeard.Add(12 * time.Second) // TTL 10s + Margin 2s
	for k.now.Add(500 * time.Millisecond).Before(expiry) {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		for _, p := range ofA {
			if a, _ := k.c.Assignment(p); a.Owner != "a" {
				t.Fatalf("partition %d taken from a at %v, before its expiry at %v", p, k.now, expiry)
			}
		}
	}
	k.run(8*time.Second, 500*time.Millisecond)
	for _, a := range k.c.Assignments() {
		if a.Owner != "b" || a.State != StateOwned {
			t.Fatalf("after expiry partition %d is %s/%v", a.Partition, a.Owner, a.State)
		}
	}
	// Without the owner record, an expired owner's partitions are granted with an
	// Acquire, not warmed ahead of it: the new owner lists after the grant, when the
	// expired owner's lease has ended, and needs no second list.
	for _, c := range k.sent {
		if c.Kind == CmdAcquire && c.Refresh {
			t.Fatalf("%v after an expiry asks for a refresh", c)
		}
	}
}

// TestExpiryRetargetsAtOnce: an expired member's partitions are granted to the others in
// the step that expires it, without the membership debounce: a shard silent for TTL +
// margin is gone, not the first of a rolling update's restarts.
func TestExpiryRetargetsAtOnce(t *testing.T) {
	cfg := testConfig(16)
	cfg.Debounce, cfg.MaxDebounce = time.Hour, time.Hour
	k := newCluster(t, cfg, 1)
	k.addShard("a", 1)
	k.addShard("b", 1)
	k.run(20*time.Second, 500*time.Millisecond) // the first target is not debounced
	if !k.c.Converged() {
		t.Fatalf("setup did not converge: %+v", k.c.Stats())
	}
	lastHeard := k.c.Members()[0].LastHeard
	k.down["a"] = true
	expiry := lastHeard.Add(12 * time.Second) // TTL 10s + Margin 2s
	k.run(expiry.Sub(k.now)+time.Second, 500*time.Millisecond)
	for _, a := range k.c.Assignments() {
		if a.Owner != "b" || a.State != StateOwned {
			t.Fatalf("1s after a's expiry (debounce 1h) partition %d is %s/%v", a.Partition, a.Owner, a.State)
		}
	}
}

// TestRejections: every stale or bad report is refused with its reason.
func TestRejections(t *testing.T) {
	k := converged(t, 8, "a")
	sess := k.shards["a"].Session()
	owned, _ := k.c.Assignment(0)
	tests := []struct {
		name string
		r    Report
		want Reason
	}{
		{name: "unknown shard", r: Report{Kind: ReportHeartbeat, Shard: "zz", Session: Session{1, 1}}, want: ReasonUnknownShard},
		{name: "stale incarnation", r: Report{Kind: ReportHello, Shard: "a", Session: Session{0, 9}}, want: ReasonStaleIncarnation},
		{name: "duplicate hello", r: Report{Kind: ReportHello, Shard: "a", Session: sess}, want: ReasonStaleSession},
		{name: "old session heartbeat", r: Report{Kind: ReportHeartbeat, Shard: "a", Session: Session{1, sess.Seq - 1}}, want: ReasonStaleSession},
		{name: "acquired with wrong epoch", r: Report{Kind: ReportAcquired, Shard: "a", Session: sess, Partition: 0, Epoch: owned.Epoch + 1}, want: ReasonStaleEpoch},
		{name: "released without a release", r: Report{Kind: ReportReleased, Shard: "a", Session: sess, Partition: 0, Epoch: owned.Epoch}, want: ReasonNotHolder},
		{name: "prepared without a move", r: Report{Kind: ReportPrepared, Shard: "a", Session: sess, Partition: 0, Epoch: owned.Epoch}, want: ReasonNotHolder},
		{name: "no such partition", r: Report{Kind: ReportAcquired, Shard: "a", Session: sess, Partition: 99}, want: ReasonBadPartition},
		{name: "hello from a newer term", r: Report{Kind: ReportHello, Shard: "n", Session: Session{1, 1}, Held: []Held{{1, MakeEpoch(2, 1), SlotAcquired}}}, want: ReasonNewerTerm},
		{name: "unknown kind", r: Report{Kind: 99, Shard: "a", Session: sess}, want: ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := k.c.Stats().Rejected[tt.want]
			err := k.c.Step(k.now, tt.r)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("reason = %v (%v), want %v", got, err, tt.want)
			}
			if k.c.Stats().Rejected[tt.want] != before+1 {
				t.Fatal("rejection not counted")
			}
			k.c.Outbox()
		})
	}
	if a, _ := k.c.Assignment(0); a != owned {
		t.Fatalf("rejected reports changed partition 0: %+v → %+v", owned, a)
	}
}

// TestNewLeaderAdoptsAndResolvesDoubleClaims: a new leader keeps reported
// ownership, keeps the newest of two claims and asks the other to release.
func TestNewLeaderAdoptsAndResolvesDoubleClaims(t *testing.T) {
	cfg := testConfig(4)
	c, err := New(cfg, 3, t0)
	if err != nil {
		t.Fatal(err)
	}
	old, newer := MakeEpoch(2, 5), MakeEpoch(2, 9)
	tests := []struct {
		name     string
		r        Report
		wantKeep int
	}{
		{name: "a claims p0 and p1", r: Report{Kind: ReportHello, Shard: "a", Session: Session{1, 1}, Held: []Held{{0, old, SlotAcquired}, {1, old, SlotAcquired}}}, wantKeep: 2},
		{name: "b claims p1 newer", r: Report{Kind: ReportHello, Shard: "b", Session: Session{1, 1}, Held: []Held{{1, newer, SlotAcquired}}}, wantKeep: 1},
		{name: "c claims p0 older", r: Report{Kind: ReportHello, Shard: "c", Session: Session{1, 1}, Held: []Held{{0, MakeEpoch(2, 1), SlotAcquired}}}, wantKeep: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Step(t0.Add(time.Second), tt.r); err != nil {
				t.Fatal(err)
			}
			out := c.Outbox()
			if len(out) == 0 || out[0].Kind != CmdWelcome || len(out[0].Keep) != tt.wantKeep {
				t.Fatalf("outbox %v, want a welcome keeping %d", out, tt.wantKeep)
			}
		})
	}
	want := map[partition.ID]string{0: "a", 1: "b"}
	for p, owner := range want {
		if a, _ := c.Assignment(p); a.Owner != owner {
			t.Fatalf("p%d owner %q, want %q", p, a.Owner, owner)
		}
	}
	c.Tick(t0.Add(2 * time.Second))
	var release *Command
	for _, cmd := range c.Outbox() {
		if cmd.Kind == CmdRelease && cmd.To == "a" && cmd.Partition == 1 {
			release = &cmd
		}
	}
	if release == nil {
		t.Fatal("older claimant a was not asked to release p1")
	}
	if err := c.Step(t0.Add(3*time.Second), Report{Kind: ReportReleased, Shard: "a", Session: Session{1, 1}, Partition: 1, Epoch: release.Epoch}); err != nil {
		t.Fatalf("release of the older claim refused: %v", err)
	}
	if st := c.Stats(); st.Adoptions != 3 || st.DoubleClaims != 1 || st.StaleClaims != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGracefulLeave: a leaving shard's partitions move away while it still
// works them, then it gets Farewell and is removed once disconnected.
func TestGracefulLeave(t *testing.T) {
	k := converged(t, 16, "a", "b", "c")
	k.shards["b"].Leave(k.now)
	for range 40 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkSafe()
		if len(k.workers()) != 16 {
			t.Fatalf("a partition went unworked during a graceful leave at %v", k.now)
		}
	}
	if !k.shards["b"].Done() {
		t.Fatal("leaving shard got no farewell")
	}
	k.c.Disconnected(k.now, "b", k.shards["b"].Session())
	delete(k.shards, "b")
	if m := k.c.Members(); len(m) != 2 {
		t.Fatalf("members after leave: %+v", m)
	}
	if !k.c.Converged() {
		t.Fatal("not converged after leave")
	}
}

// TestEveryShardLeaving: when all members leave (scale to zero), there is nowhere to move
// their partitions; they are released to nobody so every shard gets its Farewell promptly,
// and a shard that joins later is granted them.
func TestEveryShardLeaving(t *testing.T) {
	k := converged(t, 16, "a", "b")
	k.shards["a"].Leave(k.now)
	k.shards["b"].Leave(k.now)
	for range 40 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkSafe()
		if k.shards["a"].Done() && k.shards["b"].Done() {
			break
		}
	}
	if !k.shards["a"].Done() || !k.shards["b"].Done() {
		t.Fatalf("leaving shards got no farewell when nobody is left to take their partitions (at %v)", k.now)
	}
	if w := k.workers(); len(w) != 0 {
		t.Fatalf("partitions still worked after every shard left: %v", w)
	}
	for _, id := range []string{"a", "b"} {
		k.c.Disconnected(k.now, id, k.shards[id].Session())
		delete(k.shards, id)
	}
	k.addShard("c", 1)
	for range 60 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkSafe()
		if len(k.workers()) == 16 {
			return
		}
	}
	t.Fatalf("a shard joining after everyone left did not get the partitions: %d worked", len(k.workers()))
}

// TestStuckReleaseFencesOut: a live shard that never finishes draining is
// fenced out after ReleaseTimeout; its partitions move once its lease ran
// out, never earlier.
func TestStuckReleaseFencesOut(t *testing.T) {
	k := converged(t, 8, "a")
	k.holdDrain = true
	k.addShard("b", 1)
	var fencedAt time.Time
	for range 120 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkSafe()
		if fencedAt.IsZero() && k.c.Stats().FenceOuts == 1 {
			fencedAt = k.now
		}
	}
	if fencedAt.IsZero() {
		t.Fatal("stuck shard was never fenced out")
	}
	if !k.c.Converged() {
		t.Fatalf("not converged after fence-out: %+v", k.c.Stats())
	}
	if k.c.Stats().Expirations != 1 {
		t.Fatal("the fenced-out shard did not expire")
	}
}

// TestDebounce: joins within Debounce make one target change.
func TestDebounce(t *testing.T) {
	k := converged(t, 16, "a")
	before := k.c.Stats().TargetChanges
	k.addShard("b", 1)
	k.run(500*time.Millisecond, 500*time.Millisecond)
	k.addShard("c", 1)
	k.run(10*time.Second, 500*time.Millisecond)
	if got := k.c.Stats().TargetChanges - before; got != 1 {
		t.Fatalf("%d target changes for two quick joins, want 1", got)
	}
}

func BenchmarkCoordinatorTick(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("P=4096/shards=%d", n), func(b *testing.B) {
			cfg := testConfig(4096)
			c, err := New(cfg, 1, t0)
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				c.Step(t0, Report{Kind: ReportHello, Shard: fmt.Sprintf("s%d", i), Session: Session{1, 1}})
			}
			now := t0.Add(13 * time.Second)
			c.Tick(now)
			c.Outbox()
			b.ResetTimer()
			for b.Loop() {
				c.Tick(now)
			}
		})
	}
}

// TestLoadReports: the Welcome carries Config.Load; a heartbeat's load report is recorded
// for its member (the balancer that uses it is step S4 of docs/design-placement.md), and
// the heartbeat is acknowledged whatever the report claims: partitions the shard does not
// hold, partitions it does, or none.
func TestLoadReports(t *testing.T) {
	cfg := testConfig(16)
	cfg.Load = LoadSettings{ReportInterval: 6 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.5}
	k := newCluster(t, cfg, 1)
	k.addShard("a", 1)
	k.addShard("b", 1)
	k.run(20*time.Second, 500*time.Millisecond)
	if !k.c.Converged() {
		t.Fatalf("setup did not converge: %+v", k.c.Stats())
	}
	welcomes := 0
	for _, c := range k.sent {
		if c.Kind == CmdWelcome {
			welcomes++
			if c.Load != cfg.Load {
				t.Errorf("%v carries load settings %+v, want %+v", c, c.Load, cfg.Load)
			}
		}
	}
	if welcomes != 2 {
		t.Fatalf("%d welcomes sent, want 2", welcomes)
	}
	held := map[string][]partition.ID{}
	for _, a := range k.c.Assignments() {
		held[a.Owner] = append(held[a.Owner], a.Partition)
	}
	member := func(id string) MemberInfo {
		for _, m := range k.c.Members() {
			if m.ID == id {
				return m
			}
		}
		t.Fatalf("no member %s", id)
		return MemberInfo{}
	}
	entries := func(ps ...partition.ID) *LoadReport {
		r := &LoadReport{}
		for _, p := range ps {
			r.Partitions = append(r.Partitions, PartitionLoad{Partition: p, LoadMilli: 1000, Objects: 5, AgeSeconds: 30})
		}
		return r
	}
	tests := []struct {
		name string
		load *LoadReport
	}{
		{name: "its own partitions", load: entries(held["a"]...)},
		{name: "partitions of another shard", load: entries(held["b"]...)},
		{name: "every partition", load: entries(append(append([]partition.ID(nil), held["a"]...), held["b"]...)...)},
		{name: "no entries", load: &LoadReport{}},
		{name: "no report", load: nil},
	}
	seq := uint64(1000)
	reports := member("a").LoadReports
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq++
			k.run(cfg.Load.ReportInterval, 500*time.Millisecond) // at the cadence, not early
			before := member("a")
			if err := k.c.Step(k.now, Report{Kind: ReportHeartbeat, Shard: "a", Session: before.Session, Seq: seq, Load: tc.load}); err != nil {
				t.Fatalf("heartbeat refused: %v", err)
			}
			acked := false
			for _, c := range k.c.Outbox() {
				acked = acked || (c.Kind == CmdAck && c.To == "a" && c.Seq == seq)
				if c.Kind == CmdSessionEnded {
					t.Fatalf("%v after a load report", c)
				}
			}
			if !acked {
				t.Fatal("heartbeat not acknowledged")
			}
			after := member("a")
			if tc.load == nil {
				if after.LoadReports != before.LoadReports || after.LoadReportedAt != before.LoadReportedAt {
					t.Fatalf("a heartbeat without a report changed the member's load record: %+v → %+v", before, after)
				}
				return
			}
			reports++
			if after.LoadReports != reports || !after.LoadReportedAt.Equal(k.now) || after.LoadEntries != len(tc.load.Partitions) {
				t.Fatalf("member after the report: %d reports, last at %v with %d entries; want %d at %v with %d",
					after.LoadReports, after.LoadReportedAt, after.LoadEntries, reports, k.now, len(tc.load.Partitions))
			}
		})
	}
	if got := member("b").LoadReports; got != 0 {
		t.Errorf("b, which sent no report, has %d", got)
	}

	// A report sooner than half the cadence after the last is dropped and counted, its
	// heartbeat acknowledged; the first after a Welcome (a reconnect) is due at once.
	send := func(load *LoadReport) {
		t.Helper()
		seq++
		if err := k.c.Step(k.now, Report{Kind: ReportHeartbeat, Shard: "a", Session: member("a").Session, Seq: seq, Load: load}); err != nil {
			t.Fatalf("heartbeat refused: %v", err)
		}
		if !slices.ContainsFunc(k.c.Outbox(), func(c Command) bool { return c.Kind == CmdAck && c.Seq == seq }) {
			t.Fatal("heartbeat not acknowledged")
		}
	}
	k.run(cfg.Load.ReportInterval, 500*time.Millisecond)
	send(entries(held["a"]...))
	took, early := member("a").LoadReports, k.c.Stats().Balance.ReportsRejected["early"]
	k.run(cfg.Load.ReportInterval/2-time.Second, 500*time.Millisecond)
	send(entries(held["a"]...))
	if got := member("a").LoadReports; got != took || k.c.Stats().Balance.ReportsRejected["early"] != early+1 {
		t.Fatalf("a report %s after the last: %d reports taken (want %d), early %d (want %d)", cfg.Load.ReportInterval/2-time.Second,
			got, took, k.c.Stats().Balance.ReportsRejected["early"], early+1)
	}
	k.run(time.Second, 500*time.Millisecond)
	send(entries(held["a"]...))
	if got := member("a").LoadReports; got != took+1 {
		t.Fatalf("a report half the cadence after the last was not taken: %d reports, want %d", got, took+1)
	}
	k.shards["a"].Connect(k.now) // a new stream: hello, Welcome
	k.pump()
	send(entries(held["a"]...))
	if got := member("a").LoadReports; got != took+2 {
		t.Fatalf("the first report after a Welcome was not taken: %d reports, want %d", got, took+2)
	}
	for _, a := range k.c.Assignments() {
		if a.Owner == "" || a.State != StateOwned {
			t.Fatalf("after the reports partition %d is %s/%v: load reports moved nothing yet", a.Partition, a.Owner, a.State)
		}
	}
}

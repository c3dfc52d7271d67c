package handoff

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func recordConfig(p int, seizeAfter time.Duration) Config {
	cfg := testConfig(p)
	cfg.OwnerRecord = true
	cfg.SeizeAfter = seizeAfter
	return cfg
}

// convergedRecord returns a cluster with the owner record on that owns everything.
func convergedRecord(t *testing.T, p int, seizeAfter time.Duration, ids ...string) *cluster {
	t.Helper()
	k := newCluster(t, recordConfig(p, seizeAfter), 1)
	for _, id := range ids {
		k.addShard(id, 1)
	}
	k.run(20*time.Second, 500*time.Millisecond)
	if !k.c.Converged() {
		t.Fatalf("setup did not converge: %+v", k.c.Stats())
	}
	k.checkFenced()
	k.sent = nil
	return k
}

// TestRecordBeforeAcquire: with the owner record on, no Acquire leaves before the
// record names its receiver, on first grants and on the moves of a scale-up, and the
// record ends up naming every partition's owner.
func TestRecordBeforeAcquire(t *testing.T) {
	k := convergedRecord(t, 32, 0, "a", "b")
	k.addShard("c", 1)
	for range 40 {
		k.run(500*time.Millisecond, 500*time.Millisecond)
		k.checkFenced()
	}
	if !k.c.Converged() {
		t.Fatalf("not converged after join: %+v", k.c.Stats())
	}
	moved := 0
	for _, a := range k.c.Assignments() {
		if k.record[a.Partition] != a.Owner {
			t.Errorf("partition %d: owner %s, record %q", a.Partition, a.Owner, k.record[a.Partition])
		}
		if a.Owner == "c" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("nothing moved to the new shard")
	}
	if st := k.c.Stats(); st.RecordRequests == 0 || st.RecordErrors != 0 {
		t.Fatalf("record requests %d, errors %d", st.RecordRequests, st.RecordErrors)
	}
}

// TestRecordHeldBlocksAcquire: while the record write is out (not yet enforced), the
// new owner is not told to acquire; the Acquire follows the moment it is answered.
func TestRecordHeldBlocksAcquire(t *testing.T) {
	tests := []struct {
		name string
		fail bool
	}{
		{name: "answered"},
		{name: "failed, then retried", fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newCluster(t, recordConfig(8, 0), 1)
			k.holdRecord = true
			k.addShard("a", 1)
			k.run(14*time.Second, 500*time.Millisecond) // past the grace
			if n := len(k.workers()); n != 0 {
				t.Fatalf("%d partitions worked while the record write was out", n)
			}
			if k.recordOut == nil || len(k.recordOut.Owners) != 8 {
				t.Fatalf("want one request for 8 partitions, got %+v", k.recordOut)
			}
			if tt.fail {
				k.recordErr = errors.New("apiserver down")
				k.holdRecord = false
				k.pump()
				if n := len(k.workers()); n != 0 {
					t.Fatalf("%d partitions worked after a failed record write", n)
				}
				if st := k.c.Stats(); st.RecordErrors != 1 || !strings.Contains(st.LastRecordError, "apiserver down") {
					t.Fatalf("stats after failure: %+v", st)
				}
				k.recordErr = nil
				k.pump()
				if k.recordOut != nil {
					t.Fatal("a new request was handed out before RetryInterval")
				}
				k.run(time.Second, 500*time.Millisecond)
			} else {
				k.holdRecord = false
				k.pump()
			}
			if n := len(k.workers()); n != 8 {
				t.Fatalf("%d of 8 partitions worked after the record was enforced", n)
			}
			k.checkFenced()
		})
	}
}

// TestSeize: with the owner record, a shard whose stream stays closed for SeizeAfter
// loses its partitions at once (not after TTL + Margin), and the survivors are told to
// acquire only once the record names them. The seized shard may still be alive
// (partitioned from the coordinator): it keeps working by its own lease, but the
// record no longer names it, so its writes are refused; and when it comes back it
// learns its session ended and stops. A stream that comes back within SeizeAfter
// moves nothing.
func TestSeize(t *testing.T) {
	const seizeAfter = 2 * time.Second
	tests := []struct {
		name       string
		downFor    time.Duration
		wantSeized bool
	}{
		{name: "reconnects in time", downFor: time.Second},
		{name: "stays away", downFor: 6 * time.Second, wantSeized: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := convergedRecord(t, 32, seizeAfter, "a", "b", "c")
			before := map[partition.ID]string{}
			for _, a := range k.c.Assignments() {
				before[a.Partition] = a.Owner
			}
			k.down["c"] = true
			k.c.Disconnected(k.now, "c", k.shards["c"].Session())
			start := k.now
			var allWorked time.Duration
			for k.now.Sub(start) < tt.downFor {
				k.run(250*time.Millisecond, 250*time.Millisecond)
				k.checkFenced()
				if allWorked == 0 && k.acceptedWorkers() == 32 && k.c.Stats().Seizures > 0 {
					allWorked = k.now.Sub(start)
				}
			}
			k.down["c"] = false
			k.shards["c"].Connect(k.now) // the shard's reconnect: a new hello
			k.run(10*time.Second, 250*time.Millisecond)
			k.checkFenced()
			st := k.c.Stats()
			if got := st.Seizures > 0; got != tt.wantSeized {
				t.Fatalf("seized = %v, want %v (stats %+v)", got, tt.wantSeized, st)
			}
			if !tt.wantSeized {
				for _, a := range k.c.Assignments() {
					if before[a.Partition] != a.Owner {
						t.Fatalf("partition %d moved %s → %s on a short disconnect", a.Partition, before[a.Partition], a.Owner)
					}
				}
				return
			}
			// TTL + Margin is 12s; the seizure must beat it by far.
			if allWorked == 0 || allWorked > seizeAfter+time.Second {
				t.Fatalf("every partition worked by its recorded owner only after %v (seize after %v)", allWorked, seizeAfter)
			}
			if !k.c.Converged() {
				t.Fatalf("not converged after c came back: %+v", st)
			}
		})
	}
}

// acceptedWorkers counts the partitions worked by the shard the record names.
func (k *cluster) acceptedWorkers() int {
	n := 0
	for p, w := range k.workers() {
		for _, id := range w {
			if k.record[p] == id && !k.down[id] {
				n++
				break
			}
		}
	}
	return n
}

// TestRecordAdoption: a new leader that finds a record naming somebody else than the
// shard that reports a partition (the previous leader died between its record write and
// its Acquire, or the record was edited) rewrites it for the adopter, and sends no
// Acquire; entries that already match cost no write.
func TestRecordAdoption(t *testing.T) {
	k := convergedRecord(t, 8, 0, "a")
	held := k.shards["a"].Held()
	k2, err := New(recordConfig(8, 0), 2, k.now)
	if err != nil {
		t.Fatal(err)
	}
	known := map[partition.ID]string{}
	for p := range 8 {
		known[partition.ID(p)] = "a"
	}
	known[3] = "x" // stale
	k2.RecordKnown(known)
	k.c = k2
	k.sent = nil
	k.shards["a"].Connect(k.now)
	k.pump()
	if len(held) != 8 || k.c.Stats().Adoptions != 8 {
		t.Fatalf("held %d, adopted %d", len(held), k.c.Stats().Adoptions)
	}
	if k.c.Stats().RecordRequests != 1 || k.record[3] != "a" {
		t.Fatalf("want one record request rewriting p3 for a, got %d requests, record %v", k.c.Stats().RecordRequests, k.record)
	}
	for _, c := range k.sent {
		if c.Kind == CmdAcquire {
			t.Fatalf("adoption sent %+v", c)
		}
	}
}

func TestSeizeAfterNeedsRecord(t *testing.T) {
	cfg := testConfig(8)
	cfg.SeizeAfter = time.Second
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "seize-after") {
		t.Fatalf("want a seize-after error, got %v", err)
	}
}

// TestRecordRegrantToRestartedOwner: when a shard restarts and its partitions are granted
// back to its new process, the record already names the shard, but no Acquire leaves
// until a record write for the new process is enforced. That write is where a leader
// that was deposed while paused learns it (the edge refuses to write once its tenure may
// have lapsed): the write fails, and the restarted shard gets nothing from it.
func TestRecordRegrantToRestartedOwner(t *testing.T) {
	tests := []struct {
		name      string
		recordErr error
		wantWork  int
	}{
		{name: "record confirms the new process", wantWork: 8},
		{name: "record refuses: leadership not certain", recordErr: errors.New("owner record: leadership not certain (Lease not renewed in time); not writing"), wantWork: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := convergedRecord(t, 8, 0, "a")
			requests := k.c.Stats().RecordRequests
			// The process restarts: a new incarnation says hello with nothing held.
			k.addShard("a", 2)
			k.holdRecord = true
			k.recordErr = tt.recordErr
			k.run(40*time.Second, 500*time.Millisecond) // past the old lease's hold
			for _, c := range k.sent {
				if c.Kind == CmdAcquire {
					t.Fatalf("Acquire %+v sent to the restarted shard before a record write for it was enforced", c)
				}
			}
			if k.recordOut == nil || len(k.recordOut.Owners) != 8 {
				t.Fatalf("want a record request re-naming a for its 8 partitions, got %+v (requests before %d, now %d)",
					k.recordOut, requests, k.c.Stats().RecordRequests)
			}
			k.holdRecord = false
			k.pump()
			k.run(2*time.Second, 500*time.Millisecond)
			if n := len(k.workers()); n != tt.wantWork {
				t.Fatalf("%d partitions worked after the record answered %v, want %d", n, tt.recordErr, tt.wantWork)
			}
		})
	}
}

// TestRecordAfterUnconfirmed: an adopted owner the record already names needs no write
// while it works the partition; when its next hello shows it no longer does (its lease
// lapsed, or it holds an older grant), the Acquire must be resent, and with the record on
// that waits for a write enforced for this leader. The write must be asked for: before the
// fix nothing marked the record dirty there, no request was made and the partitions stayed
// unworked (sim seed 1830 of TestSimulationOwnerRecord/chaos at 5,000 seeds).
func TestRecordAfterUnconfirmed(t *testing.T) {
	tests := []struct {
		name  string
		again func(p int) Held // what the second hello reports for p
	}{
		{name: "prepared after the lease lapsed", again: func(p int) Held {
			return Held{Partition: partition.ID(p), Epoch: MakeEpoch(1, uint32(10+p)), State: SlotPrepared}
		}},
		{name: "an older grant acquired", again: func(p int) Held {
			return Held{Partition: partition.ID(p), Epoch: MakeEpoch(1, uint32(1+p)), State: SlotAcquired}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const p = 4
			c, err := New(recordConfig(p, 0), 2, t0)
			if err != nil {
				t.Fatal(err)
			}
			known := map[partition.ID]string{}
			var held, again []Held
			for i := range p {
				known[partition.ID(i)] = "a"
				held = append(held, Held{Partition: partition.ID(i), Epoch: MakeEpoch(1, uint32(10+i)), State: SlotAcquired})
				again = append(again, tt.again(i))
			}
			c.RecordKnown(known)
			r := hello("a", 1)
			r.Held = held
			if err := c.Step(at(1), r); err != nil {
				t.Fatal(err)
			}
			if req, ok := c.TakeRecordRequest(); ok {
				t.Fatalf("adoption the record already names asked for %+v", req)
			}
			c.Outbox()
			r = Report{Kind: ReportHello, Shard: "a", Session: Session{Incarnation: 1, Seq: 2}, Held: again}
			if err := c.Step(at(2), r); err != nil {
				t.Fatal(err)
			}
			req, ok := c.TakeRecordRequest()
			if !ok || len(req.Owners) != p {
				t.Fatalf("TakeRecordRequest() = %+v, %v; want a write naming a for all %d partitions", req, ok, p)
			}
			c.Outbox()
			c.RecordApplied(at(2.1), req.Gen, nil)
			if n := countKind(c.Outbox(), CmdAcquire); n != p {
				t.Fatalf("%d Acquires after the write, want %d", n, p)
			}
		})
	}
}

// TestSeizeWarmsAfterRecording: the partitions of a seized shard are granted to the
// survivors at once, but their Acquire waits until the owner record names them. The
// seized shard may be alive, cut off from the coordinator, and write until then, so the
// survivors are not told to warm meanwhile (caches warmed while it writes may show its
// last writes in one informer and not another): they warm on the Acquire, after the
// record is enforced, which then needs no Refresh. Nothing is worked before the record.
func TestSeizeWarmsAfterRecording(t *testing.T) {
	const seizeAfter = 2 * time.Second
	k := convergedRecord(t, 32, seizeAfter, "a", "b", "c")
	var seized []partition.ID
	for _, a := range k.c.Assignments() {
		if a.Owner == "c" {
			seized = append(seized, a.Partition)
		}
	}
	rejectsBefore := len(k.rejects)
	k.holdRecord = true
	k.down["c"] = true
	k.c.Disconnected(k.now, "c", k.shards["c"].Session())
	k.run(seizeAfter+time.Second, 250*time.Millisecond)
	if k.c.Stats().Seizures != 1 || k.recordOut == nil {
		t.Fatalf("want c seized and its record write out: %+v, request %+v", k.c.Stats(), k.recordOut)
	}
	for _, cmd := range k.sent {
		switch cmd.Kind {
		case CmdPrepare, CmdAcquire:
			t.Fatalf("%v sent before the seized shard's record was enforced", cmd)
		}
	}
	if n := k.acceptedWorkers(); n != 32-len(seized) {
		t.Fatalf("%d partitions worked before the record was enforced, want the %d the survivors had", n, 32-len(seized))
	}
	k.sent = nil
	k.holdRecord = false
	k.pump()
	acquired := map[partition.ID]bool{}
	for _, cmd := range k.sent {
		if cmd.Kind == CmdAcquire {
			if cmd.Refresh {
				t.Fatalf("%v: a partition warmed after its record needs no Refresh", cmd)
			}
			acquired[cmd.Partition] = true
		}
	}
	for _, p := range seized {
		if !acquired[p] {
			t.Fatalf("partition %d of the seized shard: no Acquire once its record was enforced", p)
		}
	}
	if n := k.acceptedWorkers(); n != 32 {
		t.Fatalf("%d of 32 partitions worked after the record was enforced", n)
	}
	if len(k.rejects) != rejectsBefore || len(k.acquiredUnrecorded) != 0 {
		t.Fatalf("rejects %v, Acquires before the record %v", k.rejects[rejectsBefore:], k.acquiredUnrecorded)
	}
	k.checkFenced()
}

// TestFirstGrantWarmsWhileRecording: a first grant's Acquire waits for the owner record
// too, and nobody worked the partition before, so the new owner is told to warm its
// caches meanwhile (Prepare, same epoch as the Acquire to come); its Prepared answers are
// expected, not rejected, and the Acquire that follows needs no Refresh.
func TestFirstGrantWarmsWhileRecording(t *testing.T) {
	k := newCluster(t, recordConfig(16, 0), 1)
	k.holdRecord = true
	k.addShard("a", 1)
	k.run(20*time.Second, 500*time.Millisecond)
	prepared := map[partition.ID]Command{}
	for _, cmd := range k.sent {
		switch cmd.Kind {
		case CmdPrepare:
			prepared[cmd.Partition] = cmd
		case CmdAcquire:
			t.Fatalf("%v sent before the record was enforced", cmd)
		}
	}
	if len(prepared) != 16 {
		t.Fatalf("%d of 16 first grants warmed while the record was written", len(prepared))
	}
	k.sent = nil
	k.holdRecord = false
	k.pump()
	n := 0
	for _, cmd := range k.sent {
		if cmd.Kind != CmdAcquire {
			continue
		}
		n++
		if prepared[cmd.Partition].Epoch != cmd.Epoch || cmd.Refresh {
			t.Fatalf("%v after %v: want the Prepare's epoch and no Refresh", cmd, prepared[cmd.Partition])
		}
	}
	if n != 16 || len(k.rejects) != 0 {
		t.Fatalf("%d Acquires after the record, rejects %v", n, k.rejects)
	}
	k.checkFenced()
}

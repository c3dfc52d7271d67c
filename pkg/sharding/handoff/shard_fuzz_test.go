package handoff_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// FuzzShard drives one Shard (8 partitions) with coordinator commands decoded from the
// input, each validated by package protocol as the shard's gRPC edge does, and with the
// edge's own calls (Connect, Heartbeat, Synced, Drained, Leave) and the passage of time.
// After every operation, at the current time, it checks:
//
//   - Working(now, p) implies CanWork(now), and nothing is Working at Deadline();
//   - after the shard reported Released for p at epoch e it never works p at an epoch ≤ e;
//   - the edge's view built from Actions agrees: a partition is Working only if the last
//     action about it was Work at the epoch it holds (not Stop or Drop since); a Work
//     action is for a partition held acquired at that epoch, a Drop for one no longer
//     held, a Warm for one held at that epoch;
//   - every report is for the current session and one the coordinator's edge accepts
//     unchanged (ReportToWire, wire, ReportFromWire);
//   - the deadline moves back only when a SessionEnded revokes the lease, and never
//     lies further ahead than now + the longest TTL a Welcome gave; Done implies Leaving.
//
// Operations (an opcode byte mod 15, then its fields; see opReader):
//
//	0 connect     (Hello)
//	1 welcome     session, partition count, TTL (250ms), heartbeat interval (100ms), keep...
//	2 ack         session, seq
//	3 prepare     session, partition, epoch   (4 release, 5 acquire, 6 cancel: same)
//	7 ended       session                     (8 farewell: same)
//	9 synced      partition, epoch
//	10 drained    partition
//	11 heartbeat
//	12 wait       time advance in 250ms units, no call
//	13 leave
//	14 raw        length, that many bytes as a CoordinatorMessage
func FuzzShard(f *testing.F) {
	for _, seed := range shardSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		z := newShardFuzz(t)
		r := &opReader{b: data}
		for i := 0; i < maxOps && r.more(); i++ {
			z.op(r)
			z.check()
		}
	})
}

const (
	sopConnect = iota
	sopWelcome
	sopAck
	sopPrepare
	sopRelease
	sopAcquire
	sopCancel
	sopEnded
	sopFarewell
	sopSynced
	sopDrained
	sopHeartbeat
	sopWait
	sopLeave
	sopRaw
	numShardOps
)

const shardPartitions = 8

type shardFuzz struct {
	t   *testing.T
	s   *handoff.Shard
	now time.Time

	released map[partition.ID]handoff.Epoch // highest epoch reported Released
	active   map[partition.ID]handoff.Epoch // the edge's workers: last told Work (at epoch), not Stop/Drop since
	warm     map[partition.ID]handoff.Epoch // last Warm epoch, for Synced
	hbSeq    uint64
	deadline time.Time
	maxTTL   time.Duration
	revoked  bool // a SessionEnded was accepted in this operation

	trace func(format string, args ...any) // -fuzz.trace
}

func (z *shardFuzz) tracef(format string, args ...any) {
	if z.trace != nil {
		z.trace("+%v "+format, append([]any{z.now.Sub(fuzzT0)}, args...)...)
	}
}

func newShardFuzz(t *testing.T) *shardFuzz {
	return &shardFuzz{
		t: t, s: handoff.NewShard(fuzzShard, 5), now: fuzzT0,
		released: map[partition.ID]handoff.Epoch{}, active: map[partition.ID]handoff.Epoch{}, warm: map[partition.ID]handoff.Epoch{},
		trace: tracer(t),
	}
}

const fuzzShard = "shard-0"

func (z *shardFuzz) fatalf(format string, args ...any) {
	z.t.Helper()
	z.t.Fatalf("at +%v: %s", z.now.Sub(fuzzT0), fmt.Sprintf(format, args...))
}

// heldEpoch returns what the shard holds of p.
func (z *shardFuzz) heldEpoch(p uint32) (handoff.Epoch, handoff.SlotState, bool) {
	h, ok := z.held()[partition.ID(p)]
	return h.Epoch, h.State, ok
}

func (z *shardFuzz) held() map[partition.ID]handoff.Held {
	out := map[partition.ID]handoff.Held{}
	for _, h := range z.s.Held() {
		out[h.Partition] = h
	}
	return out
}

// epoch reads an epoch for a command about p: the one p is held at (or released at),
// that plus one, or a raw one.
func (z *shardFuzz) epoch(p uint32, b byte) uint64 {
	if b&0x80 == 0 {
		return rawEpoch(b)
	}
	e, _, ok := z.heldEpoch(p)
	if !ok {
		e = z.released[partition.ID(p)]
	}
	if b&0x40 != 0 {
		e++
	}
	return uint64(e)
}

func (z *shardFuzz) op(r *opReader) {
	z.revoked = false
	cur := z.s.Session()
	op := r.n(numShardOps)
	z.tracef("op %d", op)
	switch op {
	case sopConnect:
		z.s.Connect(z.now)
	case sopWelcome:
		ws := r.session(cur)
		count := uint32(shardPartitions)
		if r.n(8) == 0 {
			count++
		}
		ttl := time.Duration(r.next()) * 250 * time.Millisecond
		hb := time.Duration(r.next()) * 100 * time.Millisecond
		keep := r.held(shardPartitions, z.epoch)
		z.command(&kshardv1.CoordinatorMessage{Session: ws, Kind: &kshardv1.CoordinatorMessage_Welcome{Welcome: &kshardv1.Welcome{
			Ttl: durationpb.New(ttl), HeartbeatInterval: durationpb.New(hb), Keep: keep,
			PartitionCount: count, Hasher: protocol.Hasher, LeaderTerm: 1}}})
	case sopAck:
		ws := r.session(cur)
		seq := z.hbSeq
		if r.n(4) == 0 {
			seq = uint64(r.n(8))
		}
		z.command(&kshardv1.CoordinatorMessage{Session: ws, Kind: &kshardv1.CoordinatorMessage_Ack{Ack: &kshardv1.HeartbeatAck{Seq: seq}}})
	case sopPrepare, sopRelease, sopAcquire, sopCancel:
		ws := r.session(cur)
		p := r.partition(shardPartitions)
		pc := &kshardv1.PartitionCommand{Partition: p, Epoch: z.epoch(p, r.next())}
		m := &kshardv1.CoordinatorMessage{Session: ws}
		switch op {
		case sopPrepare:
			m.Kind = &kshardv1.CoordinatorMessage_Prepare{Prepare: pc}
		case sopRelease:
			m.Kind = &kshardv1.CoordinatorMessage_Release{Release: pc}
		case sopAcquire:
			m.Kind = &kshardv1.CoordinatorMessage_Acquire{Acquire: pc}
		default:
			m.Kind = &kshardv1.CoordinatorMessage_Cancel{Cancel: pc}
		}
		z.command(m)
	case sopEnded:
		z.command(&kshardv1.CoordinatorMessage{Session: r.session(cur), Kind: &kshardv1.CoordinatorMessage_SessionEnded{SessionEnded: &kshardv1.SessionEnded{}}})
	case sopFarewell:
		z.command(&kshardv1.CoordinatorMessage{Session: r.session(cur), Kind: &kshardv1.CoordinatorMessage_Farewell{Farewell: &kshardv1.Farewell{}}})
	case sopSynced:
		p := partition.ID(r.partition(shardPartitions))
		b := r.next()
		e := handoff.Epoch(rawEpoch(b))
		if b&0x80 != 0 {
			e = z.warm[p]
		}
		z.s.Synced(z.now, p, e)
	case sopDrained:
		z.s.Drained(z.now, partition.ID(r.partition(shardPartitions)))
	case sopHeartbeat:
		z.s.Heartbeat(z.now)
	case sopWait:
		z.now = z.now.Add(time.Duration(r.next()) * 250 * time.Millisecond)
	case sopLeave:
		z.s.Leave(z.now)
	case sopRaw:
		m := &kshardv1.CoordinatorMessage{}
		if proto.Unmarshal(r.bytes(64), m) == nil {
			z.command(m)
		}
	}
	z.drain()
}

// command delivers m through the wire and the edge's validation (the edge drops a
// malformed message and reconnects; the Connect operation stands for that).
func (z *shardFuzz) command(m *kshardv1.CoordinatorMessage) {
	m, ok := wire(m, &kshardv1.CoordinatorMessage{})
	if !ok {
		return
	}
	c, err := protocol.CommandFromWire(m, fuzzShard, shardPartitions, protocol.Hasher)
	if err != nil {
		z.tracef("refused: %v", err)
		return
	}
	err = z.s.Step(z.now, c)
	z.tracef("%v: %v", c, err)
	if err == nil {
		switch c.Kind {
		case handoff.CmdWelcome:
			z.maxTTL = max(z.maxTTL, c.TTL)
		case handoff.CmdSessionEnded:
			z.revoked = true
		}
	}
}

// drain takes the shard's reports and actions and checks each.
func (z *shardFuzz) drain() {
	last := map[partition.ID]handoff.Action{}
	for _, a := range z.s.Actions() {
		z.tracef("  action %v p%d@%v", a.Kind, a.Partition, a.Epoch)
		switch a.Kind {
		case handoff.ActionWork:
			z.active[a.Partition] = a.Epoch
		case handoff.ActionStop, handoff.ActionDrop:
			delete(z.active, a.Partition)
		case handoff.ActionWarm:
			z.warm[a.Partition] = a.Epoch
		}
		last[a.Partition] = a
	}
	all := z.held()
	for p, a := range last {
		h, held := all[p]
		e, st := h.Epoch, h.State
		switch a.Kind {
		case handoff.ActionWork:
			if !held || e != a.Epoch || st != handoff.SlotAcquired {
				z.fatalf("%v of p%d@%v, but it holds %v (%v, held %v)", a.Kind, p, a.Epoch, e, st, held)
			}
		case handoff.ActionWarm:
			if !held || e != a.Epoch {
				z.fatalf("%v of p%d@%v, but it holds %v (held %v)", a.Kind, p, a.Epoch, e, held)
			}
		case handoff.ActionDrop:
			if held {
				z.fatalf("%v of p%d@%v, but it still holds it at %v (%v)", a.Kind, p, a.Epoch, e, st)
			}
		}
	}
	for _, r := range z.s.Outbox() {
		z.tracef("  → %v", r)
		if r.Session != z.s.Session() || r.Shard != fuzzShard {
			z.fatalf("%v is not of the current session %v", r, z.s.Session())
		}
		w, err := protocol.ReportToWire(r, protocol.Stats{}, "")
		if err != nil {
			z.fatalf("report %v does not encode: %v", r, err)
		}
		w, _ = wire(w, &kshardv1.ShardMessage{})
		stream := fuzzShard
		if r.Kind == handoff.ReportHello {
			stream = ""
		}
		in, err := protocol.ReportFromWire(w, stream, shardPartitions)
		if err != nil {
			z.fatalf("the coordinator's edge refuses %v: %v", r, err)
		}
		if r.Kind == handoff.ReportHello && r.Held == nil {
			r.Held = []handoff.Held{}
		}
		if !reflect.DeepEqual(in.Report, r) {
			z.fatalf("report %+v arrives as %+v", r, in.Report)
		}
		switch r.Kind {
		case handoff.ReportHeartbeat:
			z.hbSeq = r.Seq
		case handoff.ReportReleased:
			z.released[r.Partition] = max(z.released[r.Partition], r.Epoch)
		}
	}
}

// check asserts the shard's state at the current time.
func (z *shardFuzz) check() {
	now, dl := z.now, z.s.Deadline()
	if dl.Before(z.deadline) && !z.revoked {
		z.fatalf("deadline moved back from +%v to +%v", z.deadline.Sub(fuzzT0), dl.Sub(fuzzT0))
	}
	z.deadline = dl
	if dl.After(now.Add(z.maxTTL)) {
		z.fatalf("deadline +%v is more than the longest TTL %v ahead", dl.Sub(fuzzT0), z.maxTTL)
	}
	if z.s.Done() && !z.s.Leaving() {
		z.fatalf("done without leaving")
	}
	canWork := z.s.CanWork(now)
	all := z.held()
	for p := partition.ID(0); p <= shardPartitions; p++ {
		if z.s.Working(dl, p) {
			z.fatalf("p%d is worked at the deadline", p)
		}
		if !z.s.Working(now, p) {
			continue
		}
		if !canWork {
			z.fatalf("p%d is worked while the lease is not valid", p)
		}
		e, st := all[p].Epoch, all[p].State
		if e <= z.released[p] {
			z.fatalf("p%d is worked at %v (%v) after it was reported released at %v", p, e, st, z.released[p])
		}
		if ae, ok := z.active[p]; !ok || ae != e {
			z.fatalf("p%d is worked at %v but the edge was last told work %v (told %v)", p, e, ae, ok)
		}
	}
	var worked int
	z.s.ForEachWorking(now, func(p partition.ID) {
		worked++
		if !z.s.Working(now, p) {
			z.fatalf("ForEachWorking lists p%d, Working does not", p)
		}
	})
	for p := partition.ID(0); p < shardPartitions; p++ {
		if z.s.Working(now, p) {
			worked--
		}
	}
	if worked != 0 {
		z.fatalf("ForEachWorking and Working disagree")
	}
}

// shardSeeds are programs through the shard's life: welcomed, acquiring, warm
// prepare-then-acquire, a release drained, fenced by its deadline and reconnecting,
// a session ended, and a graceful leave with Farewell.
func shardSeeds() [][]byte {
	const cur = 0 // session selector: the current session
	// keep: partition, epoch byte, state triples
	welcome := func(keep ...byte) []byte {
		return append([]byte{sopWelcome, cur, 1, 40, 30, byte(len(keep) / 3)}, keep...)
	}
	cmd := func(op, p, e byte) []byte { return []byte{op, cur, p, e} }
	ack := []byte{sopAck, cur, 1}
	beat := []byte{sopHeartbeat}
	wait := func(d byte) []byte { return []byte{sopWait, d} }
	synced := func(p byte) []byte { return []byte{sopSynced, p, 0x80} }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	const held, next = 0x80, 0xC0 // epoch selectors: as held, held+1
	start := cat([]byte{sopConnect}, welcome(), cmd(sopAcquire, 0, 0x11), cmd(sopAcquire, 1, 0x11), synced(0), synced(1),
		cmd(sopPrepare, 2, 0x12), synced(2), cmd(sopAcquire, 2, held), wait(8), beat, ack)
	release := cat(start, cmd(sopRelease, 0, next), wait(2), []byte{sopDrained, 0}, cmd(sopAcquire, 0, held), cmd(sopRelease, 1, next),
		cmd(sopRelease, 1, next), cmd(sopAcquire, 1, next), cmd(sopCancel, 2, next))
	fenced := cat(start, cmd(sopRelease, 1, next), wait(60), []byte{sopConnect},
		welcome(0, held, byte(kshardv1.SlotState_SLOT_STATE_PREPARED), 1, held, byte(kshardv1.SlotState_SLOT_STATE_RELEASING)),
		cmd(sopAcquire, 0, held), cmd(sopRelease, 1, held), beat, ack)
	ended := cat(start, cmd(sopRelease, 1, next), []byte{sopEnded, cur, sopConnect}, welcome(), cmd(sopAcquire, 1, 0x31), beat, ack)
	leave := cat(start, []byte{sopLeave}, ack, cmd(sopRelease, 0, next), cmd(sopRelease, 1, next), cmd(sopRelease, 2, next),
		[]byte{sopDrained, 0, sopDrained, 1, sopDrained, 2, sopFarewell, cur})
	return [][]byte{start, release, fenced, ended, leave}
}

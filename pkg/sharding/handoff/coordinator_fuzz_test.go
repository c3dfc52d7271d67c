package handoff_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// FuzzCoordinator drives one Coordinator (16 partitions, term 2) with reports of four
// shards decoded from the input, each validated by package protocol as the gRPC edge
// does, plus ticks and stream closes. After every operation it checks:
//
//   - no new grant while another may work: an Acquire of p to a process (other than a
//     resend at an epoch already committed to it) is sent only when every other process
//     the coordinator committed p to (by an Acquire, or by keeping a reported working
//     claim in a Welcome) has since reported Released, said a Hello that no longer
//     reports p working, or is past its expiry (last Hello/Heartbeat accepted + TTL +
//     Margin);
//   - a Released the coordinator accepts is at least the epoch it committed to that
//     process (else the process could go on working under the newer grant);
//   - epochs never go backwards: per partition the assignment's epoch and the Acquire
//     epochs, and the coordinator's own latest epoch; no epoch of a newer term is sent;
//   - every command is one the shard's edge accepts unchanged (CommandToWire, wire,
//     CommandFromWire), and the first command of a session is its Welcome, keeping
//     only what the Hello reported;
//   - an owner is a member; an owner the coordinator counts as confirmed (Owned) was
//     committed to; moves in flight stay within MaxConcurrentMoves;
//   - a heartbeat carrying a load report is refused only for its session (stale, unknown,
//     fenced out), never for what the report claims;
//   - every move starts with a reason (membership only, with count placement), and the
//     moves counted by reason add up to the moves started; count placement runs no
//     load round.
//
// Every program runs twice: with count placement (fuzzConfig) and with load placement
// and load rounds (fuzzLoadConfig).
//
// Operations (a shard byte mod 4, an opcode byte mod 12, then its fields; see opReader):
//
//	0 hello       id, session, leaving, held...
//	1 heartbeat   session, seq, leaving
//	2 prepared    session, partition, epoch      (3 acquired, 4 released: same)
//	5 reply       answer every command the shard got since its last reply
//	6 tick        time advance in 100ms units
//	7 close       the shard's stream closes
//	8 raw         length, that many bytes as a ShardMessage on the shard's stream
//	9 load        session, seq, a heartbeat with a load report (opReader.loadReport)
//	10 namespaces one in 8 of the wrong length, else P counts of a byte mod 8 each
//	11 pins       one in 4 nil, one in 8 of the wrong length, else P pins each "", "g" or "h"
func FuzzCoordinator(f *testing.F) {
	for _, seed := range coordinatorSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, cfg := range []handoff.Config{fuzzConfig(), fuzzLoadConfig()} {
			z := newCoordFuzz(t, cfg)
			r := &opReader{b: data}
			for i := 0; i < maxOps && r.more(); i++ {
				z.op(r)
				z.check()
			}
		}
	})
}

const (
	opHello = iota
	opHeartbeat
	opPrepared
	opAcquired
	opReleased
	opReply
	opTick
	opClose
	opRaw
	opLoad
	opNamespaces
	opPins
	numCoordOps
)

const fuzzTerm = 2

var fuzzShards = [...]string{"shard-0", "shard-1", "shard-2", "shard-3"}

type coordFuzz struct {
	t   *testing.T
	cfg handoff.Config
	c   *handoff.Coordinator
	now time.Time

	// What the shards' side looks like: the session each last said hello with, whether
	// its stream is open, its heartbeat sequence, the epoch of the last command it got
	// per partition, and the commands it has not answered yet.
	sess      map[string]handoff.Session
	open      map[string]bool
	hbSeq     map[string]uint64
	lastEpoch map[string]map[uint32]uint64
	pending   map[string][]handoff.Command
	lastHello map[string]handoff.Report // per shard, the last hello the coordinator accepted

	// The model: per partition, the processes the coordinator committed it to that may
	// still be working it (with the epoch committed), and per process the time of its
	// last accepted Hello or Heartbeat.
	holders  []map[holder]handoff.Epoch
	lastRecv map[holder]time.Time
	// granted: per partition, the processes it was committed to (at that epoch) and that
	// neither released nor expired since, even if they said they stopped working it: the
	// coordinator's owner and stale holders. Resending an Acquire to one of them at that
	// epoch is not a new grant.
	granted  []map[holder]handoff.Epoch
	welcomed map[string]handoff.Session // per shard, the session its last Welcome was for

	assignEpoch  []handoff.Epoch
	acquireEpoch []handoff.Epoch
	epoch        handoff.Epoch

	trace func(format string, args ...any) // -fuzz.trace
}

func (z *coordFuzz) tracef(format string, args ...any) {
	if z.trace != nil {
		z.trace("+%v "+format, append([]any{z.now.Sub(fuzzT0)}, args...)...)
	}
}

func newCoordFuzz(t *testing.T, cfg handoff.Config) *coordFuzz {
	c, err := handoff.New(cfg, fuzzTerm, fuzzT0)
	if err != nil {
		t.Fatal(err)
	}
	z := &coordFuzz{
		t: t, cfg: c.Config(), c: c, now: fuzzT0,
		sess: map[string]handoff.Session{}, open: map[string]bool{}, hbSeq: map[string]uint64{},
		lastEpoch: map[string]map[uint32]uint64{}, pending: map[string][]handoff.Command{},
		lastHello: map[string]handoff.Report{},
		holders:   make([]map[holder]handoff.Epoch, cfg.PartitionCount),
		granted:   make([]map[holder]handoff.Epoch, cfg.PartitionCount),
		lastRecv:  map[holder]time.Time{}, welcomed: map[string]handoff.Session{},
		assignEpoch: make([]handoff.Epoch, cfg.PartitionCount), acquireEpoch: make([]handoff.Epoch, cfg.PartitionCount),
		trace: tracer(t),
	}
	for _, s := range fuzzShards {
		z.sess[s] = handoff.Session{Incarnation: 1}
		z.lastEpoch[s] = map[uint32]uint64{}
	}
	for p := range z.holders {
		z.holders[p] = map[holder]handoff.Epoch{}
		z.granted[p] = map[holder]handoff.Epoch{}
	}
	return z
}

func (z *coordFuzz) fatalf(format string, args ...any) {
	z.t.Helper()
	z.t.Fatalf("at +%v: %s", z.now.Sub(fuzzT0), fmt.Sprintf(format, args...))
}

// epochFor reads an epoch for a report of s about p: the last one s was sent for p, the
// assignment's, or a raw one.
func (z *coordFuzz) epochFor(s string) func(p uint32, b byte) uint64 {
	return func(p uint32, b byte) uint64 {
		if b&0x80 != 0 {
			if e, ok := z.lastEpoch[s][p]; ok {
				return e
			}
		}
		if b&0x40 != 0 {
			a, _ := z.c.Assignment(partition.ID(p))
			return uint64(a.Epoch)
		}
		return rawEpoch(b)
	}
}

func (z *coordFuzz) op(r *opReader) {
	P := z.cfg.PartitionCount
	s := fuzzShards[r.n(len(fuzzShards))]
	cur := z.sess[s]
	op := r.n(numCoordOps)
	switch op {
	case opHello:
		id := s
		if r.n(8) == 7 {
			id = "Shard_0" // not a DNS-1123 name
		}
		var ws *kshardv1.Session
		switch r.n(8) {
		case 5:
			ws = &kshardv1.Session{Incarnation: cur.Incarnation, Seq: cur.Seq}
		case 6:
			ws = &kshardv1.Session{Incarnation: cur.Incarnation + 1, Seq: 1}
		case 7:
			ws = &kshardv1.Session{Incarnation: uint64(r.n(4)), Seq: uint64(r.n(4))}
		default:
			ws = &kshardv1.Session{Incarnation: cur.Incarnation, Seq: cur.Seq + 1}
		}
		if ws.Incarnation != 0 && ws.Seq != 0 {
			z.sess[s] = handoff.Session{Incarnation: ws.Incarnation, Seq: ws.Seq}
		}
		leaving := r.n(4) == 0
		held := r.held(P, z.epochFor(s))
		z.report(s, &kshardv1.ShardMessage{Session: ws, Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{
			ShardId: id, Leaving: leaving, Held: held, Stats: &kshardv1.ShardStats{}}}})
	case opHeartbeat:
		ws := r.session(cur)
		z.hbSeq[s]++
		seq := z.hbSeq[s]
		if r.n(16) == 0 {
			seq = 0
		}
		z.report(s, &kshardv1.ShardMessage{Session: ws, Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{
			Seq: seq, Leaving: r.n(8) == 0}}})
	case opPrepared, opAcquired, opReleased:
		z.partitionReport(s, op, r)
	case opReply:
		cmds := z.pending[s]
		z.pending[s] = nil
		for _, c := range cmds {
			pr := &kshardv1.PartitionReport{Partition: uint32(c.Partition), Epoch: uint64(c.Epoch)}
			m := &kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: c.Session.Incarnation, Seq: c.Session.Seq}}
			switch c.Kind {
			case handoff.CmdAcquire:
				m.Kind = &kshardv1.ShardMessage_Acquired{Acquired: pr}
			case handoff.CmdPrepare:
				m.Kind = &kshardv1.ShardMessage_Prepared{Prepared: pr}
			case handoff.CmdRelease:
				m.Kind = &kshardv1.ShardMessage_Released{Released: pr}
			default:
				continue
			}
			z.report(s, m)
		}
	case opTick:
		z.now = z.now.Add(time.Duration(r.next()) * 100 * time.Millisecond)
		z.c.Tick(z.now)
		z.tracef("tick")
		z.drain()
	case opClose:
		z.close(s)
	case opRaw:
		m, ok := wireBytes(r.bytes(64))
		if ok {
			z.report(s, m)
		}
	case opLoad:
		ws := r.session(cur)
		z.hbSeq[s]++
		z.report(s, &kshardv1.ShardMessage{Session: ws, Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{
			Seq: z.hbSeq[s], Load: r.loadReport(P)}}})
	case opNamespaces:
		n := P
		if r.n(8) == 0 {
			n = r.n(2*P + 1)
		}
		counts := make([]uint32, n)
		for i := range counts {
			counts[i] = uint32(r.n(8))
		}
		z.c.SetNamespaces(z.now, counts)
		z.tracef("namespaces %v", counts)
		z.drain()
	case opPins:
		var pins []string
		switch r.n(8) {
		case 0, 1:
		case 2:
			pins = make([]string, r.n(2*P+1))
		default:
			pins = make([]string, P)
			for i := range pins {
				pins[i] = [...]string{"", "", "g", "h"}[r.n(4)]
			}
		}
		z.c.SetPins(z.now, pins)
		z.tracef("pins %q", pins)
		z.drain()
	}
}

// partitionReport is ops 2-4: session, partition, epoch.
func (z *coordFuzz) partitionReport(s string, op int, r *opReader) {
	ws := r.session(z.sess[s])
	p := r.partition(z.cfg.PartitionCount)
	pr := &kshardv1.PartitionReport{Partition: p, Epoch: z.epochFor(s)(p, r.next())}
	m := &kshardv1.ShardMessage{Session: ws}
	switch op {
	case opPrepared:
		m.Kind = &kshardv1.ShardMessage_Prepared{Prepared: pr}
	case opAcquired:
		m.Kind = &kshardv1.ShardMessage_Acquired{Acquired: pr}
	default:
		m.Kind = &kshardv1.ShardMessage_Released{Released: pr}
	}
	z.report(s, m)
}

// close is the stream of s closing: the edge tells the coordinator and drops what was
// queued for it.
func (z *coordFuzz) close(s string) {
	if !z.open[s] {
		return
	}
	z.open[s] = false
	z.pending[s] = nil
	z.c.Disconnected(z.now, s, z.sess[s])
	z.tracef("%s closed", s)
	z.drain()
}

// report sends m on the stream of s through the wire and the edge's validation, steps
// the coordinator with it, and updates the model with what the coordinator accepted.
func (z *coordFuzz) report(s string, m *kshardv1.ShardMessage) {
	m, ok := wire(m, &kshardv1.ShardMessage{})
	if !ok {
		return
	}
	stream := ""
	if z.open[s] {
		stream = s
	}
	in, err := protocol.ReportFromWire(m, stream, z.cfg.PartitionCount)
	if err != nil {
		z.tracef("%s: %v", s, err)
		z.close(s) // the edge ends the stream with InvalidArgument
		return
	}
	r := in.Report
	err = z.c.Step(z.now, r)
	z.tracef("%v %v: %v", r, r.Held, err)
	var rej *handoff.Rejection
	if r.Load != nil && errors.As(err, &rej) {
		switch rej.Reason {
		case handoff.ReasonStaleIncarnation, handoff.ReasonStaleSession, handoff.ReasonUnknownShard, handoff.ReasonFencedOut:
		default:
			z.fatalf("a heartbeat with a load report refused: %v", err)
		}
	}
	if err == nil {
		h := holder{r.Shard, r.Session.Incarnation}
		switch r.Kind {
		case handoff.ReportHello:
			z.open[r.Shard] = true
			z.lastRecv[h] = z.now
			z.lastHello[r.Shard] = r
			working := map[partition.ID]bool{}
			for _, x := range r.Held {
				if x.State == handoff.SlotAcquired || x.State == handoff.SlotReleasing {
					working[x.Partition] = true
				}
			}
			for p := range z.holders {
				if !working[partition.ID(p)] {
					delete(z.holders[p], h) // the hello says it does not work p
				}
			}
		case handoff.ReportHeartbeat:
			z.lastRecv[h] = z.now
		case handoff.ReportReleased:
			if e, ok := z.holders[r.Partition][h]; ok && r.Epoch < e {
				z.fatalf("accepted %v, older than the grant at %v it committed to that process", r, e)
			}
			delete(z.holders[r.Partition], h)
			delete(z.granted[r.Partition], h)
		}
	} else if r.Kind == handoff.ReportHello && stream == "" {
		z.close(s) // a refused first hello ends the stream (it was never open)
	}
	z.drain()
}

func (z *coordFuzz) expired(h holder) bool {
	at, ok := z.lastRecv[h]
	return ok && !z.now.Before(at.Add(z.cfg.SessionTTL+z.cfg.Margin))
}

// drain takes the coordinator's outbox and checks every command.
func (z *coordFuzz) drain() {
	for p := range z.holders {
		for h := range z.holders[p] {
			if z.expired(h) {
				delete(z.holders[p], h)
			}
		}
		for h := range z.granted[p] {
			if z.expired(h) {
				delete(z.granted[p], h)
			}
		}
	}
	info := protocol.SessionInfo{PartitionCount: z.cfg.PartitionCount, Hasher: protocol.Hasher, LeaderTerm: fuzzTerm}
	for _, c := range z.c.Outbox() {
		z.tracef("  → %v", c)
		w, err := protocol.CommandToWire(c, info)
		if err != nil {
			z.fatalf("command %v does not encode: %v", c, err)
		}
		w, _ = wire(w, &kshardv1.CoordinatorMessage{})
		got, err := protocol.CommandFromWire(w, c.To, z.cfg.PartitionCount, protocol.Hasher)
		if err != nil {
			z.fatalf("the shard's edge refuses %v: %v", c, err)
		}
		if !reflect.DeepEqual(got, normalized(c)) {
			z.fatalf("command %+v arrives as %+v", c, got)
		}
		if c.Epoch.Term() > fuzzTerm {
			z.fatalf("%v carries an epoch of a newer term", c)
		}
		h := holder{c.To, c.Session.Incarnation}
		switch c.Kind {
		case handoff.CmdWelcome:
			z.welcomed[c.To] = c.Session
			hello := z.lastHello[c.To]
			if hello.Session != c.Session {
				z.fatalf("%v answers no accepted hello (last %v)", c, hello)
			}
			for _, k := range c.Keep {
				if !containsHeld(hello.Held, k) {
					z.fatalf("%v keeps %+v, which the hello did not report", c, k)
				}
				if k.State == handoff.SlotAcquired || k.State == handoff.SlotReleasing {
					// A kept older claim does not undo a newer commitment to the process.
					z.holders[k.Partition][h] = max(z.holders[k.Partition][h], k.Epoch)
					z.granted[k.Partition][h] = max(z.granted[k.Partition][h], k.Epoch)
				}
			}
		case handoff.CmdSessionEnded:
		default:
			if z.welcomed[c.To] != c.Session {
				z.fatalf("%v before the Welcome of its session", c)
			}
		}
		switch c.Kind {
		case handoff.CmdAcquire:
			p := c.Partition
			if c.Epoch < z.acquireEpoch[p] {
				z.fatalf("%v after an Acquire of p%d at %v", c, p, z.acquireEpoch[p])
			}
			z.acquireEpoch[p] = c.Epoch
			if e, ok := z.granted[p][h]; !ok || e < c.Epoch {
				for o, oe := range z.holders[p] {
					if o != h {
						z.fatalf("%v while %s/%d (committed at %v, last heard +%v) may still work p%d",
							c, o.shard, o.inc, oe, z.lastRecv[o].Sub(fuzzT0), p)
					}
				}
			}
			z.holders[p][h] = max(z.holders[p][h], c.Epoch)
			z.granted[p][h] = max(z.granted[p][h], c.Epoch)
			z.lastEpoch[c.To][uint32(p)] = uint64(c.Epoch)
		case handoff.CmdPrepare, handoff.CmdRelease, handoff.CmdCancel:
			z.lastEpoch[c.To][uint32(c.Partition)] = uint64(c.Epoch)
		}
		if z.open[c.To] {
			z.pending[c.To] = append(z.pending[c.To], c)
		}
	}
	for _, e := range z.c.Events() {
		if e.Kind != handoff.EventMoveStarted {
			continue
		}
		if e.Reason == balance.ReasonNone || (z.cfg.Balance.Placement == handoff.PlacementCount && e.Reason != balance.ReasonMembership) {
			z.fatalf("%v of p%d started for reason %q with %s placement", e.Kind, e.Partition, e.Reason, z.cfg.Balance.Placement)
		}
	}
}

// normalized is c as CommandFromWire returns it: a Welcome's Keep is never nil.
func normalized(c handoff.Command) handoff.Command {
	if c.Kind == handoff.CmdWelcome && c.Keep == nil {
		c.Keep = []handoff.Held{}
	}
	return c
}

func containsHeld(in []handoff.Held, k handoff.Held) bool {
	for _, h := range in {
		if h == k {
			return true
		}
	}
	return false
}

// check asserts the coordinator's state after an operation.
func (z *coordFuzz) check() {
	if err := z.c.WaitIndexErr(); err != nil {
		z.fatalf("%v", err)
	}
	members := map[string]handoff.MemberInfo{}
	for _, m := range z.c.Members() {
		members[m.ID] = m
	}
	for _, a := range z.c.Assignments() {
		p := a.Partition
		if a.Epoch < z.assignEpoch[p] {
			z.fatalf("p%d epoch went back from %v to %v", p, z.assignEpoch[p], a.Epoch)
		}
		z.assignEpoch[p] = a.Epoch
		if a.Owner == "" {
			continue
		}
		m, ok := members[a.Owner]
		if !ok {
			z.fatalf("p%d owned by %q, not a member", p, a.Owner)
		}
		if a.State == handoff.StateOwned {
			if _, ok := z.holders[p][holder{a.Owner, m.Session.Incarnation}]; !ok {
				z.fatalf("p%d confirmed owned by %s/%d at %v, never committed to it (or settled): %v",
					p, a.Owner, m.Session.Incarnation, a.Epoch, z.holders[p])
			}
		}
	}
	st := z.c.Stats()
	if st.Epoch < z.epoch {
		z.fatalf("coordinator epoch went back from %v to %v", z.epoch, st.Epoch)
	}
	z.epoch = st.Epoch
	if st.MovesInFlight < 0 || st.MovesInFlight > z.cfg.MaxConcurrentMoves {
		z.fatalf("%d moves in flight (max %d)", st.MovesInFlight, z.cfg.MaxConcurrentMoves)
	}
	var byReason uint64
	for _, n := range st.Balance.Moves {
		byReason += n
	}
	if byReason != st.MovesStarted {
		z.fatalf("moves by reason %v add up to %d, %d started", st.Balance.Moves, byReason, st.MovesStarted)
	}
	if z.cfg.Balance.Placement == handoff.PlacementCount && (len(st.Balance.Rounds) != 0 || len(st.Balance.Domains) != 0) {
		z.fatalf("count placement ran load rounds %v (domains %v)", st.Balance.Rounds, st.Balance.Domains)
	}
}

func wireBytes(b []byte) (*kshardv1.ShardMessage, bool) {
	m := &kshardv1.ShardMessage{}
	return m, proto.Unmarshal(b, m) == nil
}

// coordinatorSeeds are programs that reach the interesting states: every partition
// granted and confirmed, a graceful leave with warm moves, a restart, an expiry, a new
// leader adopting (and resolving a double claim of) what shards report, and a leaving
// shard fenced out for not releasing.
func coordinatorSeeds() [][]byte {
	hello := func(s byte, held ...byte) []byte { // held: partition, epoch byte, state triples
		return append([]byte{s, opHello, 0, 0, 1, byte(len(held) / 3)}, held...)
	}
	restart := func(s byte) []byte { return []byte{s, opHello, 0, 6, 1, 0} }
	heartbeat := func(s byte) []byte { return []byte{s, opHeartbeat, 0, 1, 1} }
	leave := func(s byte) []byte { return []byte{s, opHeartbeat, 0, 1, 0} }
	reply := func(s byte) []byte { return []byte{s, opReply} }
	tick := func(d byte) []byte { return []byte{0, opTick, d} }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	round := func(shards ...byte) []byte { // heartbeats and answers, then 2s pass
		var out []byte
		for _, s := range shards {
			out = append(out, cat(heartbeat(s), reply(s))...)
		}
		return append(out, tick(20)...)
	}
	rounds := func(n int, shards ...byte) []byte {
		var out []byte
		for range n {
			out = append(out, round(shards...)...)
		}
		return out
	}
	all := []byte{0, 1, 2, 3}
	// The grace of a new leader is TTL+Margin = 12s: 7 rounds, then 4 to settle.
	converge := cat(hello(0), hello(1), hello(2), hello(3), rounds(11, all...))
	leaving := cat(converge, leave(3), rounds(10, all...))
	expiry := cat(converge, rounds(10, 0, 1, 2))
	// shard-3 leaves but never answers its Releases: fenced out, then expired.
	var stuck []byte
	for range 10 {
		stuck = append(stuck, round(0, 1, 2)...)
		stuck = append(stuck, heartbeat(3)...)
	}
	fenced := cat(converge, leave(3), stuck)
	acq := byte(kshardv1.SlotState_SLOT_STATE_ACQUIRED)
	rel := byte(kshardv1.SlotState_SLOT_STATE_RELEASING)
	adopt := cat(hello(0, 0, 0x13, acq, 1, 0x13, acq, 2, 0x12, rel), hello(1, 0, 0x15, acq, 3, 0x11, acq),
		rounds(10, 0, 1))
	// Load: namespace counts, then every shard reports partitions 0..6 each round (p0
	// hot, the others at 5 req/s; what a shard does not hold is not_held), past the
	// warmup, through load rounds and a leave (256 operations).
	namespaces := []byte{0, opNamespaces, 1}
	for p := range 16 {
		namespaces = append(namespaces, byte(p%3+1))
	}
	loadReport := func(s byte) []byte {
		out := []byte{s, opLoad, 0, 7, 0}
		for p := range 7 {
			l := byte(5)
			if p == 0 {
				l = 150
			}
			out = append(out, byte(p), l, 20, 60)
		}
		return append(out, 1) // sorted
	}
	loaded := func(n int, shards ...byte) []byte {
		var out []byte
		for range n {
			for _, s := range shards {
				out = append(out, loadReport(s)...)
			}
			out = append(out, rounds(3, shards...)...)
		}
		return out
	}
	balanced := cat(namespaces, converge, loaded(3, all...), leave(2), loaded(1, all...))
	return [][]byte{
		converge,
		balanced,
		leaving,
		cat(converge, restart(1), rounds(10, all...)),
		expiry,
		adopt,
		fenced,
	}
}

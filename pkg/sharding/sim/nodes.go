package sim

import (
	"fmt"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// coordNode is one coordinator process (one leadership term).
type coordNode struct {
	gen   int
	c     *handoff.Coordinator
	clk   clock
	alive bool
	ring  *handoff.RingRequest // being computed by the edge (ring.go)
	rec   *handoff.RecordRequest
	term  uint32
}

// shardNode is one shard pod: its ID survives restarts, its process (and
// handoff.Shard state) does not.
type shardNode struct {
	idx   int
	id    string
	clk   clock
	alive bool
	gone  bool // will never come back (left or removed)
	inc   uint64
	sh    *handoff.Shard
	rt    *runtimeModel // the process's runtime (gate and in-flight work)
	meter *meterModel   // the process's load meter (runs with loads only)

	pausedUntil time.Duration
	cutUntil    time.Duration
	leaderGen   int // the coordinator generation it talks to; -1 none known
	leaveStart  time.Duration
	exitedClean bool
}

func (s *shardNode) paused(now time.Duration) bool { return now < s.pausedUntil }
func (s *shardNode) cut(now time.Duration) bool    { return now < s.cutUntil }

func (w *world) newClock() clock {
	rate := 1 + (w.rng.Float64()*2-1)*drift
	switch w.rng.IntN(4) { // often sit right at the bound
	case 0:
		rate = 1 - drift
	case 1:
		rate = 1 + drift
	}
	return clock{offset: w.dur(0, time.Hour), rate: rate}
}

// delay draws one message's network delay; ok false means it is lost.
func (w *world) delay() (time.Duration, bool) {
	d := w.dur(time.Millisecond/2, maxBaseDelay)
	if !w.faulty {
		return d, true
	}
	if w.chance(0.02) {
		return 0, false
	}
	if w.chance(0.05) {
		d += w.dur(0, maxLongDelay)
	}
	return d, true
}

// sendToCoord carries a report from shard s to coordinator generation gen.
func (w *world) sendToCoord(s *shardNode, gen int, r handoff.Report) {
	if gen < 0 || s.cut(w.now) {
		return
	}
	copies := 1
	if w.faulty && w.chance(0.01) {
		copies = 2
	}
	for range copies {
		if d, ok := w.delay(); ok {
			w.after(d, &event{kind: evToCoord, gen: gen, rep: r, shard: s.idx})
		}
	}
}

// sendToShard carries a command to the pod with the command's shard ID.
func (w *world) sendToShard(cmd handoff.Command) {
	s := w.byID(cmd.To)
	if s == nil || s.cut(w.now) {
		return
	}
	copies := 1
	if w.faulty && w.chance(0.01) {
		copies = 2
	}
	for range copies {
		if d, ok := w.delay(); ok {
			w.after(d, &event{kind: evToShard, shard: s.idx, cmd: cmd})
		}
	}
}

func (w *world) byID(id string) *shardNode {
	for _, s := range w.shards {
		if s.id == id {
			return s
		}
	}
	return nil
}

// flushCoord sends everything the leader produced.
func (w *world) flushCoord(n *coordNode) {
	for _, cmd := range n.c.Outbox() {
		w.tracef("C%d → %s", n.gen, cmd)
		w.sendToShard(cmd)
	}
	for _, ev := range n.c.Events() {
		if ev.Kind == handoff.EventMoveStarted {
			w.res.Moves++
			if err := w.recordMove(ev); err != nil && w.found == nil {
				w.found = err.(*Violation)
			}
		}
		if w.opts.Trace != nil {
			w.tracef("C%d event %s p%d %s←%s gap=%v handoff=%v reason=%s", n.gen, ev.Kind, ev.Partition, ev.Shard, ev.From, ev.Gap, ev.Handoff, ev.Reason)
		}
	}
	w.startRing(n)
	w.startRecord(n)
}

// flushShard sends the shard's reports and carries out its actions.
func (w *world) flushShard(s *shardNode) {
	if !s.alive {
		return
	}
	// Like shardrpc's client: carry out the actions, then send the reports.
	for _, a := range s.sh.Actions() {
		if a.Kind == handoff.ActionWarm {
			w.after(w.dur(0, maxSync), &event{kind: evSynced, shard: s.idx, inc: s.inc, p: a.Partition, epoch: a.Epoch})
		}
		w.runtimeAct(s, a)
	}
	for _, r := range s.sh.Outbox() {
		if r.Kind == handoff.ReportHeartbeat && s.meter != nil {
			// Like shardrpc's client: every heartbeat carries a load report (the
			// report interval is the heartbeat interval).
			r.Load = w.loadReport(s)
		}
		w.tracef("%s → C%d %s", s.id, s.leaderGen, r)
		if v := w.checkReleased(s, r); v != nil && w.found == nil {
			w.found = v
		}
		w.sendToCoord(s, s.leaderGen, r)
	}
	s.rt.syncHeld(s.sh)
	if s.sh.Done() {
		w.tracef("%s exits after farewell", s.id)
		s.exitedClean = true
		w.stop(s, true)
		return
	}
	if s.sh.NeedsHello() {
		w.connect(s)
	}
}

// connect opens a new session with the leader the shard knows.
func (w *world) connect(s *shardNode) {
	s.sh.Connect(s.clk.at(w.now))
	sess := s.sh.Session()
	w.after(s.clk.real(helloTimeout), &event{kind: evHelloTimeout, shard: s.idx, inc: s.inc, sess: sess})
	w.flushShard(s)
}

// start boots a new process for pod s.
func (w *world) start(s *shardNode) {
	s.alive = true
	s.inc++
	s.sh = handoff.NewShard(s.id, s.inc)
	s.rt = newRuntimeModel(w.p)
	if w.load != nil {
		s.meter = newMeterModel()
	}
	s.pausedUntil, s.cutUntil = 0, 0
	s.leaderGen = -1
	if w.leader != nil && !w.electing {
		s.leaderGen = w.leader.gen
	}
	w.tracef("%s starts incarnation %d", s.id, s.inc)
	w.after(s.clk.real(hbInterval), &event{kind: evHeartbeat, shard: s.idx, inc: s.inc})
	w.connect(s)
}

// stop ends the process of pod s (crash, or exit after farewell).
func (w *world) stop(s *shardNode, clean bool) {
	if !s.alive {
		return
	}
	sess := s.sh.Session()
	s.alive = false
	s.sh = nil
	if w.leader != nil && s.leaderGen == w.leader.gen && (clean || w.chance(0.7)) {
		w.after(w.dur(0, time.Second), &event{kind: evDisconnected, gen: s.leaderGen, name: s.id, sess: sess})
	}
}

// deliverToShard handles every event addressed to a shard process.
func (w *world) deliverToShard(ev *event) {
	s := w.shards[ev.shard]
	if !s.alive || (ev.kind != evToShard && ev.inc != s.inc) {
		return
	}
	if s.paused(w.now) {
		// A paused process does nothing; what arrived waits in its buffers.
		w.schedule(s.pausedUntil, ev)
		return
	}
	now := s.clk.at(w.now)
	switch ev.kind {
	case evToShard:
		err := s.sh.Step(now, ev.cmd)
		if err != nil {
			w.res.Rejections++
		}
		w.tracef("%s ← %s err=%v", s.id, ev.cmd, err)
	case evHeartbeat:
		s.sh.Heartbeat(now)
		iv := s.sh.HeartbeatInterval()
		if iv == 0 {
			iv = hbInterval
		}
		w.after(s.clk.real(iv), &event{kind: evHeartbeat, shard: s.idx, inc: s.inc})
	case evHelloTimeout:
		if s.sh.Session() == ev.sess && !s.sh.Welcomed() {
			w.tracef("%s hello %s timed out", s.id, ev.sess)
			if w.leader != nil && !w.electing {
				s.leaderGen = w.leader.gen // look the leader up again
			}
			w.connect(s)
			return
		}
	case evSynced:
		s.sh.Synced(now, ev.p, ev.epoch)
	case evDrained:
		if until := s.rt.busyUntil[ev.p]; until > w.now {
			// The gate's Release waits for all in-flight work, also work a Stop
			// cancelled after this drain began.
			w.schedule(until, ev)
			return
		}
		w.runtimeDrained(s, ev.p)
		s.sh.Drained(now, ev.p)
	case evDiscover:
		if ev.gen > s.leaderGen {
			s.leaderGen = ev.gen
			w.tracef("%s discovers leader C%d", s.id, ev.gen)
			w.connect(s)
			return
		}
	case evReconnect:
		w.tracef("%s reconnects", s.id)
		w.connect(s)
		return
	case evLeaveDeadline:
		w.tracef("%s leave deadline: exits without farewell", s.id)
		s.gone = true
		w.stop(s, false)
		return
	}
	w.flushShard(s)
}

// deliverToCoord handles events addressed to the leader.
func (w *world) deliverToCoord(ev *event) {
	n := w.leader
	if n == nil || n.gen != ev.gen {
		return
	}
	now := n.clk.at(w.now)
	switch ev.kind {
	case evToCoord:
		err := n.c.Step(now, ev.rep)
		if err != nil {
			w.res.Rejections++
		}
		w.tracef("C%d ← %s err=%v", n.gen, ev.rep, err)
	case evCoordTick:
		n.c.Tick(now)
		w.after(tickInterval, &event{kind: evCoordTick, gen: n.gen})
	case evDisconnected:
		n.c.Disconnected(now, ev.name, ev.sess)
		w.tracef("C%d: %s session %s disconnected", n.gen, ev.name, ev.sess)
	case evRingComputed:
		w.finishRing(n, now)
	case evRecordApplied:
		w.finishRecord(n, now)
	}
	w.flushCoord(n)
}

// elect makes a new coordinator leader with the next term. It knows
// nothing but its term; shards find it and say hello.
func (w *world) elect() {
	w.gen++
	w.term++
	clk := w.newClock()
	c, err := handoff.New(w.cfg, w.term, clk.at(w.now))
	if err != nil {
		panic(fmt.Sprintf("sim config: %v", err))
	}
	c.OffloadRing()
	if w.opts.OwnerRecord {
		// The edge claims the record for its term before reading it.
		w.recordTerm = w.term
		known := map[partition.ID]string{}
		for p, s := range w.record {
			if s != "" {
				known[partition.ID(p)] = s
			}
		}
		c.RecordKnown(known)
	}
	w.leader = &coordNode{gen: w.gen, c: c, clk: clk, alive: true, term: w.term}
	w.leaderLoads(w.leader)
	w.electing = false
	w.tracef("C%d elected (term %d)", w.gen, w.term)
	w.after(tickInterval, &event{kind: evCoordTick, gen: w.gen})
	for _, s := range w.shards {
		if s.alive {
			w.after(w.dur(0, w.discovery), &event{kind: evDiscover, shard: s.idx, inc: s.inc, gen: w.gen})
		}
	}
	w.settle(w.now + w.discovery)
}

// depose kills the leader; a new one is elected after a delay. The old
// one's messages in flight are still delivered.
func (w *world) depose(electIn time.Duration) {
	if w.leader == nil {
		return
	}
	w.tracef("C%d deposed", w.leader.gen)
	w.leader.alive = false
	w.leader = nil
	w.electing = true
	w.res.LeaderChanges++
	w.after(electIn, &event{kind: evElect})
	w.settle(w.now + electIn + w.discovery)
}

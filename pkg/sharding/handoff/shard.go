package handoff

import (
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// ActionKind is something the shard's edge must do to its caches or
// workers.
type ActionKind uint8

const (
	// ActionWarm: start caching Partition; call Synced when synced.
	ActionWarm ActionKind = iota + 1
	// ActionWork: start working Partition (once its caches are synced).
	ActionWork
	// ActionDrain: stop taking keys of Partition and wait for its
	// in-flight work; then call Drained.
	ActionDrain
	// ActionStop: stop working Partition now, keep its caches (fenced or
	// demoted): start nothing more, cancel what runs and refuse its writes.
	// Its in-flight work may take a moment to end; a later ActionDrain of
	// the partition reports (Drained) once it has.
	ActionStop
	// ActionDrop: drop Partition's caches.
	ActionDrop
)

var actionKindNames = [...]string{"", "warm", "work", "drain", "stop", "drop"}

func (k ActionKind) String() string {
	if int(k) < len(actionKindNames) && k != 0 {
		return actionKindNames[k]
	}
	return "ActionKind(?)"
}

// Action is one instruction for the shard's cache layer and work queue.
type Action struct {
	Kind      ActionKind
	Partition partition.ID
	Epoch     Epoch
	// Refresh (ActionWork): list the partition again before working it, because
	// its caches were warmed while another shard still wrote to it (Command.Refresh).
	Refresh bool
}

// Shard is the shard-side pure state machine: its session, its lease and
// its partition table. Like the Coordinator it does no I/O and reads no
// clock; the edge feeds it (with a monotonic now) and drains Outbox (to the
// coordinator) and Actions (to the cache layer and work queue).
//
// The shard works partition p at now exactly when Working(now, p): it is
// acquired (or releasing and still draining) and the lease is valid. The
// edge must stop every worker at Deadline() even if nothing calls in.
type Shard struct {
	id  string
	inc uint64
	seq uint64

	session  Session
	welcomed bool
	helloAt  time.Time
	hbSeq    uint64
	sent     []sentHeartbeat // outstanding, ascending seq

	lease      Lease
	hbInterval time.Duration

	leaving, done, needsHello bool

	slots map[partition.ID]*slot
	tombs map[partition.ID]Epoch // highest epoch released or dropped

	now     time.Time
	outbox  []Report
	actions []Action
}

type sentHeartbeat struct {
	seq uint64
	at  time.Time
}

type slot struct {
	epoch        Epoch
	state        SlotState // Warming/Prepared (by synced), Acquired or Releasing
	synced       bool
	releaseEpoch Epoch
	// stopped: the slot was worked and then stopped (fenced or demoted) rather than
	// drained. Stopping cancels without waiting, so until a drain has seen its work end,
	// a release of it must not be answered at once.
	stopped bool
}

// NewShard returns the state of a freshly started shard process. The
// incarnation must grow across restarts of the same id (process start time
// in Unix nanoseconds).
func NewShard(id string, incarnation uint64) *Shard {
	return &Shard{
		id:    id,
		inc:   incarnation,
		slots: map[partition.ID]*slot{},
		tombs: map[partition.ID]Epoch{},
	}
}

// ID returns the shard ID.
func (s *Shard) ID() string { return s.id }

// Session returns the current session (zero before the first Connect).
func (s *Shard) Session() Session { return s.session }

// Welcomed reports whether the current session was welcomed.
func (s *Shard) Welcomed() bool { return s.welcomed }

// NeedsHello reports that the shard must open a new session (Connect): it
// fenced itself, was told its session ended, or never connected.
func (s *Shard) NeedsHello() bool { return s.needsHello || s.session == Session{} }

// Leaving reports whether Leave was called.
func (s *Shard) Leaving() bool { return s.leaving }

// Done reports that the coordinator said Farewell to a leaving shard: it
// holds nothing and may exit.
func (s *Shard) Done() bool { return s.done }

// HeartbeatInterval is the interval the coordinator asked for (zero before
// the first Welcome).
func (s *Shard) HeartbeatInterval() time.Duration { return s.hbInterval }

// CanWork reports whether the lease is valid at now.
func (s *Shard) CanWork(now time.Time) bool { return s.lease.CanWork(now) }

// Deadline is when the right to work ends.
func (s *Shard) Deadline() time.Time { return s.lease.Deadline() }

// Working reports whether p is worked at now. It reads only the clock and
// the table, so it is right even if the edge has not called in since the
// deadline passed.
func (s *Shard) Working(now time.Time, p partition.ID) bool {
	sl := s.slots[p]
	return sl != nil && s.working(now, sl)
}

func (s *Shard) working(now time.Time, sl *slot) bool {
	if !s.lease.CanWork(now) {
		return false
	}
	return sl.state == SlotAcquired || (sl.state == SlotReleasing && !sl.stopped)
}

// ForEachWorking calls fn for every partition worked at now, in no
// particular order.
func (s *Shard) ForEachWorking(now time.Time, fn func(partition.ID)) {
	if !s.lease.CanWork(now) {
		return
	}
	for p, sl := range s.slots {
		if s.working(now, sl) {
			fn(p)
		}
	}
}

// Held returns what the shard holds, sorted by partition.
func (s *Shard) Held() []Held {
	out := make([]Held, 0, len(s.slots))
	for _, p := range s.sortedSlots() {
		out = append(out, s.held(p))
	}
	return out
}

func (s *Shard) held(p partition.ID) Held {
	sl := s.slots[p]
	h := Held{Partition: p, Epoch: sl.epoch, State: sl.state}
	if sl.state == SlotWarming && sl.synced {
		h.State = SlotPrepared
	}
	return h
}

func (s *Shard) sortedSlots() []partition.ID {
	ids := make([]partition.ID, 0, len(s.slots))
	for p := range s.slots {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	return ids
}

// Outbox returns and clears the reports to send on the current session.
func (s *Shard) Outbox() []Report {
	out := s.outbox
	s.outbox = nil
	return out
}

// Actions returns and clears the instructions for caches and workers.
func (s *Shard) Actions() []Action {
	out := s.actions
	s.actions = nil
	return out
}

// advance applies the passage of time: past the deadline every worker
// stops, acquired partitions are demoted to prepared (they may have been
// granted elsewhere meanwhile) and a new hello must tell the coordinator.
// Every input calls it first, so a shard resuming from a long pause checks
// its deadline before it does anything else.
func (s *Shard) advance(now time.Time) time.Time {
	if now.After(s.now) {
		s.now = now
	}
	now = s.now
	if s.lease.CanWork(now) {
		return now
	}
	for _, p := range s.sortedSlots() {
		sl := s.slots[p]
		switch {
		case sl.state == SlotAcquired:
			sl.state = SlotWarming
			sl.stopped = true
			s.needsHello = true
			s.act(ActionStop, p, sl.epoch)
		case sl.state == SlotReleasing && !sl.stopped:
			sl.stopped = true
			s.act(ActionStop, p, sl.epoch)
		}
	}
	return now
}

func (s *Shard) act(k ActionKind, p partition.ID, e Epoch) {
	s.actions = append(s.actions, Action{Kind: k, Partition: p, Epoch: e})
}

func (s *Shard) report(k ReportKind, p partition.ID, e Epoch) {
	s.outbox = append(s.outbox, Report{Kind: k, Shard: s.id, Session: s.session, Partition: p, Epoch: e})
}

// Connect opens a new session: from now on only commands of that session
// are accepted, and the Hello reports everything held. Acquired partitions
// are reported as such only while the lease is valid.
func (s *Shard) Connect(now time.Time) {
	now = s.advance(now)
	s.seq++
	s.session = Session{Incarnation: s.inc, Seq: s.seq}
	s.welcomed = false
	s.needsHello = false
	s.helloAt = now
	s.hbSeq = 0
	s.sent = s.sent[:0]
	s.outbox = append(s.outbox, Report{Kind: ReportHello, Shard: s.id, Session: s.session, Leaving: s.leaving, Held: s.Held()})
}

// Heartbeat queues a heartbeat if the session is welcomed; the edge calls
// it every HeartbeatInterval. It reports whether one was queued.
func (s *Shard) Heartbeat(now time.Time) bool {
	now = s.advance(now)
	if !s.welcomed || s.needsHello {
		return false
	}
	s.hbSeq++
	// Older outstanding heartbeats whose extension is already past cannot
	// matter any more.
	s.sent = slices.DeleteFunc(s.sent, func(h sentHeartbeat) bool { return !h.at.Add(s.lease.TTL()).After(now) })
	s.sent = append(s.sent, sentHeartbeat{seq: s.hbSeq, at: now})
	s.outbox = append(s.outbox, Report{Kind: ReportHeartbeat, Shard: s.id, Session: s.session, Seq: s.hbSeq, Leaving: s.leaving})
	return true
}

// Leave starts a graceful exit: the coordinator moves every partition away
// and then says Farewell (Done). The edge should still exit at its grace
// period's end regardless.
func (s *Shard) Leave(now time.Time) {
	if s.leaving {
		return
	}
	s.leaving = true
	s.Heartbeat(now)
}

// Synced tells the shard that the caches of p finished syncing for epoch e.
func (s *Shard) Synced(now time.Time, p partition.ID, e Epoch) {
	s.advance(now)
	sl := s.slots[p]
	if sl == nil || sl.epoch != e || sl.synced {
		return
	}
	sl.synced = true
	if sl.state == SlotWarming {
		s.report(ReportPrepared, p, e)
	}
}

// Drained tells the shard that p's in-flight work finished after a Release.
func (s *Shard) Drained(now time.Time, p partition.ID) {
	s.advance(now)
	sl := s.slots[p]
	if sl == nil || sl.state != SlotReleasing {
		return
	}
	delete(s.slots, p)
	s.tombs[p] = max(s.tombs[p], sl.releaseEpoch)
	s.act(ActionDrop, p, sl.releaseEpoch)
	s.report(ReportReleased, p, sl.releaseEpoch)
}

// Step applies one command. A non-nil error is a *Rejection to count.
func (s *Shard) Step(now time.Time, c Command) error {
	now = s.advance(now)
	if c.To != s.id {
		return reject(ReasonMalformed, c.To, "command for %q at shard %q", c.To, s.id)
	}
	if c.Session != s.session {
		return reject(ReasonStaleSession, s.id, "%s for session %s, current %s", c.Kind, c.Session, s.session)
	}
	if !s.welcomed && c.Kind != CmdWelcome {
		return reject(ReasonNotWelcomed, s.id, "%s before welcome", c.Kind)
	}
	var err *Rejection
	switch c.Kind {
	case CmdWelcome:
		s.welcome(c)
	case CmdAck:
		s.ack(c.Seq)
	case CmdPrepare:
		err = s.prepare(c.Partition, c.Epoch)
	case CmdRelease:
		err = s.release(c.Partition, c.Epoch)
	case CmdAcquire:
		err = s.acquire(c.Partition, c.Epoch, c.Refresh)
	case CmdCancel:
		if sl := s.slots[c.Partition]; sl != nil && sl.state == SlotWarming && sl.epoch <= c.Epoch {
			s.drop(c.Partition, c.Epoch)
		}
	case CmdSessionEnded:
		s.lease.Revoke()
		s.advance(now)
		s.welcomed = false
		s.needsHello = true
	case CmdFarewell:
		if s.leaving {
			s.done = true
		}
	default:
		err = reject(ReasonMalformed, s.id, "unknown command kind %d", c.Kind)
	}
	if err != nil {
		err.Partition, err.Epoch = c.Partition, c.Epoch
		return err
	}
	return nil
}

// welcome keeps what the coordinator kept, drops the rest, and only then
// extends the lease (to the hello's send time + TTL): a partition granted
// elsewhere meanwhile is gone before this shard may work again.
func (s *Shard) welcome(c Command) {
	if s.welcomed {
		return
	}
	keep := make(map[partition.ID]Epoch, len(c.Keep))
	for _, h := range c.Keep {
		keep[h.Partition] = h.Epoch
	}
	for _, p := range s.sortedSlots() {
		if e, ok := keep[p]; !ok || e != s.slots[p].epoch {
			s.drop(p, s.slots[p].epoch)
		}
	}
	s.welcomed = true
	s.hbInterval = c.HeartbeatInterval
	s.lease.SetTTL(c.TTL)
	s.lease.Extend(s.helloAt)
}

func (s *Shard) drop(p partition.ID, e Epoch) {
	sl := s.slots[p]
	if sl.state == SlotAcquired || (sl.state == SlotReleasing && !sl.stopped) {
		s.act(ActionStop, p, sl.epoch)
	}
	delete(s.slots, p)
	s.tombs[p] = max(s.tombs[p], e, sl.epoch, sl.releaseEpoch)
	s.act(ActionDrop, p, e)
}

func (s *Shard) ack(seq uint64) {
	for i, h := range s.sent {
		if h.seq == seq {
			s.lease.Extend(h.at)
			s.sent = s.sent[i+1:]
			return
		}
	}
}

func (s *Shard) prepare(p partition.ID, e Epoch) *Rejection {
	sl := s.slots[p]
	if sl == nil {
		if e <= s.tombs[p] {
			return reject(ReasonStaleEpoch, s.id, "prepare")
		}
		s.slots[p] = &slot{epoch: e, state: SlotWarming}
		s.act(ActionWarm, p, e)
		return nil
	}
	if e <= sl.epoch || sl.state == SlotReleasing {
		return reject(ReasonStaleEpoch, s.id, "prepare")
	}
	if sl.state == SlotAcquired {
		// The coordinator does not count this shard as the owner; stop.
		s.act(ActionStop, p, sl.epoch)
		sl.state = SlotWarming
		sl.stopped = true
	}
	sl.epoch = e
	if sl.synced {
		s.report(ReportPrepared, p, e)
	}
	return nil
}

func (s *Shard) release(p partition.ID, e Epoch) *Rejection {
	sl := s.slots[p]
	if sl == nil {
		if e < s.tombs[p] {
			return reject(ReasonStaleEpoch, s.id, "release")
		}
		s.tombs[p] = e
		s.report(ReportReleased, p, e) // idempotent answer to a retry
		return nil
	}
	if e < sl.epoch {
		return reject(ReasonStaleEpoch, s.id, "release")
	}
	switch sl.state {
	case SlotAcquired:
		sl.state = SlotReleasing
		sl.releaseEpoch = e
		s.act(ActionDrain, p, e)
	case SlotReleasing:
		sl.releaseEpoch = max(sl.releaseEpoch, e)
		if sl.stopped {
			// Fenced while draining: its work was stopped, but stopping cancels rather
			// than waits, so some of it may still run. Released goes out only from
			// Drained, once the edge has seen that work end; ask again in case the
			// first drain was lost with a dropped cache.
			s.act(ActionDrain, p, sl.releaseEpoch)
		}
	default:
		if sl.stopped {
			// Worked once and stopped (demoted): stopping cancels rather than waits, so
			// its work may still run. Released goes out from Drained, once it has ended.
			sl.state = SlotReleasing
			sl.releaseEpoch = e
			s.act(ActionDrain, p, e)
			return nil
		}
		s.drop(p, e)
		s.report(ReportReleased, p, e)
	}
	return nil
}

func (s *Shard) acquire(p partition.ID, e Epoch, refresh bool) *Rejection {
	sl := s.slots[p]
	if sl == nil {
		if e <= s.tombs[p] {
			return reject(ReasonStaleEpoch, s.id, "acquire")
		}
		s.slots[p] = &slot{epoch: e, state: SlotAcquired}
		s.act(ActionWarm, p, e)
		s.act(ActionWork, p, e)
		s.report(ReportAcquired, p, e)
		return nil
	}
	switch {
	case e < sl.epoch:
		return reject(ReasonStaleEpoch, s.id, "acquire")
	case sl.state == SlotReleasing:
		if e <= sl.releaseEpoch {
			return reject(ReasonStaleEpoch, s.id, "acquire")
		}
		// Handed back at a newer epoch before the drain finished.
		sl.stopped = false
	case sl.state == SlotAcquired && e == sl.epoch:
		s.report(ReportAcquired, p, e) // duplicate: confirm again
		return nil
	}
	// Only caches this shard warmed for someone else's partition can be behind that
	// shard's last writes; a partition it was releasing itself was nobody else's.
	refresh = refresh && sl.state == SlotWarming
	sl.state = SlotAcquired
	sl.epoch = e
	sl.stopped = false
	s.actions = append(s.actions, Action{Kind: ActionWork, Partition: p, Epoch: e, Refresh: refresh})
	s.report(ReportAcquired, p, e)
	return nil
}

package handoff

import (
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// Coordinator is the leader's pure state machine: it tracks shard sessions,
// computes the target assignment and drives every handoff. It does no I/O
// and reads no clock: every input carries now, outputs are drained with
// Outbox and Events. It is not safe for concurrent use; the edge serialises
// calls (one goroutine or a mutex) and sends what Outbox returns after each.
//
// A new leader builds a fresh Coordinator from nothing but a higher term:
// everything else it learns from the shards' hellos.
type Coordinator struct {
	cfg  Config
	ring *ring.Ring

	term    uint32
	counter uint32

	startedAt  time.Time
	graceUntil time.Time
	now        time.Time

	members map[string]*member
	ids     []string // sorted keys of members: deterministic iteration
	tombs   map[string]tomb
	parts   []part

	// At or before the earliest expiry of any member and of any tomb (zero: not
	// known), so that expire, which runs on every message, looks at each member
	// only when one may have expired. Both stay lower bounds without upkeep: a
	// member's expiry only moves later, and a member or tomb added later expires
	// later than every one there was when the bound was taken.
	expiryFloor time.Time
	tombFloor   time.Time

	// Membership debounce: desired is the member set as of the last step,
	// applied the one the target was computed from.
	desired    []string
	applied    []string
	target     []string // per partition; nil until first computed
	dirty      bool
	dirtySince time.Time
	lastChange time.Time

	// The target wanted next (nil if none), the last generation issued,
	// whether the edge took ringReq, the generation the edge is computing
	// (0 if none), and whether the edge computes the ring at all
	// (OffloadRing) or the coordinator does it inline.
	ringReq     *RingRequest
	ringGen     uint64
	ringTaken   bool
	ringOut     uint64
	offloadRing bool

	movesInFlight int

	// The owner record (Config.OwnerRecord): the request out (nil if none), whether a
	// scan for the next one is due, the last generation issued, when a failed write may be retried, and whether a
	// seizure wants the next target without debounce.
	recOut     *RecordRequest
	recDirty   bool // an owner or the record changed since the last scan for a request
	recGen     uint64
	recRetryAt time.Time
	urgent     bool

	// bal is the load table, the applied plan's reasons and the load rounds' schedule
	// and counters (balance.go).
	bal balanceState

	outbox []Command
	events []Event
	stats  Stats
}

// member is one shard session the coordinator honours.
type member struct {
	id string
	// group is the shard group its hello named ("" for the default group), fixed for the
	// incarnation: what placement by load puts its group's pins on.
	group     string
	session   Session
	joined    time.Time
	lastRecv  time.Time // latest Hello or Heartbeat received from this incarnation
	connected bool
	leaving   bool
	fencedOut bool
	farewell  time.Time // last Farewell sent
	// disconnectedAt: when its stream closed (zero while connected); with the
	// owner record, a member disconnected for SeizeAfter is seized.
	disconnectedAt time.Time
	// loadReports counts the load reports of this incarnation's accepted heartbeats,
	// loadAt and loadEntries describe the last one (absurd or not: it reported, so a
	// load round does not wait for it). Their loads are in Coordinator.bal.
	loadReports uint64
	loadAt      time.Time
	loadEntries int
	// limiterWait is the last accepted report's shard-wide rate-limiter wait
	// (LoadReport's LimiterWaitPermille): shown, and what updateSaturation judges.
	limiterWait uint32
	// saturated: as of its last accepted report (updateSaturation).
	saturated bool
	// loadSinceWelcome: a report was taken since the last Welcome (a report earlier
	// than the cadence allows is dropped only then: the first after a Welcome is due).
	loadSinceWelcome bool
	// loadTableSeq numbers its last report not dropped whole; a partition it holds
	// whose last entry came in an earlier report carries no load (Coordinator.effective).
	loadTableSeq uint64
	// suspectUntil: its reports are not trusted before then (balance.Member.Suspect):
	// a partition it received for load reported far below what its donor reported.
	suspectUntil time.Time
}

// tomb remembers the last session of a removed shard so a delayed hello of
// that (or an older) session is not taken for a new member.
type tomb struct {
	session Session
	until   time.Time
}

// part is the coordinator's record of one partition.
//
// Invariant: owner != "" implies members[owner] exists and its incarnation
// is ownerInc. The owner (and every stale holder) may be working the
// partition; nobody else may, and a grant to anybody else waits until each
// of them has released or expired.
type part struct {
	owner    string
	ownerInc uint64
	epoch    Epoch // of the owner's grant; when unowned, the last epoch issued
	acked    bool  // the owner confirmed (Acquired, or reported it acquired)
	lastSent time.Time

	holdUntil time.Time // unowned: not grantable before (new leader, restarted owner)

	// For metrics: when the partition last lost its worker, who that was,
	// and when the move that is completing began.
	freedAt      time.Time
	prevOwner    string
	handoffStart time.Time

	move  *move
	stale []staleHolder
	// refresh: the owner was granted p by a move whose source released it (worked and
	// wrote it until then), so its Acquire asks it to list p again (Command.Refresh).
	refresh bool
	// seized: p's last owner was seized. It may be alive, cut off from the coordinator,
	// and write until the owner record is enforced, so the next grant is not warmed
	// ahead of its record (grant).
	seized bool

	// recorded is the owner the enforced owner record names (Config.OwnerRecord), and
	// recordedInc the owner's incarnation this leader last had it enforced for
	// (recordedFor false: only read at the start of the term, never written by it).
	// A grant to a new process of the same shard is written again like a move: that
	// write is where a leader deposed while paused learns it (the edge refuses to write
	// once its tenure may have lapsed), before it could hand the restarted shard anything.
	recorded    string
	recordedInc uint64
	recordedFor bool
}

// move is a handoff of a partition from its owner to another shard.
type move struct {
	to          string // "" for a release without a destination
	toInc       uint64
	epoch       Epoch
	releasing   bool
	prepared    bool
	needPrepare bool // resend Prepare (the destination reconnected)
	started     time.Time
	phaseAt     time.Time
	lastSent    time.Time
	capped      bool
	reason      balance.Reason // why it started (EventMoveStarted)
}

// staleHolder is a shard other than the owner that may still be working a
// partition (a double claim to a new leader) and is being asked to release.
type staleHolder struct {
	shard    string
	inc      uint64
	epoch    Epoch
	lastSent time.Time
}

// New returns the coordinator of a leader that won term at now. Terms must
// strictly grow across leaders (e.g. the Lease's leaseTransitions+1); the
// term is the high half of every epoch this leader issues.
//
// Until now+SessionTTL+Margin the coordinator only adopts what shards report
// and grants nothing: any shard that worked a partition under the previous
// leader has either reported it by then or stopped working.
func New(cfg Config, term uint32, now time.Time) (*Coordinator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if term == 0 {
		return nil, reject(ReasonMalformed, "", "term must be positive")
	}
	r, err := ring.New(cfg.Ring)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg:        cfg,
		ring:       r,
		term:       term,
		startedAt:  now,
		graceUntil: now.Add(cfg.SessionTTL + cfg.Margin),
		now:        now,
		members:    map[string]*member{},
		tombs:      map[string]tomb{},
		parts:      make([]part, cfg.PartitionCount),
	}
	for i := range c.parts {
		c.parts[i].holdUntil = c.graceUntil
		c.parts[i].freedAt = now
	}
	c.stats.Term = term
	c.stats.GraceUntil = c.graceUntil
	return c, nil
}

// Config returns the effective configuration (defaults applied).
func (c *Coordinator) Config() Config { return c.cfg }

// Step feeds one message from a shard. A non-nil error is a *Rejection: the
// message was refused and changed nothing the edge needs to act on besides
// counting it (and sending the Outbox, which may hold a SessionEnded).
//
// A heartbeat (unless it asks to leave), Prepared and Acquired do only their own
// work: the Ack, the move's Release, the confirmation. What falls due with time
// (retries, timeouts, debounce, planning) waits for the next Tick. That work walks
// every partition, and these are the messages that come by the thousand: at 1,000
// shards heartbeating every second and 4,096 partitions, a walk per heartbeat took
// 15% of a core, at 65,536 partitions more than a core, and a first start (an
// Acquired per partition) was quadratic in the partition count
// (BenchmarkCoordinatorScale). Hellos, leaves and Released still plan at once: they
// change membership or free a move slot.
func (c *Coordinator) Step(now time.Time, r Report) error {
	now = c.observe(now)
	c.expire(now)
	var err *Rejection
	plan := true
	switch r.Kind {
	case ReportHello:
		err = c.hello(now, r)
	case ReportHeartbeat:
		err = c.heartbeat(now, r)
		plan = r.Leaving
	case ReportPrepared, ReportReleased, ReportAcquired:
		err = c.progress(now, r)
		// A refused Released freed nothing: no walk for it (a shard resending one, or
		// flooding; BenchmarkStepRefusedReleased).
		plan = r.Kind == ReportReleased && err == nil
	default:
		err = reject(ReasonMalformed, r.Shard, "unknown report kind %d", r.Kind)
	}
	if plan {
		c.step(now)
	}
	if err != nil {
		c.stats.Rejected[err.Reason]++
		return err
	}
	return nil
}

// Tick advances time: expiries, timeouts, retries, debounce and planning.
// The edge calls it periodically (every few hundred milliseconds); what a
// heartbeat, Prepared or Acquired makes possible is planned here (see Step).
func (c *Coordinator) Tick(now time.Time) {
	c.step(c.observe(now))
}

// Disconnected tells the coordinator that the stream of session closed.
// The shard still owns its partitions until its last heartbeat + TTL +
// Margin (it may be alive and reconnecting); nothing is sent to it and no
// new work is planned for it meanwhile.
func (c *Coordinator) Disconnected(now time.Time, shard string, session Session) {
	now = c.observe(now)
	if m := c.members[shard]; m != nil && m.session == session {
		m.connected = false
		m.disconnectedAt = now
		if m.leaving && !m.farewell.IsZero() && !c.involved(m.id) {
			// It said goodbye and holds nothing: gone for good.
			c.dropMember(m, now, now, EventMemberLeft)
		}
	}
	c.step(now)
}

// Outbox returns and clears the commands to send, in order.
func (c *Coordinator) Outbox() []Command {
	out := c.outbox
	c.outbox = nil
	return out
}

// Events returns and clears what happened since the last call, for logs and
// metrics (handoff durations, ownership gaps, membership changes).
func (c *Coordinator) Events() []Event {
	out := c.events
	c.events = nil
	return out
}

// observe makes time monotone: an edge that passes an earlier time than
// before (e.g. two goroutines racing to the lock) is treated as "now".
func (c *Coordinator) observe(now time.Time) time.Time {
	if now.After(c.now) {
		c.now = now
	}
	return c.now
}

// step runs everything time-driven, in an order that lets one call finish
// a cascade (expiry frees partitions, which planning then grants).
func (c *Coordinator) step(now time.Time) {
	c.expire(now)
	c.seize(now)
	c.advanceMoves(now)
	c.retry(now)
	if now.Before(c.graceUntil) {
		return
	}
	c.applyMembership(now)
	c.balanceRound(now)
	c.plan(now)
	c.farewells(now)
}

// nextEpoch issues a new epoch of this leader's term.
func (c *Coordinator) nextEpoch() (Epoch, bool) {
	if c.counter == ^uint32(0) {
		c.stats.EpochsExhausted = true
		return 0, false
	}
	c.counter++
	return MakeEpoch(c.term, c.counter), true
}

// send queues a command for the current session of m, if it is connected.
func (c *Coordinator) send(m *member, cmd Command) {
	if m == nil || !m.connected {
		return
	}
	cmd.To = m.id
	cmd.Session = m.session
	c.outbox = append(c.outbox, cmd)
}

func (c *Coordinator) sendPart(m *member, kind CommandKind, p int, e Epoch) {
	c.send(m, Command{Kind: kind, Partition: partition.ID(p), Epoch: e})
}

// sendAcquireCmd sends p's Acquire to its owner, every time with the same Refresh.
func (c *Coordinator) sendAcquireCmd(p int) {
	pr := &c.parts[p]
	c.send(c.members[pr.owner], Command{Kind: CmdAcquire, Partition: partition.ID(p), Epoch: pr.epoch, Refresh: pr.refresh})
}

func (c *Coordinator) emit(e Event) {
	if len(c.events) >= maxEvents {
		c.stats.EventsDropped++
		return
	}
	c.events = append(c.events, e)
}

// maxEvents bounds the event buffer of an edge that forgets to drain it.
const maxEvents = 1 << 16

func (c *Coordinator) addMember(m *member) {
	c.members[m.id] = m
	c.bal.waits.invalidate()
	i, _ := slices.BinarySearch(c.ids, m.id)
	c.ids = slices.Insert(c.ids, i, m.id)
}

func (c *Coordinator) removeMember(id string) {
	delete(c.members, id)
	c.bal.waits.invalidate()
	if i, ok := slices.BinarySearch(c.ids, id); ok {
		c.ids = slices.Delete(c.ids, i, i+1)
	}
}

// groupOf returns the shard group of member id ("" for the default group or no such
// member).
func (c *Coordinator) groupOf(id string) string {
	if m := c.members[id]; m != nil {
		return m.group
	}
	return ""
}

// memberInc returns the member only if it is still the given incarnation.
func (c *Coordinator) memberInc(id string, inc uint64) *member {
	if m := c.members[id]; m != nil && m.session.Incarnation == inc {
		return m
	}
	return nil
}

// eligible reports whether id may receive new partitions now. A member past its expiry
// may not: expire drops expired members one at a time, and the one dropped first must
// not hand the next a partition (a move completing to a destination that is itself
// expiring) that is then granted again to a third while the Acquire is on its way.
func (c *Coordinator) eligible(id string) bool {
	m := c.members[id]
	return m != nil && m.connected && !m.leaving && !m.fencedOut && c.now.Before(c.expiresAt(m))
}

func (c *Coordinator) expiresAt(m *member) time.Time {
	return m.lastRecv.Add(c.cfg.SessionTTL + c.cfg.Margin)
}

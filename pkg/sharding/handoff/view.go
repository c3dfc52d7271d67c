package handoff

import (
	"fmt"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// EventKind says what happened.
type EventKind uint8

const (
	// EventMemberJoined: a shard opened its first session.
	EventMemberJoined EventKind = iota + 1
	// EventMemberLeaving: a shard asked to leave.
	EventMemberLeaving
	// EventMemberLeft: a leaving shard got its Farewell and disconnected.
	EventMemberLeft
	// EventMemberExpired: a shard's lease ran out (Shard).
	EventMemberExpired
	// EventMemberRestarted: a new incarnation replaced the old (Shard).
	EventMemberRestarted
	// EventMemberFencedOut: a shard did not release in time (Shard).
	EventMemberFencedOut
	// EventTargetChanged: the target assignment was recomputed for Members
	// members.
	EventTargetChanged
	// EventMoveStarted: Prepare sent for Partition From → Shard.
	EventMoveStarted
	// EventMoveAborted: a move was called off before anything was released.
	EventMoveAborted
	// EventReleased: the old owner (Shard) of Partition stopped.
	EventReleased
	// EventAcquired: Shard confirmed working Partition. Gap is the time
	// from the previous worker stopping (or the partition becoming unowned)
	// to this confirmation; Handoff is the whole move, Prepare → Acquired,
	// when it was one.
	EventAcquired
	// EventAdopted: a new leader took over a reported ownership.
	EventAdopted
	// EventDoubleClaim: two shards reported Partition; Shard (newest epoch)
	// keeps it, From is asked to release.
	EventDoubleClaim
	// EventMemberSeized: a shard whose stream stayed closed for SeizeAfter was
	// dropped without waiting for its lease (Config.OwnerRecord refuses its late
	// writes).
	EventMemberSeized
	// EventSaturation: Shard became saturated (Saturated) or stopped being so
	// (updateSaturation); Wait and Median are the figures it was judged by, in ‰.
	EventSaturation
)

var eventKindNames = [...]string{"", "member-joined", "member-leaving", "member-left", "member-expired",
	"member-restarted", "member-fenced-out", "target-changed", "move-started", "move-aborted",
	"released", "acquired", "adopted", "double-claim", "member-seized", "saturation"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k != 0 {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one observation for logs and metrics.
type Event struct {
	Kind      EventKind
	At        time.Time
	Shard     string
	From      string
	Partition partition.ID
	Epoch     Epoch
	Members   int
	Handoff   time.Duration
	Gap       time.Duration
	// Reason (EventMoveStarted) is why the partition moves: membership, pin, hot or
	// load, from the plan that set its target.
	Reason balance.Reason
	// Saturated, Wait and Median (EventSaturation): the shard's new state, its
	// reported rate-limiter wait and the median of its group's other shards, in ‰.
	Saturated    bool
	Wait, Median uint32
}

// PartitionState is the coordinator's view of one partition.
type PartitionState uint8

const (
	// StateUnowned: nobody works it; it will be granted.
	StateUnowned PartitionState = iota
	// StateAcquiring: Acquire sent, not yet confirmed.
	StateAcquiring
	// StateOwned: the owner confirmed it.
	StateOwned
	// StatePreparing: moving; the destination warms caches.
	StatePreparing
	// StateReleasing: moving; the owner is asked to release.
	StateReleasing
)

var partitionStateNames = [...]string{"unowned", "acquiring", "owned", "preparing", "releasing"}

func (s PartitionState) String() string {
	if int(s) < len(partitionStateNames) {
		return partitionStateNames[s]
	}
	return fmt.Sprintf("PartitionState(%d)", uint8(s))
}

// Assignment is one partition as the coordinator sees it.
type Assignment struct {
	Partition partition.ID
	// Owner may be working it (unless StateUnowned).
	Owner string
	Epoch Epoch
	State PartitionState
	// Target is where the ring wants it ("" before the first target).
	Target string
	// MoveTo is the destination of a move in progress.
	MoveTo string
}

func (c *Coordinator) assignment(p int) Assignment {
	pr := &c.parts[p]
	a := Assignment{Partition: partition.ID(p), Owner: pr.owner, Epoch: pr.epoch}
	if c.target != nil {
		a.Target = c.target[p]
	}
	switch {
	case pr.owner == "":
		a.State = StateUnowned
	case pr.move != nil && pr.move.releasing:
		a.State, a.MoveTo = StateReleasing, pr.move.to
	case pr.move != nil:
		a.State, a.MoveTo = StatePreparing, pr.move.to
	case !pr.acked:
		a.State = StateAcquiring
	default:
		a.State = StateOwned
	}
	return a
}

// Assignments returns every partition's owner and state.
func (c *Coordinator) Assignments() []Assignment {
	out := make([]Assignment, len(c.parts))
	for p := range c.parts {
		out[p] = c.assignment(p)
	}
	return out
}

// Assignment returns one partition (the "which shard owns namespace X"
// lookup after partition.Map.For).
func (c *Coordinator) Assignment(id partition.ID) (Assignment, bool) {
	if int(id) >= len(c.parts) {
		return Assignment{}, false
	}
	return c.assignment(int(id)), true
}

// MemberInfo is one shard session as the coordinator sees it.
type MemberInfo struct {
	ID string
	// Group is the shard group its hello named ("" for the default group).
	Group     string
	Session   Session
	Joined    time.Time
	LastHeard time.Time
	// ExpiresAt is when its partitions are taken if it stays silent.
	ExpiresAt time.Time
	Connected bool
	Leaving   bool
	FencedOut bool
	Owned     int
	// LoadReports counts the load reports on this incarnation's accepted heartbeats;
	// LoadReportedAt (zero: none yet) and LoadEntries describe the last one.
	LoadReports    uint64
	LoadReportedAt time.Time
	LoadEntries    int
	// Load is the cost of the partitions it owns as the balancer sees it (load plus the
	// namespace base, balance.Costs); 0 before any load report or namespace count.
	Load float64
	// LimiterWaitPermille is its last load report's rate-limiter wait (LoadReport):
	// whether it is saturated (Saturated), which its load, a lower bound of its demand
	// then, does not tell. 0 before any report.
	LimiterWaitPermille uint32
	// Exclusive: it holds a hot partition as of the last load plan
	// (balance.DomainStat.ExclusiveMembers), so load rounds move the other partitions
	// with a namespace off it and none onto it, as their budgets allow; a membership
	// plan moves nothing for that. False without a load plan.
	Exclusive bool
	// Saturated: its rate-limiter wait reached BalanceConfig.SaturationWait and
	// SaturationMedianRatio × its group's median, and has not fallen below the exit bars
	// since (updateSaturation), so plans count its partitions above what they
	// measure and give it no load.
	Saturated bool
	// Suspect: its load reports are not trusted now (a partition it received for load
	// reported far below what its donor had; SuspectFraction), so no load or hot move
	// goes to it until SuspectFor has passed.
	Suspect bool
}

// Members returns the shards with a session, sorted by ID.
func (c *Coordinator) Members() []MemberInfo {
	owned := map[string]int{}
	for p := range c.parts {
		if o := c.parts[p].owner; o != "" {
			owned[o]++
		}
	}
	loads := c.memberLoads()
	out := make([]MemberInfo, 0, len(c.ids))
	for _, id := range c.ids {
		m := c.members[id]
		out = append(out, MemberInfo{
			ID: id, Group: m.group, Session: m.session, Joined: m.joined, LastHeard: m.lastRecv, ExpiresAt: c.expiresAt(m),
			Connected: m.connected, Leaving: m.leaving, FencedOut: m.fencedOut, Owned: owned[id],
			LoadReports: m.loadReports, LoadReportedAt: m.loadAt, LoadEntries: m.loadEntries,
			Load: loads[id], LimiterWaitPermille: m.limiterWait, Exclusive: c.exclusive(id), Suspect: c.suspect(m, c.now), Saturated: c.saturated(m),
		})
	}
	return out
}

// Stats are counters and gauges for metrics. Counters only grow for the
// life of this Coordinator (one leadership term).
type Stats struct {
	Term       uint32
	GraceUntil time.Time
	// Epoch is the latest epoch this leader issued (its term in the high bits).
	Epoch Epoch

	// Gauges (filled by Stats()).
	Members       int
	Leaving       int
	ByState       [5]int // indexed by PartitionState
	MovesInFlight int

	// Counters.
	Joins, Leaves, Expirations, Restarts, FenceOuts uint64
	TargetChanges                                   uint64
	MovesStarted, MovesFinished, MovesAborted       uint64
	Grants, Adoptions, DoubleClaims, StaleClaims    uint64
	Rejected                                        [NumReasons]uint64
	RingErrors                                      uint64
	LastRingError                                   string
	EventsDropped                                   uint64

	// RingRequests counts target computations asked for; RingResultsStale
	// the results that came back for a superseded generation and were
	// dropped.
	RingRequests, RingResultsStale uint64
	// RingPending: a target is wanted that has not been applied yet (it is
	// waiting to be taken or being computed).
	RingPending bool

	// Owner record (Config.OwnerRecord): requests handed to the edge, results
	// for a request no longer out, failed writes (and the last error), and
	// members seized after their stream closed.
	RecordRequests, RecordResultsStale, RecordErrors, Seizures uint64
	LastRecordError                                            string

	// EpochsExhausted: this leader issued 2^32−1 epochs and grants no more;
	// it must step down so a new term starts.
	EpochsExhausted bool
	// NewerTermSeen: a shard reported an epoch of a newer term; this
	// coordinator is deposed and must step down.
	NewerTermSeen bool

	// Balance are the balancer's counters and gauges (load rounds, moves by reason,
	// rejected load reports, the last load plan's domains).
	Balance BalanceStats
}

// Stats returns the current counters and gauges.
func (c *Coordinator) Stats() Stats {
	s := c.stats
	s.Members = len(c.ids)
	for _, id := range c.ids {
		if c.members[id].leaving {
			s.Leaving++
		}
	}
	for p := range c.parts {
		s.ByState[c.assignment(p).State]++
	}
	s.MovesInFlight = c.movesInFlight
	s.RingPending = c.ringReq != nil
	s.Epoch = MakeEpoch(c.term, c.counter)
	s.Balance = c.balanceStats()
	return s
}

// Term returns the leader term of this coordinator.
func (c *Coordinator) Term() uint32 { return c.term }

// Converged reports whether every partition is owned, confirmed and where
// the current target wants it, with nothing in flight.
func (c *Coordinator) Converged() bool {
	if c.target == nil || c.dirty || c.ringReq != nil || len(c.desired) == 0 {
		return false
	}
	for p := range c.parts {
		pr := &c.parts[p]
		if pr.owner == "" || !pr.acked || pr.move != nil || len(pr.stale) > 0 || pr.owner != c.target[p] {
			return false
		}
	}
	return true
}

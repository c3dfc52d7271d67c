package sim

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Scenario selects what a run does.
type Scenario uint8

const (
	// Chaos injects random faults for a while, then checks safety
	// throughout and convergence after the faults stop.
	Chaos Scenario = iota
	// LeaderChange converges, replaces the coordinator leader with stable
	// membership, and checks that nothing moves and no partition is ever
	// unworked.
	LeaderChange
	// GracefulLeave converges, lets one shard leave, and checks that its
	// partitions move warm (short gaps) before it exits on Farewell.
	GracefulLeave
	// ScaleUp converges, adds a shard, and checks warm moves to it.
	ScaleUp
	// SkewSteady runs a steady skewed load (one partition carries 30 % of it) for
	// 20 minutes with the balancer on, and checks that it converges, isolates the hot
	// partition and then stays still.
	SkewSteady
	// LoadShift converges under a skewed load, then moves the hot load to another
	// partition, and checks that the balancer follows within a bound and with few
	// moves.
	LoadShift
	// Liar runs a skewed load with one shard that reports its loads times
	// Options.LiarFactor (0: it looks idle; 100: it looks swamped), and checks the
	// namespace cap, the honest shards' load and the moves per hour.
	Liar
	// Saturation runs a skewed load on shards of bounded capacity (saturationCapacity
	// × the fair share): a shard asked for more measures its partitions' loads scaled
	// down to its capacity (its requests capped, its events folded) and reports a high
	// rate-limiter wait; the hot partition carries a fair share of the load, so that on a
	// saturated shard it measures below the hot threshold. It checks that the balancer
	// leaves no shard saturated, and then stays still.
	Saturation
)

func (s Scenario) String() string {
	return [...]string{"chaos", "leader-change", "graceful-leave", "scale-up", "skew-steady", "load-shift", "liar", "saturation"}[s]
}

// Options configure one run; everything else derives from Seed.
type Options struct {
	Seed     int64
	Scenario Scenario
	// Trace, if set, receives every step of the run.
	Trace io.Writer
	// OwnerRecord runs the coordinator with the server-side fence: a simulated API
	// server keeps the owner record and accepts a shard's work on a partition only
	// while the record names it, and the leader seizes shards whose stream stayed
	// closed for seizeAfter.
	OwnerRecord bool
	// Loads gives partitions a true load (a skewed one, see newLoadModel) that the
	// shards measure and report on their heartbeats, and runs the coordinator with
	// Placement load and the balancer on (docs/design-placement.md §4). SkewSteady,
	// LoadShift, Liar and Saturation imply it; with Chaos it is the SkewChaos scenario.
	Loads bool
	// NoNoise: the shards measure their loads exactly: no ±10 % per sample, and no
	// error from their clocks' rates.
	NoNoise bool
	// LiarFactor is what the Liar scenario's liar multiplies its loads by.
	LiarFactor float64
}

// loads reports whether the run has loads.
func (o Options) loads() bool { return o.Loads || o.Scenario >= SkewSteady }

// Result describes a finished run.
type Result struct {
	Seed          int64
	Scenario      Scenario
	Steps         int
	SimTime       time.Duration
	Partitions    int
	ShardIDs      int
	MaxMoves      int
	Faults        map[string]int
	LeaderChanges int
	// Measured after the last fault's effects ended ("settled").
	TimeToWorked    time.Duration // every partition worked by exactly one live shard
	TimeToConverged time.Duration // coordinator converged to the ring target and agrees with who works what
	// MaxGap is the longest time any partition went unworked inside the
	// measured window of the GracefulLeave/ScaleUp/LeaderChange scenarios.
	MaxGap     time.Duration
	Moves      uint64
	Rejections uint64
	// Runs with loads: the moves started for load (reasons hot, load and pin) and
	// by reason, and the busiest non-exclusive member's true cost over their mean at
	// the end (1 is even).
	LoadMoves      uint64
	MovesByReason  map[string]uint64
	FinalImbalance float64
	// TimeToBalanced is how long the balancer took to balance after the cluster
	// converged (LoadShift: after the shift).
	TimeToBalanced time.Duration
}

// Fixed protocol timings of the simulated deployment. Clocks drift up to
// drift in rate, near the bound the margin is validated against.
const (
	ttl            = 3 * time.Second
	hbInterval     = time.Second
	margin         = 500 * time.Millisecond
	drift          = 0.05
	debounce       = time.Second
	maxDebounce    = 4 * time.Second
	prepareTimeout = 2 * time.Second
	releaseTimeout = 6 * time.Second
	retryInterval  = 500 * time.Millisecond
	tickInterval   = 100 * time.Millisecond
	helloTimeout   = time.Second

	maxBaseDelay  = 20 * time.Millisecond
	maxLongDelay  = 2 * time.Second
	maxElection   = 3 * time.Second
	maxDiscovery  = time.Second
	maxSync       = 300 * time.Millisecond
	maxDrain      = 200 * time.Millisecond
	maxHungDrain  = 8 * time.Second
	leaveDeadline = 15 * time.Second
	confirmFor    = 3 * time.Second
	// maxRingDelay bounds how long the coordinator's edge takes to compute
	// a target assignment off the state machine (coordinatorrpc does it on
	// its own goroutine).
	maxRingDelay = 250 * time.Millisecond
	// maxRecordDelay bounds an owner record write plus the wait until the API
	// server enforces it; seizeAfter is Config.SeizeAfter with the record on.
	maxRecordDelay = 100 * time.Millisecond
	seizeAfter     = time.Second
)

// Bounds checked after the faults settle (all derived from the timings):
//
//   - workedBound: a dead shard expires TTL+margin after its last heartbeat,
//     a new leader grants unreported partitions TTL+margin after it starts
//     (shards find it within maxDiscovery), membership settles within
//     maxDebounce, the target takes up to two ring computations (one
//     outstanding, then the latest) of maxRingDelay, then one Acquire
//     round trip.
//   - convergence adds the moves: ceil(P/cap) rounds of prepare (sync) +
//     release (drain) + four message delays, plus one more debounce.
func workedBound() time.Duration {
	return 2*(ttl+margin) + maxDebounce + maxDiscovery + 2*maxRingDelay + 2*time.Second
}

func convergedBound(p, moves int) time.Duration {
	rounds := (p + moves - 1) / moves
	perMove := maxSync + maxDrain + 4*maxBaseDelay + retryInterval
	return workedBound() + maxDebounce + time.Duration(rounds)*perMove + 2*time.Second
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is one machine's clock: offset and rate against true time.
type clock struct {
	offset time.Duration
	rate   float64
}

func (c clock) at(t time.Duration) time.Time {
	return base.Add(c.offset + time.Duration(float64(t)*c.rate))
}

// real converts a local duration to true time.
func (c clock) real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.rate) }

type evKind uint8

const (
	evToCoord evKind = iota
	evToShard
	evCoordTick
	evElect
	evDisconnected
	evHeartbeat
	evHelloTimeout
	evSynced
	evDrained
	evDiscover
	evReconnect
	evRestart
	evLeaveDeadline
	evFault
	evScenario
	evRingComputed
	evRecordApplied
	evBalanceCheck
)

type event struct {
	at    time.Duration
	seq   uint64
	kind  evKind
	shard int
	inc   uint64
	gen   int
	rep   handoff.Report
	cmd   handoff.Command
	p     partition.ID
	epoch handoff.Epoch
	sess  handoff.Session
	name  string
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return x
}

type world struct {
	opts  Options
	rng   *rand.Rand
	now   time.Duration
	seq   uint64
	q     eventQueue
	cfg   handoff.Config
	p     int
	steps int
	res   Result

	leader *coordNode
	gen    int
	term   uint32

	shards []*shardNode

	faulty    bool // faults are being injected
	faultEnd  time.Duration
	settled   time.Duration // all fault effects over (grows while effects are scheduled)
	electing  bool
	workedAt  time.Duration // first time all partitions were worked after settling
	converged time.Duration
	stopAt    time.Duration
	deadline  time.Duration
	maxShards int
	minShards int
	faultMean time.Duration
	measuring bool
	discovery time.Duration
	phase     int
	snapshot  []string // owners when the scenario's action began
	// movesBefore: the leader's MovesStarted when the action began.
	movesBefore uint64
	leaver      *shardNode
	joiner      *shardNode
	unworked    []time.Duration // per partition: since when unworked (-1 if worked)
	count       []int
	// violation is one found while carrying out shard output (flushShard), reported by
	// the next check.
	found *Violation

	// The owner record as the API server enforces it (Options.OwnerRecord): owner
	// per partition, and the highest leader term that wrote it (a deposed
	// leader's late write is refused, as ownerrecord.Labeler refuses to write once
	// the leader's tenure may have lapsed).
	record     []string
	recordTerm uint32

	// Runs with loads (Options.loads).
	load *loadModel
	liar *shardNode
	bal  balanceState
}

func (w *world) tracef(format string, args ...any) {
	if w.opts.Trace == nil {
		return
	}
	fmt.Fprintf(w.opts.Trace, "%9.3fs ", w.now.Seconds())
	fmt.Fprintf(w.opts.Trace, format, args...)
	fmt.Fprintln(w.opts.Trace)
}

func (w *world) schedule(at time.Duration, ev *event) {
	w.seq++
	ev.at, ev.seq = at, w.seq
	heap.Push(&w.q, ev)
}

func (w *world) after(d time.Duration, ev *event) { w.schedule(w.now+d, ev) }

func (w *world) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

func (w *world) settle(t time.Duration) {
	if t > w.settled {
		w.settled = t
	}
}

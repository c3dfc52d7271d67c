package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// Violation is returned when a run breaks the invariant or a bound.
type Violation struct {
	Seed     int64
	Scenario Scenario
	At       time.Duration
	What     string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("seed %d (%s) at %.3fs: %s", v.Seed, v.Scenario, v.At.Seconds(), v.What)
}

// Run simulates one seed. It returns a *Violation if any check failed.
func Run(opts Options) (Result, error) {
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), uint64(opts.Seed)^0x9e3779b97f4a7c15))
	w := &world{opts: opts, rng: rng}
	w.p = 8 + rng.IntN(41)
	if opts.loads() {
		// A skewed load needs partitions enough to spread (design §4: 48–256).
		w.p = 48 + rng.IntN(209)
	}
	w.minShards = 2
	w.maxShards = 3 + rng.IntN(10) // 3..12 shard pods over the run
	moves := 1 + rng.IntN(4)
	if opts.loads() {
		moves = 1 + rng.IntN(32)
		if opts.Scenario == GracefulLeave {
			// A leaver holds up to ~80 of the 48–256 partitions: a few moves at a
			// time would outlast the leave deadline.
			moves = max(moves, 8)
		}
	}
	w.cfg = handoff.Config{
		PartitionCount:     w.p,
		Ring:               ring.Config{ReplicationFactor: 20, Load: 1.25},
		SessionTTL:         ttl,
		HeartbeatInterval:  hbInterval,
		Margin:             margin,
		MaxClockDrift:      drift,
		Debounce:           debounce,
		MaxDebounce:        maxDebounce,
		PrepareTimeout:     prepareTimeout,
		ReleaseTimeout:     releaseTimeout,
		RetryInterval:      retryInterval,
		MaxConcurrentMoves: moves,
	}
	if opts.OwnerRecord {
		w.cfg.OwnerRecord, w.cfg.SeizeAfter = true, seizeAfter
	}
	w.res = Result{Seed: opts.Seed, Scenario: opts.Scenario, Partitions: w.p, MaxMoves: moves, Faults: map[string]int{}}
	w.count = make([]int, w.p)
	w.record = make([]string, w.p)
	w.unworked = make([]time.Duration, w.p) // all unworked since 0
	w.discovery = maxDiscovery

	initial := 3 + rng.IntN(4)
	if opts.Scenario != Chaos {
		initial = 3 + rng.IntN(6)
		w.maxShards = initial + 1
		if opts.Scenario == LeaderChange {
			// Shards find the new leader fast enough that no lease runs
			// out: the change must then be invisible to the workers.
			w.discovery = maxDiscovery / 2
		}
	}
	if opts.loads() {
		w.setupLoads(initial)
	}
	if err := w.cfg.WithDefaults().Validate(); err != nil {
		return Result{}, err
	}
	w.elect()
	for range initial {
		w.addShard()
	}
	if opts.Scenario == Liar {
		w.liar = w.shards[rng.IntN(initial)]
		w.tracef("LIAR %s reports its loads ×%v", w.liar.id, opts.LiarFactor)
	}
	switch opts.Scenario {
	case Chaos:
		w.faulty = true
		w.faultEnd = w.dur(10*time.Second, 40*time.Second)
		w.faultMean = w.dur(300*time.Millisecond, 2*time.Second)
		w.after(w.dur(0, w.faultMean), &event{kind: evFault})
	default:
		w.settle(0)
	}
	w.converged, w.workedAt = -1, -1

	for w.q.Len() > 0 {
		ev := heap.Pop(&w.q).(*event)
		w.now = ev.at
		if err := w.handle(ev); err != nil {
			return w.res, err
		}
		w.steps++
		if ev.kind == evCoordTick && w.load != nil && w.found == nil {
			// Runs with loads last minutes: the leader's tick changes no shard, so
			// nothing can start working; a lease that ran out meanwhile is seen at
			// the next shard event (a heartbeat interval at most).
			continue
		}
		if err := w.check(); err != nil {
			return w.res, err
		}
		if w.stopAt > 0 && w.now >= w.stopAt {
			break
		}
	}
	w.res.Steps = w.steps
	w.res.SimTime = w.now
	w.res.ShardIDs = len(w.shards)
	if w.converged < 0 {
		return w.res, w.violation("run ended without converging")
	}
	if w.load != nil {
		if err := w.finishLoads(); err != nil {
			return w.res, err
		}
	}
	return w.res, nil
}

func (w *world) violation(format string, args ...any) *Violation {
	return &Violation{Seed: w.opts.Seed, Scenario: w.opts.Scenario, At: w.now, What: fmt.Sprintf(format, args...)}
}

func (w *world) handle(ev *event) error {
	switch ev.kind {
	case evToCoord, evCoordTick, evDisconnected, evRingComputed, evRecordApplied:
		w.deliverToCoord(ev)
	case evElect:
		w.elect()
	case evRestart:
		if s := w.shards[ev.shard]; !s.alive && !s.gone {
			w.start(s)
		}
	case evFault:
		if w.faulty {
			if w.now >= w.faultEnd {
				w.quiesce()
				return nil
			}
			w.inject()
			w.after(w.dur(0, 2*w.faultMean), &event{kind: evFault})
		}
	case evScenario:
		return w.scenarioStep(ev)
	case evBalanceCheck:
		return w.balanceTick()
	default:
		w.deliverToShard(ev)
	}
	return nil
}

// check runs after every event. Between events nothing starts working
// (work only starts when a shard processes a message), and leases only
// run out, so checking right after each event covers every instant.
func (w *world) check() error {
	if w.found != nil {
		return w.found
	}
	clear(w.count)
	for _, s := range w.shards {
		if !s.alive || s.paused(w.now) {
			continue
		}
		// Only a partition the state machine holds (as of its last output, which
		// every step is followed by) can be Working, and only one with a tenure can
		// be written: the others are not active.
		at := s.clk.at(w.now)
		for p, held := range s.rt.held {
			if (held || s.rt.tenure[p]) && w.activeAt(s, partition.ID(p), at) {
				w.count[p]++
			}
		}
	}
	all := true
	for p, n := range w.count {
		if n > 1 {
			var who []string
			for _, s := range w.shards {
				if s.alive && !s.paused(w.now) && w.active(s, partition.ID(p)) {
					who = append(who, s.id)
				}
			}
			if w.opts.OwnerRecord {
				return w.violation("partition %d worked by %d shards the record names at once: %v", p, n, who)
			}
			return w.violation("partition %d worked by %d shards at once (may start work, or runs work that can write): %v", p, n, who)
		}
		if n == 0 {
			all = false
			if w.unworked[p] < 0 {
				w.unworked[p] = w.now
			}
		} else if w.unworked[p] >= 0 {
			if w.measuring {
				w.res.MaxGap = max(w.res.MaxGap, w.now-w.unworked[p])
			}
			w.unworked[p] = -1
		}
	}
	if w.faulty || w.electing || w.now < w.settled {
		return nil
	}
	if w.deadline == 0 {
		w.deadline = w.settled + convergedBound(w.p, w.res.MaxMoves)
		if w.load != nil {
			// Load rounds may start moves before the cluster is seen converged.
			w.deadline += balanceWarmup + w.roundsBound()
		}
	}
	if w.bal.balancing {
		// The balancer moves partitions after convergence: each must be a warm
		// handoff.
		for p, since := range w.unworked {
			if since >= 0 && w.now-since > w.warmGap() {
				return w.violation("partition %d unworked for %v while balancing (bound %v: balancer moves are warm)", p, w.now-since, w.warmGap())
			}
		}
	} else if !all && w.workedAt >= 0 && w.converged >= 0 {
		return w.violation("a partition became unworked after convergence")
	}
	if all && w.workedAt < 0 {
		w.workedAt = w.now
		w.res.TimeToWorked = w.now - w.settled
		if w.res.TimeToWorked > workedBound() {
			return w.violation("all partitions worked only %v after faults settled (bound %v)", w.res.TimeToWorked, workedBound())
		}
	}
	if w.converged < 0 && all && w.isConverged() {
		w.converged = w.now
		w.res.TimeToConverged = w.now - w.settled
		w.tracef("converged")
		return w.onConverged()
	}
	if w.converged < 0 && w.workedAt < 0 && w.now > w.settled+workedBound() {
		return w.violation("partitions still unworked %v after faults settled (bound %v): %v", w.now-w.settled, workedBound(), w.unworkedList())
	}
	if w.converged < 0 && w.now > w.deadline {
		return w.violation("not converged %v after faults settled (bound %v)", w.now-w.settled, w.deadline-w.settled)
	}
	return nil
}

// active reports whether s works p at this instant: its state machine lets work of p
// start, or work of p that already started still runs and can write; and, with the
// owner record, the API server would accept its writes (the record names it).
func (w *world) active(s *shardNode, p partition.ID) bool {
	return w.activeAt(s, p, s.clk.at(w.now))
}

// activeAt is active with s's clock read already (at).
func (w *world) activeAt(s *shardNode, p partition.ID, at time.Time) bool {
	if w.opts.OwnerRecord && w.record[p] != s.id {
		return false
	}
	return s.sh.Working(at, p) || w.mayWrite(s, p, at)
}

func (w *world) unworkedList() []int {
	var out []int
	for p, n := range w.count {
		if n == 0 {
			out = append(out, p)
		}
	}
	return out
}

// isConverged: the leader's members are exactly the live shards, it
// reports convergence to the ring target, and who it thinks owns each
// partition is the shard actually working it.
func (w *world) isConverged() bool {
	n := w.leader
	return n != nil && n.c.Converged() && w.ownersWork(n)
}

// ownersWork: n's members are exactly the live shards, and the owner n
// records for each partition is alive, running and working it.
func (w *world) ownersWork(n *coordNode) bool {
	var live, members []string
	for _, s := range w.shards {
		if s.alive && !s.sh.Leaving() {
			live = append(live, s.id)
		}
	}
	for _, m := range n.c.Members() {
		members = append(members, m.ID)
	}
	if !slices.Equal(live, members) {
		return false
	}
	for _, a := range n.c.Assignments() {
		s := w.byID(a.Owner)
		if s == nil || !s.alive || s.paused(w.now) || !s.sh.Working(s.clk.at(w.now), a.Partition) {
			return false
		}
	}
	return true
}

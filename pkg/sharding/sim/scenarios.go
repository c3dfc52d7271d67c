package sim

import (
	"time"
)

// maxWarmGap bounds how long a partition may go unworked in a warm handoff:
// Released and Acquire are two message delays, plus processing.
const maxWarmGap = 4*maxBaseDelay + 20*time.Millisecond

// warmGap is the bound of this run: with the owner record, the new owner's Acquire
// also waits for the record write to be enforced, and a write is out one at a time, so a
// release that comes while one is out waits for it and then for its own.
func (w *world) warmGap() time.Duration {
	if w.opts.OwnerRecord {
		return maxWarmGap + 2*maxRecordDelay
	}
	return maxWarmGap
}

// onConverged runs when the cluster converged after the faults (or the
// scenario's action) settled.
func (w *world) onConverged() error {
	switch w.opts.Scenario {
	case Chaos:
		if w.load == nil {
			w.stopAt = w.now + confirmFor
			return nil
		}
	}
	if w.load != nil && w.phase == 0 {
		// With loads, the scenario's action comes once the balancer has balanced
		// (balanceTick), and load moves may follow any convergence.
		w.phase = 1
		w.measuring = true
		w.startBalancing()
		return nil
	}
	switch w.phase {
	case 0:
		w.phase = 1
		w.after(time.Second, &event{kind: evScenario})
		return nil
	default:
		return w.finishScenario()
	}
}

// scenarioStep performs the scenario's action once the cluster converged.
func (w *world) scenarioStep(*event) error {
	for p := range w.unworked {
		if w.unworked[p] < 0 {
			continue
		}
		return w.violation("partition %d unworked before the scenario action", p)
	}
	w.measuring = true
	// A new phase: convergence is measured again from here.
	w.converged, w.workedAt, w.deadline = -1, -1, 0
	w.settle(w.now)
	// Who owns what before the action: each scenario checks that only what
	// it must move moves.
	w.snapshot = w.snapshot[:0]
	for _, a := range w.leader.c.Assignments() {
		w.snapshot = append(w.snapshot, a.Owner)
	}
	w.movesBefore = w.leader.c.Stats().MovesStarted
	w.bal.actionMoves = len(w.bal.moves)
	switch w.opts.Scenario {
	case LeaderChange:
		w.depose(w.dur(200*time.Millisecond, 800*time.Millisecond))
	case GracefulLeave:
		w.leaver = w.randomLive()
		w.leave(w.leaver)
		w.settled = w.now // the leave deadline is not a fault here
	case ScaleUp:
		w.joiner = w.addShard()
	}
	return nil
}

func (w *world) finishScenario() error {
	w.stopAt = w.now + confirmFor
	switch w.opts.Scenario {
	case LeaderChange:
		st := w.leader.c.Stats()
		if st.MovesStarted != 0 || st.Grants != 0 {
			return w.violation("leader change with stable membership moved %d and granted %d partitions", st.MovesStarted, st.Grants)
		}
		for i, a := range w.leader.c.Assignments() {
			if a.Owner != w.snapshot[i] {
				return w.violation("partition %d changed owner across the leader change: %s → %s", i, w.snapshot[i], a.Owner)
			}
		}
		if w.res.MaxGap > 0 {
			return w.violation("a partition went unworked for %v during the leader change", w.res.MaxGap)
		}
		if w.load != nil {
			// The new leader's load rounds start after its warm-up: they too must
			// find nothing to move (finishLoads checks again at the end).
			w.stopAt = w.now + balanceWarmup + 3*balanceInterval
		}
	case GracefulLeave:
		if !w.leaver.exitedClean {
			return w.violation("%s did not exit on farewell", w.leaver.id)
		}
		if w.res.MaxGap > w.warmGap() {
			return w.violation("graceful leave left a partition unworked for %v (bound %v)", w.res.MaxGap, w.warmGap())
		}
		if w.load != nil {
			// Membership moves only take the leaver's partitions; load moves may
			// follow, reported apart.
			return w.checkMembershipMoves(func(from, _ string) bool { return from == w.leaver.id })
		}
		// The target keeps every other shard's partitions (ring.AssignFrom).
		if err := w.checkMoves(func(from, _ string) bool { return from == w.leaver.id }); err != nil {
			return err
		}
	case ScaleUp:
		if w.load != nil {
			if w.res.MaxGap > w.warmGap() {
				return w.violation("scale-up left a partition unworked for %v (bound %v)", w.res.MaxGap, w.warmGap())
			}
			if err := w.checkMembershipMoves(func(_, to string) bool { return to == w.joiner.id }); err != nil {
				return err
			}
			return w.checkJoinCost()
		}
		n := 0
		for _, a := range w.leader.c.Assignments() {
			if a.Owner == w.joiner.id {
				n++
			}
		}
		// Its quota: floor(P/N), or one more. With more shards than partitions the
		// extra ones go to shards that hold one already, so the new shard may get none.
		if members := len(w.leader.c.Members()); n < w.p/members || n > w.p/members+1 {
			return w.violation("the new shard %s got %d partitions, want floor(%d/%d) or one more", w.joiner.id, n, w.p, members)
		}
		if w.res.MaxGap > w.warmGap() {
			return w.violation("scale-up left a partition unworked for %v (bound %v)", w.res.MaxGap, w.warmGap())
		}
		// The target moves to the new shard only, each partition once.
		if err := w.checkMoves(func(_, to string) bool { return to == w.joiner.id }); err != nil {
			return err
		}
	}
	return nil
}

// checkMoves fails unless every partition that changed owner since the
// scenario's action passes ok(from, to), and the leader started exactly one
// move per such partition (nothing moved back and forth, nothing needlessly).
func (w *world) checkMoves(ok func(from, to string) bool) error {
	changed := 0
	for i, a := range w.leader.c.Assignments() {
		if a.Owner == w.snapshot[i] {
			continue
		}
		changed++
		if !ok(w.snapshot[i], a.Owner) {
			return w.violation("%s: partition %d moved needlessly, %s → %s", w.opts.Scenario, i, w.snapshot[i], a.Owner)
		}
	}
	if started := w.leader.c.Stats().MovesStarted - w.movesBefore; started != uint64(changed) {
		return w.violation("%s: %d moves started for %d partitions that changed owner", w.opts.Scenario, started, changed)
	}
	return nil
}

package sim

import (
	"errors"
	"fmt"
	"time"
)

// startRing plays coordinatorrpc's edge: it takes the target computation
// the leader asks for and delivers the result after a random delay, as the
// server's goroutine does outside its lock. Membership keeps changing
// meanwhile, so results of superseded generations arrive too, and the
// leader keeps serving every shard while it waits. While faults are
// injected, some computations take up to maxLongDelay longer.
func (w *world) startRing(n *coordNode) {
	req, ok := n.c.TakeRingRequest()
	if !ok {
		return
	}
	n.ring = &req
	d := w.dur(0, maxRingDelay)
	if w.faulty && w.chance(0.2) {
		// A slow computation (a loaded node, a huge member set) that
		// membership changes overtake: the state machine must ignore
		// its result. It is a fault effect, so the bounds start after it.
		d += w.dur(0, maxLongDelay)
		w.settle(w.now + d)
	}
	w.tracef("C%d computes ring generation %d for %d members (%v)", n.gen, req.Gen, len(req.Members), d)
	w.after(d, &event{kind: evRingComputed, gen: n.gen})
}

// finishRing hands the computed target back to the leader that asked.
func (w *world) finishRing(n *coordNode, now time.Time) {
	req := n.ring
	if req == nil {
		return
	}
	n.ring = nil
	res, err := req.Compute()
	if w.opts.Trace == nil && w.load == nil {
		n.c.RingComputed(now, req.Gen, res, err)
		return
	}
	stale := n.c.Stats().RingResultsStale
	n.c.RingComputed(now, req.Gen, res, err)
	outcome := "applied"
	if n.c.Stats().RingResultsStale > stale {
		outcome = "superseded, ignored"
	} else if err == nil {
		w.ringApplied(n, req.Kind)
	}
	w.tracef("C%d %s plan generation %d %s err=%v", n.gen, req.Kind, req.Gen, outcome, err)
}

// startRecord plays the owner record's edge (coordinatorrpc with ownerrecord.Writer and
// Prober): it takes the leader's record request, writes it to the simulated API server
// after a random delay and answers the leader; while faults run, some writes fail.
func (w *world) startRecord(n *coordNode) {
	if n.rec != nil {
		return
	}
	req, ok := n.c.TakeRecordRequest()
	if !ok {
		return
	}
	n.rec = &req
	d := w.dur(0, maxRecordDelay)
	w.tracef("C%d writes the owner record generation %d: %d partitions (%v)", n.gen, req.Gen, len(req.Owners), d)
	w.after(d, &event{kind: evRecordApplied, gen: n.gen})
}

// finishRecord lands the write (unless it fails, or a newer leader claimed the record
// meanwhile) and answers the leader.
func (w *world) finishRecord(n *coordNode, now time.Time) {
	req := n.rec
	if req == nil {
		return
	}
	n.rec = nil
	var err error
	switch {
	case n.term < w.recordTerm:
		err = fmt.Errorf("record claimed by term %d", w.recordTerm)
	case w.faulty && w.chance(0.1):
		err = errors.New("simulated API error")
	default:
		for p, s := range req.Owners {
			w.record[p] = s
		}
	}
	w.tracef("C%d owner record generation %d err=%v", n.gen, req.Gen, err)
	n.c.RecordApplied(now, req.Gen, err)
}

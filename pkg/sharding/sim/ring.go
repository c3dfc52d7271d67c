package sim

import "time"

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
	target, err := req.Compute()
	if w.opts.Trace == nil {
		n.c.RingComputed(now, req.Gen, target, err)
		return
	}
	stale := n.c.Stats().RingResultsStale
	n.c.RingComputed(now, req.Gen, target, err)
	outcome := "applied"
	if n.c.Stats().RingResultsStale > stale {
		outcome = "superseded, ignored"
	}
	w.tracef("C%d ring generation %d %s err=%v", n.gen, req.Gen, outcome, err)
}

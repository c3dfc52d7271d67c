package handoff

import (
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// progress handles Prepared, Released and Acquired reports.
func (c *Coordinator) progress(now time.Time, r Report) *Rejection {
	m := c.members[r.Shard]
	if m == nil {
		return reject(ReasonUnknownShard, r.Shard, "%s from unknown shard", r.Kind)
	}
	if r.Session != m.session {
		if r.Session.Incarnation < m.session.Incarnation {
			return reject(ReasonStaleIncarnation, r.Shard, "%s of %s, current %s", r.Kind, r.Session, m.session)
		}
		return reject(ReasonStaleSession, r.Shard, "%s of %s, current %s", r.Kind, r.Session, m.session)
	}
	p := int(r.Partition)
	if p >= len(c.parts) {
		return reject(ReasonBadPartition, r.Shard, "partition %d of %d", r.Partition, len(c.parts))
	}
	pr := &c.parts[p]
	rej := func(reason Reason) *Rejection {
		return &Rejection{Reason: reason, Shard: r.Shard, Partition: r.Partition, Epoch: r.Epoch, Detail: r.Kind.String()}
	}
	switch r.Kind {
	case ReportPrepared:
		mv := pr.move
		if mv == nil && !pr.acked && pr.owner == m.id && pr.ownerInc == m.session.Incarnation && r.Epoch == pr.epoch {
			// The warm-up of a grant whose Acquire waited for the owner record (grant).
			return nil
		}
		if mv == nil || mv.to != m.id || mv.toInc != m.session.Incarnation {
			return rej(ReasonNotHolder)
		}
		if r.Epoch != mv.epoch {
			return rej(ReasonStaleEpoch)
		}
		mv.prepared = true
		c.advanceMove(p, now) // the Release, right away
	case ReportReleased:
		// "Released at e" means: stopped, and will not work it again without
		// an Acquire newer than e. Any e at or above the epoch asked for
		// therefore settles the request.
		if mv := pr.move; mv != nil && mv.releasing && pr.owner == m.id {
			if r.Epoch < mv.epoch {
				return rej(ReasonStaleEpoch)
			}
			c.completeRelease(p, now)
			return nil
		}
		for i, s := range pr.stale {
			if s.shard == m.id && s.inc == m.session.Incarnation {
				if r.Epoch < s.epoch {
					return rej(ReasonStaleEpoch)
				}
				pr.stale = slices.Delete(pr.stale, i, i+1)
				return nil
			}
		}
		return rej(ReasonNotHolder)
	case ReportAcquired:
		if pr.owner != m.id {
			return rej(ReasonNotHolder)
		}
		if r.Epoch != pr.epoch {
			return rej(ReasonStaleEpoch)
		}
		c.ack(p, now)
	}
	return nil
}

// ack records that the owner confirmed working p.
func (c *Coordinator) ack(p int, now time.Time) {
	pr := &c.parts[p]
	if pr.acked {
		return
	}
	pr.acked = true
	c.acquiredAt(p, now)
	ev := Event{Kind: EventAcquired, At: now, Partition: partition.ID(p), Shard: pr.owner, From: pr.prevOwner, Epoch: pr.epoch}
	if !pr.freedAt.IsZero() {
		ev.Gap = now.Sub(pr.freedAt)
	}
	if !pr.handoffStart.IsZero() {
		ev.Handoff = now.Sub(pr.handoffStart)
		c.stats.MovesFinished++
	}
	pr.freedAt, pr.prevOwner, pr.handoffStart = time.Time{}, "", time.Time{}
	c.emit(ev)
}

// plan grants unowned partitions and starts moves toward the target.
// Partitions of leaving shards move first: their pods are waiting to exit.
func (c *Coordinator) plan(now time.Time) {
	if c.target == nil {
		return
	}
	for pass := 0; pass < 2; pass++ {
		for p := range c.parts {
			pr := &c.parts[p]
			if pr.move != nil || len(pr.stale) > 0 {
				continue
			}
			t := c.target[p]
			if pr.owner == "" {
				if pass == 0 && !now.Before(pr.holdUntil) && c.eligible(t) {
					c.grant(p, t, now)
				}
				continue
			}
			if t == "" {
				// No shard is left to take it (every member is leaving, as in a scale to
				// zero or an uninstall): release it to nobody so the leaving shard can
				// exit now instead of at its leave timeout.
				if pass == 0 && pr.acked {
					if owner := c.members[pr.owner]; owner != nil && owner.leaving && !owner.fencedOut {
						c.releaseToNobody(p, now)
					}
				}
				continue
			}
			if !pr.acked || pr.owner == t || !c.eligible(t) {
				continue
			}
			owner := c.members[pr.owner]
			if owner.fencedOut {
				continue // its expiry frees the partition
			}
			if owner.leaving != (pass == 0) {
				continue
			}
			if c.movesInFlight >= c.cfg.MaxConcurrentMoves {
				return
			}
			c.startMove(p, t, now)
		}
	}
}

// grant gives an unowned partition to t: Acquire straight away (the shard
// warms caches first), or, while the owner record does not name t yet, a
// Prepare now and the Acquire once it does. Nobody can be working it: its last owner released
// or expired, or it was not reported to a new leader within the grace.
func (c *Coordinator) grant(p int, t string, now time.Time) {
	e, ok := c.nextEpoch()
	if !ok {
		return
	}
	m := c.members[t]
	pr := &c.parts[p]
	pr.owner, pr.ownerInc, pr.epoch = t, m.session.Incarnation, e
	c.recDirty = true
	pr.acked = false
	pr.holdUntil = time.Time{}
	c.stats.Grants++
	// The Acquire waits for the owner record when it does not name t yet (a first
	// grant, an expired or seized shard's partition: owner Roles to write and see
	// enforced). The new owner's caches are warmed meanwhile, which needs no fence, so
	// that the Acquire finds them synced instead of starting the warm-up only once the
	// record is enforced; the Prepared it answers is expected (see progress), and a
	// Release or another grant supersedes it as for a move. Not after a seizure: the
	// seized shard may be alive, cut off from the coordinator, and write until the
	// record is enforced, and caches warmed meanwhile may show its last writes in one
	// informer and not another (see Command.Refresh). Listing them after the record
	// costs the record's time (a few Role writes); warming twice would cost a list.
	early := !c.recordReady(p) && !pr.seized
	pr.refresh, pr.seized = false, false
	c.given(p, c.moveReason(p))
	c.sendAcquire(p, now)
	if early {
		c.sendPart(m, CmdPrepare, p, e)
	}
}

// startMove begins a handoff of p from its owner to t with a Prepare.
func (c *Coordinator) startMove(p int, t string, now time.Time) {
	e, ok := c.nextEpoch()
	if !ok {
		return
	}
	m := c.members[t]
	pr := &c.parts[p]
	why := c.moveReason(p)
	pr.move = &move{to: t, toInc: m.session.Incarnation, epoch: e, started: now, phaseAt: now, capped: true, reason: why}
	c.movesInFlight++
	c.stats.MovesStarted++
	c.bal.moves[why]++
	c.emit(Event{Kind: EventMoveStarted, At: now, Partition: partition.ID(p), Shard: t, From: pr.owner, Epoch: e, Reason: why})
	c.sendPart(m, CmdPrepare, p, e)
}

// releaseToNobody starts a move without destination, straight in its Release phase:
// once the owner reports Released (or expires), completeRelease leaves p unowned, to be
// granted when a shard joins. It is not counted against MaxConcurrentMoves: it warms
// nothing.
func (c *Coordinator) releaseToNobody(p int, now time.Time) {
	e, ok := c.nextEpoch()
	if !ok {
		return
	}
	pr := &c.parts[p]
	pr.move = &move{epoch: e, started: now, phaseAt: now, releasing: true}
}

// advanceMoves runs the Prepare and Release phases of every move.
func (c *Coordinator) advanceMoves(now time.Time) {
	for p := range c.parts {
		if c.parts[p].move != nil {
			c.advanceMove(p, now)
		}
	}
}

// advanceMove runs the Prepare and Release phases of p's move: it calls off a move whose
// destination is gone or no longer the target, sends the Release once the destination is
// prepared (or PrepareTimeout passed), resends it every RetryInterval and fences out an
// owner that has not released after ReleaseTimeout.
func (c *Coordinator) advanceMove(p int, now time.Time) {
	pr := &c.parts[p]
	mv := pr.move
	if !mv.releasing {
		dest := c.memberInc(mv.to, mv.toInc)
		if dest == nil || !c.eligible(mv.to) || (c.target != nil && c.target[p] != mv.to) {
			// Nothing was released yet, so calling it off is free.
			c.abortMove(p, now, true)
			return
		}
		if mv.needPrepare {
			mv.needPrepare = false
			c.sendPart(dest, CmdPrepare, p, mv.epoch)
		}
		if !mv.prepared && now.Sub(mv.phaseAt) < c.cfg.PrepareTimeout {
			return
		}
		mv.releasing, mv.phaseAt, mv.lastSent = true, now, time.Time{}
	}
	owner := c.members[pr.owner]
	if mv.lastSent.IsZero() || now.Sub(mv.lastSent) >= c.cfg.RetryInterval {
		mv.lastSent = now
		c.sendPart(owner, CmdRelease, p, mv.epoch)
	}
	if !owner.fencedOut && owner.connected && now.Sub(mv.phaseAt) >= c.cfg.ReleaseTimeout {
		c.fenceOut(owner, now)
	}
}

// retry resends unanswered Acquires and stale-holder Releases.
func (c *Coordinator) retry(now time.Time) {
	for p := range c.parts {
		pr := &c.parts[p]
		if pr.owner != "" && !pr.acked && pr.move == nil && c.recordReady(p) &&
			(pr.lastSent.IsZero() || now.Sub(pr.lastSent) >= c.cfg.RetryInterval) {
			pr.lastSent = now
			c.sendAcquireCmd(p)
		}
		for i := range pr.stale {
			s := &pr.stale[i]
			if s.lastSent.IsZero() || now.Sub(s.lastSent) >= c.cfg.RetryInterval {
				s.lastSent = now
				c.sendPart(c.memberInc(s.shard, s.inc), CmdRelease, p, s.epoch)
			}
		}
	}
}

// completeRelease ends the Release phase of p's move: the owner stopped
// (it said Released, reported it no longer works p, or expired). The
// destination acquires if it is still there; otherwise p is unowned and
// planning grants it.
func (c *Coordinator) completeRelease(p int, now time.Time) {
	pr := &c.parts[p]
	mv := pr.move
	pr.move = nil
	if mv.capped {
		c.movesInFlight--
	}
	c.emit(Event{Kind: EventReleased, At: now, Partition: partition.ID(p), Shard: pr.owner, Epoch: mv.epoch})
	prev := pr.owner
	if dest := c.memberInc(mv.to, mv.toInc); mv.to != "" && dest != nil && c.eligible(mv.to) {
		pr.owner, pr.ownerInc, pr.epoch = dest.id, mv.toInc, mv.epoch
		c.recDirty = true
		pr.acked = false
		pr.refresh = true // prepared while the source still wrote
		pr.freedAt, pr.prevOwner = now, prev
		if mv.capped {
			pr.handoffStart = mv.started
		}
		c.probeMove(p, mv, now)
		c.given(p, mv.reason)
		c.sendAcquire(p, now)
		return
	}
	c.orphan(p, now, now)
	pr.epoch = mv.epoch
	if mv.capped {
		c.stats.MovesAborted++
	}
}

// abortMove calls off p's move before anything was released.
func (c *Coordinator) abortMove(p int, now time.Time, cancel bool) {
	pr := &c.parts[p]
	mv := pr.move
	pr.move = nil
	if mv.capped {
		c.movesInFlight--
		c.stats.MovesAborted++
	}
	if cancel && mv.to != "" {
		c.sendPart(c.memberInc(mv.to, mv.toInc), CmdCancel, p, mv.epoch)
	}
	c.emit(Event{Kind: EventMoveAborted, At: now, Partition: partition.ID(p), Shard: mv.to, From: pr.owner, Epoch: mv.epoch})
}

// orphan leaves p without owner; it may be granted from hold on.
func (c *Coordinator) orphan(p int, now, hold time.Time) {
	pr := &c.parts[p]
	if pr.owner != "" {
		pr.prevOwner = pr.owner
	}
	pr.owner, pr.ownerInc = "", 0
	pr.acked = false
	pr.refresh = false
	if hold.After(pr.holdUntil) {
		pr.holdUntil = hold
	}
	pr.handoffStart = time.Time{}
	if pr.freedAt.IsZero() {
		pr.freedAt = now
	}
}

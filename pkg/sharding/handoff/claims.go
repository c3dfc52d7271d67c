package handoff

import (
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// reconcile merges what a shard reports in its hello with the coordinator's
// records and returns what the shard keeps. It never sends: the Welcome
// must be the first command of the session, so anything to resend is only
// marked here and sent by the next step.
//
// The rules, by what the shard reports for a partition:
//
//   - acquired, and the coordinator has it as the owner: kept.
//   - acquired, unowned here, and no newer epoch known: adopted. This is how
//     a new leader learns ownership; it is safe because a shard reports a
//     partition acquired only while its lease is valid, and nothing was
//     granted to anybody else since that epoch.
//   - acquired with a newer epoch than another owner's: a double claim; the
//     newest wins and the older holder is asked to release.
//   - acquired but older than what is known: dropped. Such a claim can only
//     come from a shard whose lease ran out (that is why it was replaced),
//     and the shard drops it before the Welcome extends its lease.
//   - releasing: always kept, and tracked until Released (or expiry), since
//     in-flight work may still be running.
//   - warming/prepared: kept only if it is the destination of a current
//     move at that epoch, preparing or releasing (or an owner whose Acquire
//     is being resent); dropped otherwise, which tombstones the epoch.
//
// And for partitions the coordinator has the shard owning but the shard
// does not report working: a pending release is complete (it stopped), and
// otherwise the Acquire is sent again.
func (c *Coordinator) reconcile(m *member, held []Held, now time.Time) []Held {
	claimed := make(map[partition.ID]Held, len(held))
	for _, h := range held {
		if int(h.Partition) >= len(c.parts) {
			continue
		}
		if h.Epoch.Term() == c.term && h.Epoch.Counter() > c.counter {
			// An epoch of this term that this leader has not issued was issued by
			// nobody (terms are never reused, see New): a forged claim. Dropped like a
			// stale one, so it can neither take the partition nor run this term's
			// counter out (which would make the leader step down).
			c.stats.StaleClaims++
			continue
		}
		if prev, dup := claimed[h.Partition]; dup && prev.Epoch >= h.Epoch {
			continue
		}
		claimed[h.Partition] = h
	}
	inc := m.session.Incarnation

	// What the coordinator associates with m, seen from m's report.
	for p := range c.parts {
		pr := &c.parts[p]
		h, ok := claimed[partition.ID(p)]
		if pr.owner == m.id {
			working := ok && (h.State == SlotAcquired || h.State == SlotReleasing)
			switch {
			case working:
			case pr.move != nil && pr.move.releasing:
				c.completeRelease(p, now)
			default:
				// It stopped (fenced) or lost the grant: unconfirmed again, so
				// the Acquire is resent once no move is pending (a preparing
				// move away from it may still be called off).
				pr.acked = false
				pr.lastSent = time.Time{}
				// recordWant depends on acked: an unconfirmed owner needs the
				// record enforced for this leader before the Acquire goes out.
				c.recDirty = true
			}
		}
		if mv := pr.move; mv != nil && mv.to == m.id && !mv.releasing && !(ok && h.Epoch == mv.epoch) {
			mv.needPrepare = true
		}
		if mv := pr.move; mv != nil && mv.releasing && pr.owner == m.id {
			mv.lastSent = time.Time{}
		}
		for i := range pr.stale {
			if pr.stale[i].shard == m.id {
				pr.stale[i].lastSent = time.Time{}
			}
		}
	}

	ids := make([]partition.ID, 0, len(claimed))
	for p := range claimed {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	var keep []Held
	for _, id := range ids {
		h := claimed[id]
		p := int(id)
		pr := &c.parts[p]
		switch h.State {
		case SlotAcquired:
			if c.claimAcquired(m, inc, p, h, now) {
				keep = append(keep, h)
			}
		case SlotReleasing:
			c.claimReleasing(m, inc, p, h, now)
			keep = append(keep, h)
		case SlotWarming, SlotPrepared:
			if mv := pr.move; mv != nil && mv.to == m.id && h.Epoch == mv.epoch {
				// Kept in either phase: the Acquire of this epoch follows.
				if h.State == SlotPrepared {
					mv.prepared = true
				}
				keep = append(keep, h)
			} else if pr.owner == m.id && !pr.acked && h.Epoch <= pr.epoch {
				keep = append(keep, h) // warm for the Acquire being resent
			}
		}
	}
	return keep
}

// claimAcquired applies one "acquired" claim and reports whether it is kept.
func (c *Coordinator) claimAcquired(m *member, inc uint64, p int, h Held, now time.Time) bool {
	pr := &c.parts[p]
	switch {
	case pr.owner == m.id:
		switch {
		case h.Epoch == pr.epoch:
			c.ack(p, now)
		case h.Epoch > pr.epoch:
			pr.epoch = h.Epoch
			c.ack(p, now)
		default:
			pr.acked = false // an older grant; the current Acquire is resent
			pr.lastSent = time.Time{}
			c.recDirty = true // as in reconcile: the resend may need a record write
		}
		return true
	case pr.owner == "" && h.Epoch >= pr.epoch:
		c.adopt(m, inc, p, h.Epoch, now)
		return true
	case pr.owner != "" && h.Epoch > pr.epoch:
		old := c.members[pr.owner]
		c.stats.DoubleClaims++
		c.emit(Event{Kind: EventDoubleClaim, At: now, Partition: partition.ID(p), Shard: m.id, From: pr.owner, Epoch: h.Epoch})
		if pr.move != nil {
			c.abortMove(p, now, true)
		}
		pr.stale = append(pr.stale, staleHolder{shard: old.id, inc: old.session.Incarnation, epoch: h.Epoch})
		pr.owner = ""
		c.adopt(m, inc, p, h.Epoch, now)
		return true
	default:
		c.stats.StaleClaims++
		return false
	}
}

// claimReleasing applies one "releasing" claim: the shard is draining and
// must be waited for.
func (c *Coordinator) claimReleasing(m *member, inc uint64, p int, h Held, now time.Time) {
	pr := &c.parts[p]
	switch {
	case pr.owner == m.id && pr.move != nil && pr.move.releasing:
		// A release in progress; it is resent on the new session.
	case pr.owner == m.id && pr.move != nil:
		mv := pr.move
		mv.releasing, mv.phaseAt, mv.lastSent = true, now, time.Time{}
	case pr.owner == m.id || (pr.owner == "" && h.Epoch >= pr.epoch):
		if pr.owner == "" {
			c.adopt(m, inc, p, h.Epoch, now)
		}
		// Releasing something it owns outright (say, a Release of the
		// previous leader): finish that release, with no destination.
		if e, ok := c.nextEpoch(); ok {
			pr.move = &move{epoch: e, releasing: true, started: now, phaseAt: now}
		}
	default:
		for _, s := range pr.stale {
			if s.shard == m.id {
				return
			}
		}
		pr.stale = append(pr.stale, staleHolder{shard: m.id, inc: inc, epoch: max(h.Epoch, pr.epoch)})
	}
}

// adopt makes m the owner of p at epoch e because m reported it.
func (c *Coordinator) adopt(m *member, inc uint64, p int, e Epoch, now time.Time) {
	pr := &c.parts[p]
	pr.owner, pr.ownerInc, pr.epoch = m.id, inc, e
	c.recDirty = true
	pr.acked = true
	pr.refresh, pr.seized = false, false
	// holdUntil is kept: it guards the partition against an older process whose lease
	// may still run (a restarted owner's previous incarnation). A claim reported by a
	// newer incarnation, possibly a replayed epoch, says nothing about that process;
	// should the partition become unowned again, the hold still applies.
	pr.freedAt, pr.prevOwner, pr.handoffStart = time.Time{}, "", time.Time{}
	c.stats.Adoptions++
	c.emit(Event{Kind: EventAdopted, At: now, Partition: partition.ID(p), Shard: m.id, Epoch: e})
}

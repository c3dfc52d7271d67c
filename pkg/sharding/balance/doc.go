// Package balance places partitions by cost (docs/design-placement.md §2,
// issue 31): Plan computes the target owner of every partition from the
// members, the current owners and each partition's cost, objects,
// namespaces, pin and cooldown. It replaces ring.AssignFrom's count quotas
// for partitions that carry work, because the busiest shard sets the tail
// and count quotas ignore what a partition carries.
//
// Plan is pure: no clock (time enters only as Input.Cooling, computed by
// the state machine), no I/O, no randomness, and its result does not depend
// on the order of Input.Members. The state machine (package handoff)
// decides when to plan and applies the target through ordinary handoffs;
// Plan decides what. It runs off the coordinator's lock like the ring.
//
// # Cost
//
// cost(p) = L(p) + λ·N(p) (Costs): load plus a base per namespace, so that
// with no load anywhere the namespace count is what is spread. Partitions
// of cost 0 are the empty class. A domain's fair share is F = Σcost /
// members.
//
// # Domains
//
// Members without a group or in a shared group (Params.SharedGroups) form
// the default domain, which takes unpinned partitions; each other group is
// a dedicated domain that takes only the partitions pinned to it. A
// partition pinned to a shared group is in the default domain but may only
// be held by that group's members. A pin to a group with no member is
// unsatisfied: the partition is placed in the default domain (availability
// over pinning) and counted in DomainStat.UnsatisfiedPins.
//
// # Membership placement (Kind Membership, and the first steps of Balance)
//
//  1. Keep: a cost-bearing partition stays with its current owner while
//     that owner is a member. No member is shed to a quota, so a join moves
//     only toward the new member and a leave only the leaver's partitions.
//  2. Orphans (no owner, or the owner left), in decreasing cost (ties by
//     ID), each to the first member in its ring preference order whose cost
//     + c ≤ F + c/2 within the namespace cap; if none, to the least-loaded
//     member (ties to the earliest in preference order).
//  3. Fill: a New member below F·(1−δ/2), and (in a domain where step 2
//     placed orphans) any member below F, pulls from members above F, the
//     busiest first, each donor giving its least-preferred partition first
//     (largest ring.Built.Distance; fewer objects, then ID, break ties). A
//     New member may pull any partition, the others only this plan's
//     orphans. A partition moves if r + c ≤ F + c/2 and r + c < d.
//  4. Empty class: ring.Built.AssignFrom's count quotas restricted to the
//     class, per set of members allowed to hold it (the default domain, or
//     the pinned group). With all costs 0 and no pin the target is exactly
//     ring.AssignFrom's.
//
// # Load rounds (Kind Balance, budgeted)
//
//  5. Pins: a cost-bearing partition on a member outside its pinned group
//     (or unpinned on a dedicated group's member) moves to the least-loaded
//     member allowed to hold it.
//  6. Hot isolation: a partition above (1 − δ) × HotFactor × F (it carries
//     the fair share within the margin) makes its owner exclusive; every
//     other partition holding a namespace moves off it, fewest objects first,
//     to the least-loaded non-exclusive member. Isolating it leaves the
//     other members a fair share F' of at most F·(1 + δ/(N−1)), which step 7
//     spreads around. A
//     partition already alone (its owner holds no other partition with a
//     namespace) stays hot down to (1 − 2δ) × HotFactor × F: a hysteresis, so
//     that a load hovering near the threshold (one namespace carrying 1/N of
//     the work measures on either side of F) is not isolated and spread onto
//     again round after round.
//  7. Spread over the non-exclusive members, with F' their fair share:
//     triggered when the busiest b > F'·(1+δ) and > MinLoad; moves go to the
//     least-loaded receiver r, need r + c < b (so Σcost² falls by 2c(b−r−c);
//     implied by the next bound while b is above it, and checked anyway),
//     r + c ≤ F'·(1+δ/2) and c ≥ MinGain·F' (smaller c > 0 only when b has
//     no such candidate: many small partitions together may be what b must
//     shed); the c closest to (b−r)/2 wins;
//     it stops at F'·(1+δ/2). The dead band between 1+δ/2 and 1+δ is what
//     keeps a steady load still once spread.
//
// Every budgeted move counts against MaxMoves, 2 × its objects against
// MaxObjects and its cost against MaxCostFraction of its domain's total.
// Cooling partitions are never moved by steps 6 and 7, and suspect or
// saturated members never receive from them.
//
// A saturated member (Member.Saturated: its clients wait in their rate
// limiters) sent less than its partitions asked for: its queues fold events
// and its client budget caps the rest, so its measured cost hides demand, and
// a hot partition on it can measure below the hot threshold (the skewed
// benchmark's 0.78 F at 9.2 s/s of limiter wait). Every plan counts such a
// member's partitions SaturationFactor × their cost, which keeps the spread
// going until it is no longer saturated and lets step 6 see its hot partition. Receivers stay within the namespace-share cap
// (MaxNamespaceShare × the domain's average namespaces per member +
// NamespaceSlack) unless they hold no namespace (a partition alone) or the
// move is a pin.
//
// # Where this differs from the design text
//
//   - Plan returns an error besides the Output (bad lengths, a NaN cost,
//     duplicate or empty member IDs, no ring), as ring.AssignFrom does and
//     handoff.RingRequest.Compute passes on. Input carries the *ring.Ring;
//     Plan builds its virtual nodes once (ring.Built).
//   - Fill's donor condition is r + c < d (the move lowers Σcost²), not
//     "the donor stays above F − c/2": the latter leaves a joining member
//     empty when P/N is small (10 partitions, 5 → 6 members: every donor
//     holds 2 < F + 1/2), where AssignFrom gives it one. The δ/2 threshold
//     only decides whether a New member starts pulling; once it does it
//     pulls while r + c ≤ F + c/2, so equal costs give floor/ceil counts.
//   - Fill also lets any member below F take this plan's orphans, so that
//     preference order does not leave one member short while others hold
//     one more (equal costs: floor/ceil counts after a leave or a first
//     start, as AssignFrom).
//   - Empty partitions are placed within their pin group by step 4 in
//     every plan, unbudgeted: they carry no work.
//   - A member holding several hot partitions keeps the one with the most
//     objects; the others each move to a member of their own (the issue: a
//     hot partition is placed alone).
//   - Hot isolation, like spread, skips cooling partitions; pins do not.
//   - A round's first move is always within budget (MaxMoves permitting),
//     so that a partition with more objects or cost than the per-round
//     budget is not stuck forever.
//   - With no member outside dedicated groups, every group is shared.
package balance

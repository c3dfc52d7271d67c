// Package handoff is kshard's pure sharding state machine: the coordinator
// leader's side (Coordinator) and the shard's side (Shard, Lease). Like
// etcd's raft package it does no I/O, starts no goroutines and reads no
// clock: the edges (gRPC session server and client, the cache layer, the
// fenced work queue, timers) feed it messages with the current time and send
// what it outputs. That is what lets package sim test it by simulation.
//
// # Protocol
//
// A shard opens a session with a Hello reporting everything it holds, and
// keeps it with heartbeats. The coordinator answers the Hello with a Welcome
// (session parameters and which reported partitions the shard keeps) and
// each heartbeat with an Ack. It moves a partition from shard A to shard B
// in three steps, each command carrying a fresh epoch e:
//
//  1. Prepare(e) → B: warm caches, no workers; B answers Prepared (the
//     coordinator goes on after PrepareTimeout without it).
//  2. Release(e) → A: stop taking keys, drain in-flight work, drop caches;
//     A answers Released(e). Resent every RetryInterval; a live A that has
//     not released after ReleaseTimeout is fenced out (its heartbeats are no
//     longer acknowledged) so its lease runs out.
//  3. Acquire(e) → B: work it; B confirms with Acquired (resent until then).
//     The Acquire carries Refresh: B warmed while A still wrote, and B's
//     informers follow separate watches, so one may show A's last writes and
//     another not yet; B lists p again before working it. Upstream's
//     controllers never meet this: a new leader starts with fresh lists.
//     A grant carries none: it is warmed ahead of its owner record only when
//     the last owner cannot write any more (a first grant, an expiry); after
//     a seizure, whose shard may be alive and writing until the record is
//     enforced, the new owner warms once the Acquire comes.
//
// A partition nobody holds (first start, owner expired) gets Acquire
// directly (the shard warms, then works). Epochs are leaderTerm<<32|counter
// and a shard refuses any command older than what it has seen for that
// partition, so delayed commands can never resurrect ownership.
//
// Membership comes from hellos, leaves and expiry. The target assignment is
// ring.AssignFrom of the members (minus leaving and fenced-out ones) and of
// where each partition is now (its owner, or the destination of its move),
// recomputed after Debounce of quiet (at most MaxDebounce after the first
// change). It keeps partitions where they are as far as balance allows, so
// a join moves only the new shard's share, a leave only the leaver's
// partitions, and a new leader that adopted the owners from hellos moves
// nothing;
// at most MaxConcurrentMoves moves are in flight, partitions of leaving
// shards first. A leaving shard gets Farewell once it holds nothing.
//
// With Config.Balance.Placement = PlacementLoad the target is balance.Plan
// instead (docs/design-placement.md §2), computed through the same request:
// a Membership plan on each membership change, which spreads cost (the load
// shards report on their heartbeats plus a base per namespace, from
// SetNamespaces) and never sheds a member to a quota, and, with
// Balance.Enabled, a budgeted load round once per Balance.Interval while
// nothing moves and every member has reported. The coordinator decides when
// and applies; Plan decides what. Every move is an ordinary handoff, and
// Event.Reason and Stats.Balance say why it moved. A load report never
// refuses its heartbeat: what is absurd or not held is dropped and counted.
//
// # The invariant: no partition is worked by two shards at any instant
//
// A shard works p at local time t iff it holds p acquired (or is still
// draining it after a Release) and t < its lease deadline. The coordinator
// keeps, per partition, the set of shards that may be working it: the owner
// and any shard still being asked to release. It grants p to anybody else
// only when that set is empty, and a shard leaves the set only when
//
//	(a) it reported Released (it has stopped, in-flight work included, and
//	    will not work p again without an Acquire newer than the Release), or
//	(b) its lease has certainly run out: coordinator time ≥ last Hello or
//	    Heartbeat received + TTL + Margin, after which the coordinator never
//	    acknowledges that session again.
//
// Rule (b) is sound under bounded clock-rate drift ρ. The shard's deadline
// is send time of its latest acknowledged heartbeat + TTL on its own clock;
// the coordinator's expiry is the receive time of its latest heartbeat +
// TTL + Margin on its clock. Let S be the true send time of the acknowledged
// heartbeat with the latest deadline; it was received at R ≥ S, and the
// coordinator's last receive time is ≥ R. The shard reaches its deadline no
// later than S + TTL/(1−ρ) true time; the coordinator reaches expiry no
// sooner than R + (TTL+Margin)/(1+ρ). So expiry follows the deadline when
//
//	Margin ≥ TTL·2ρ/(1−ρ)        (MinMargin; Config.Validate enforces it)
//
// plus whatever time the shard's workers need to actually stop once the
// deadline passes. No timestamp crosses the wire: heartbeats carry a
// sequence number, the shard remembers its own send time, so clock offsets
// do not matter, only rates. A heartbeat the coordinator receives after it
// expired the session is answered with SessionEnded, never an Ack.
//
// Sessions. Every command names the session (incarnation, hello sequence)
// it belongs to, and a shard acts only on commands of its current session,
// and only after that session's Welcome. A shard switches sessions when it
// sends a Hello, so what an old stream or a deposed leader still delivers
// afterwards is ignored; the Hello is a snapshot of everything the shard
// may be working at that point. The Welcome drops every reported partition
// the coordinator does not keep before it extends the lease, and
// acknowledgements only ever come from the session's coordinator.
//
// New leader. A leader of term T starts empty and, until TTL + Margin after
// it became leader, grants nothing; it adopts what hellos report. Any shard
// working a partition under the previous leader either reports it (and is
// adopted) or stops working by then, because the previous leader stopped
// acknowledging before T started (leader election guarantees that; the
// edge must stop the coordinator the moment leadership is lost) and rule
// (b)'s arithmetic applies to that last acknowledgement. Two claims of one
// partition are resolved for the newest epoch; the older holder is asked to
// release and is waited for like any holder.
//
// Why a fenced shard demotes. When its lease runs out a shard demotes its
// acquired partitions to prepared (keeping caches) and says Hello again; it
// reports partitions as acquired only while its lease is valid. Otherwise a
// shard that was expired (and replaced) under one leader could report its
// stale ownership to the next leader before the replacement does, be
// adopted, and work alongside it. The simulation finds exactly that when
// this rule is removed.
//
// A restarted process (higher incarnation) replaces the old session at
// once, but partitions of the old incarnation become grantable only when
// its lease has run out, in case the old process is not as dead as assumed.
//
// # What the edges must guarantee
//
//   - The shard reads now from a monotonic clock and stops every worker at
//     Deadline() without waiting to be called; each reconcile should run
//     with a context bounded by the deadline. Margin must cover the longest
//     time a worker may still act after the deadline (a write in flight).
//     A process paused between its last deadline check and an API write
//     (GC pause, SIGSTOP) can still issue that write late: only a fencing
//     token checked by the API server would close that window.
//   - The coordinator edge stops feeding and sending the moment leadership
//     is lost, and a new leader uses a strictly larger term.
//   - Shard incarnations grow across restarts of one shard ID.
//   - After every call the edge drains Outbox (and Events, Actions).
//
// Liveness needs a network that eventually delivers, shards that answer,
// and a leader that stays: then every partition is worked again within
// about 2·(TTL+Margin) + MaxDebounce of the last fault, and the assignment
// converges to the ring target (package sim measures both).
package handoff

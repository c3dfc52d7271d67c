// Package gate is the ownership gate of a kshard shard: which partitions it may work,
// until when, and the fenced work queues and write fence that enforce it.
//
// A shard works only the namespace partitions it has acquired from the coordinator, and
// the most important invariant of kshard is that no two shards ever work the same
// partition at the same instant (two ReplicaSet workers on one namespace create duplicate
// pods). Controllers, however, are ported from kube-controller-manager and must not know
// about sharding. This package closes that gap: each controller gets a [Queue] (or
// several, one per kind of key it works), which implements client-go's
// workqueue.TypedRateLimitingInterface[string] and is built on client-go's own typed
// rate-limiting queue, and all queues of a shard share one [Gate] that knows which
// partitions are acquired and whether the shard is fenced.
//
// The Gate enforces, for every queue at once:
//
//   - Admission: Add, AddAfter and AddRateLimited drop keys of partitions that are not
//     acquired, so a shard never even queues foreign work.
//   - Start: Get hands a key to a worker only if, at that instant and under the Gate's
//     lock, its partition is acquired and the shard is not fenced; the same critical
//     section marks the key in flight. Release takes the same lock to revoke a partition,
//     so there is no window between "Get checked" and "in flight recorded" in which a
//     Release could slip through unnoticed.
//   - Release: Gate.Release revokes a partition (no new adds, no new starts), waits until
//     every in-flight key of it in every queue is Done, then forgets the rate-limiter
//     state of its keys. Only after Release returns nil may the shard answer Released to
//     the coordinator.
//   - Fencing: past the shard's session lease deadline (Gate.SetDeadline), Get starts no
//     work at all, checked against the clock at every Get.
//   - The write fence: beside the queues, FenceTransport lets an API write of the
//     controllers' clients leave only while the lease is valid and the request's
//     namespace belongs to a partition the shard holds: acquired, or draining after a
//     Release. The lease alone is not enough: after a lapse and a new welcome it is valid
//     again, while a partition revoked meanwhile may be worked elsewhere.
//   - Revocation: Revoke (a lapse, a demotion, a dropped partition) ends the partition's
//     tenure at once: its reconciles' contexts (Queue.KeyContext, which the controllers'
//     worker loop uses) and its writes in flight are cancelled, and new writes are refused.
//     Its in-flight count still falls only as the work returns, and a Release of it waits
//     for that, so the shard answers Released only when none of its work runs.
//
// # Observing the work
//
// A Gate made WithObserver tells its [Observer] (the shard's load meter) of every
// partition it starts and stops holding and of every completed reconcile, once per
// Queue.Done; Queue.KeyContext marks each reconcile's context with its partition
// ([PartitionFrom]), so that the reconcile's API requests can be told apart by partition
// where the URL alone does not say (the wait in the client's rate limiter).
//
// # Stale keys
//
// client-go's queue cannot remove an arbitrary queued item, and this package
// deliberately does not reimplement the queue. Keys of a released partition therefore
// stay inside the underlying queue (ready, or waiting in its delay heap) until a worker
// pulls them; Get then discards them (Done and Forget) instead of returning them. They
// never start work: Get re-checks the partition under the Gate's lock. Until they are
// pulled they are counted by client-go's depth metric; [QueueStats].Stale reports how
// many of the queued keys are such stale keys, so depth can be read as live work plus
// stale work. Discarded keys also show up in client-go's work-duration histogram as
// near-zero observations, because to client-go they were processed.
//
// # Metrics
//
// [Gate.RegisterMetrics] exports, per queue, what client-go's workqueue metrics cannot
// show (kshard_workqueue_dropped_total, _discarded_total, _stale_keys, _pending_keys,
// _in_flight_keys, labelled with the queue name as client-go's are), and the writes the
// fence stopped (kshard_shard_refused_writes_total{reason}).
package gate

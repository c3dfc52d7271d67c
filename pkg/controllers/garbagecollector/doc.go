// Package garbagecollector is kshard's garbage collector ("garbagecollector", the alias of
// kube-controller-manager's garbage-collector-controller), equal in behaviour to
// kube-controller-manager 1.37's within one shard: it deletes objects whose owners are
// gone, deletes the dependents of owners deleted in the foreground before letting the
// owner go, and orphans the dependents of owners deleted with the orphan finalizer.
//
// The graph. The shard hands the controller every served resource that supports delete,
// list and watch (events excepted) with its informer (Added, Removed). Their events feed
// one graph builder goroutine, which keeps a graph of nodes by UID with their owners and
// dependents. An owner named by a dependent and not observed is a virtual node, queued
// for a live check; a virtual node observed later takes the observed identity. The graph
// holds the shard's namespaces' objects and every cluster-scoped object (cluster-scoped
// informers are whole).
//
// The queues. attemptToDelete and attemptToOrphan are the shard's gated queues, keyed
// "<namespace>/<uid>", or "<uid>" for cluster-scoped nodes, so that the gate maps a node
// to its namespace's partition or to the cluster partition; the graph changes queue is
// internal. An attemptToDelete worker reads the object live through the shard's metadata
// client, reads every owner live (or in the bounded cache of owners known absent), and
// deletes the object when every owner is gone or waiting for its dependents, with a UID
// and resourceVersion precondition and the propagation its finalizers ask for. An
// attemptToOrphan worker patches the owner's reference out of its dependents, then
// removes the orphan finalizer. Namespaced writes are fenced server-side as well as by
// the shard's gate; cluster-scoped writes too: the shard's gate and the fence policy
// refuse them unless the shard holds the cluster partition, and the shard limits policy
// restricts cluster-scoped deletes and updates to the garbage collector's.
//
// Starting work. The shard warms a partition's stores before it holds it, so the graph
// builder's queue adds for it are dropped by the gate; Resync (controllers.Resyncer)
// replays them once the partition is held. Objects whose owners were deleted while no
// garbage collector ran are collected then, as a fresh kube-controller-manager collects
// them at start.
//
// Across shards. A cluster-scoped owner O is observed by every shard (cluster-scoped
// informers are whole), but its key "<uid>" is worked only by S_c, the holder of the
// cluster partition, and its namespaced dependents live in whichever shards' namespaces.
// Background deletion needs nothing more: every shard sees O go and collects its own
// dependents. For foreground and orphan deletion:
//
//   - Foreground. Every shard that sees O's transition to foreground deletion queues its
//     own dependents of O in attemptToDelete (keyed "<ns>/<uid>", admitted on their own
//     shard), as upstream's graph does, and so does a shard that observes a dependent of
//     O after the transition or replays it on Resync. They are deleted there, O being
//     "waiting for its dependents". S_c alone removes foregroundDeletion: when its graph
//     shows no blocking dependent, it asks RemoteDependents.
//   - Orphan. Every shard that sees O's transition to deletion with the orphan finalizer
//     queues its own dependents of O in attemptToOrphan, keyed by the dependent (its
//     wantOrphanRefs bit), likewise for a dependent observed later or replayed by Resync;
//     the worker removes from the dependent its references to every cluster-scoped owner
//     that is orphaning. S_c works O's own item as upstream (orphaning the dependents its
//     graph holds, a repeat of their shards' patch for its own namespaces) and removes
//     the orphan finalizer only once RemoteDependents says no reference is left.
//
// RemoteDependents is a sweep (sweeper): a paginated (500), consistent (no
// resourceVersion) metadata list, cluster-wide, of every namespaced resource served to
// the controller, looking for an object whose owner references name O's UID, with
// blockOwnerDeletion for foregroundDeletion, any for orphan. Found: pending, and O is
// requeued after 1 s, doubling to 30 s while it stays pending. A resource whose list
// answers 503 (an aggregated API whose backend is down) or 404 (no longer served) is left
// out, as upstream's graph leaves out a resource whose monitor could not sync: otherwise
// one broken aggregated API would stall every cluster-scoped owner's foreground and
// orphan deletion. Any other failure (a timeout, 429, a 500) makes the answer an error,
// retried with backoff: the finalizer never goes on a sweep cut short. Each resource's
// list (every page of it) is bounded by 2 minutes, and restarted from the beginning once
// when its continue token expires (410 Gone). Concurrent callers join the next sweep to
// start after they asked; one sweep answers every owner that joined it, and a sweep that
// had already started never answers a later caller. Sweeps never run back to back: one
// starts no earlier than max(2 s, twice the last sweep's duration) after the last one
// started. Until the shard has handed every served resource over, a sweep could miss
// the one holding a reference: the sweep answers an error until the controller's first
// Resync (the shard calls it only after its first discovery round) and while no
// namespaced resource is known.
//
// The invariant: S_c removes foregroundDeletion from a cluster-scoped owner O only
// after (i) its own graph showed no blocking dependent of O, and then (ii) a list of
// every namespaced served resource (but those not served then), each begun after (i), found no object with a
// blocking reference to O; for orphan, (i) its graph's dependents were orphaned and (ii)
// found no reference at all. Each list is a consistent read, so a blocking dependent
// (a reference) still present at removal did not exist, or did not block, when its
// resource was listed: it was created or made blocking after that list, the race
// upstream has between a create and its informer's event (and, as upstream, it is
// collected as dangling once O is gone). Nothing else brings one back: dependents are
// removed, or lose their references, only through their own shards, and the garbage
// collector never adds a reference. Conversely S_c asks again 1 s to 30 s after each
// pending answer, so the finalizer goes within one wait, the gap between sweeps and one
// sweep of the last blocking dependent (reference) going: exactly when it is gone, as
// far as any shard can tell.
//
// The cost: one cluster-wide metadata list per namespaced served resource (⌈objects/500⌉
// pages) per sweep, batched over every owner waiting, and only for cluster-scoped owners
// in foreground or orphan deletion, which are rare; one sweep per wait while remote
// dependents remain (1 s to 30 s apart, and sweeps start at least max(2 s, twice the
// last sweep's duration) apart). Background deletion and namespaced owners cost
// nothing more.
//
// Moves and failures. The decision reads only the API server and S_c's own graph: a
// namespace's partition that moves, or a shard that is killed, changes who deletes or
// orphans the remote dependents, never whether the sweep sees them. The dependents'
// new shard (a move, or the seizure of a killed shard's partitions) queues them when it
// observes them during warm-up, and Resync queues them again once the partition is held
// (the gate dropped the first adds). If the cluster partition moves or S_c dies, the
// new holder's Resync queues O again (its want bit) and it sweeps from scratch: no state
// is handed over.
//
// Metrics. garbagecollector_controller_resources_sync_error_total is registered under
// upstream's name; discovery is the shard's, which counts it through
// Controller.DiscoveryFailed.
package garbagecollector

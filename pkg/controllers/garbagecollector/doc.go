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
// internal. An attemptToDelete worker reads the object live through the fenced metadata
// client, reads every owner live (or in the bounded cache of owners known absent), and
// deletes the object when every owner is gone or waiting for its dependents, with a UID
// and resourceVersion precondition and the propagation its finalizers ask for. An
// attemptToOrphan worker patches the owner's reference out of its dependents, then
// removes the orphan finalizer.
//
// Starting work. The shard warms a partition's stores before it holds it, so the graph
// builder's queue adds for it are dropped by the gate; Resync (controllers.Resyncer)
// replays them once the partition is held. Objects whose owners were deleted while no
// garbage collector ran are collected then, as a fresh kube-controller-manager collects
// them at start.
//
// Cluster-scoped owners. Their dependents may live in other shards' namespaces. Background
// deletion needs nothing more: every shard sees the owner go and collects its own
// dependents. Foreground and orphan deletion need the cross-shard barrier of
// docs/design-gc-quota.md §3.4 before the owner's finalizer goes; the controller asks a
// RemoteDependents for it, whose default (ConservativeRemote) never allows it yet.
//
// Metrics. garbagecollector_controller_resources_sync_error_total is registered under
// upstream's name; discovery is the shard's, which counts it through
// Controller.DiscoveryFailed.
package garbagecollector

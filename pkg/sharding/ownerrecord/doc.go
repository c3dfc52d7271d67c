// Package ownerrecord is kshard's server-side fence: the API server itself refuses a write
// by a shard to a namespace that shard does not own, so that a shard process paused
// between its last ownership check and the moment its request reaches the API server
// (GC pause, SIGSTOP, a partitioned node) cannot write late into a namespace another
// shard now works, and so that a dead shard's namespaces can be given away without
// waiting out its lease.
//
// The fence has three parts, all in this package:
//
//   - The owner record. Every Namespace carries an owner label (PolicyParams.OwnerLabel,
//     default kshard.io/owner) naming the shard (its pod name) that owns the namespace's
//     partition, and, in the annotation <label>-term, the coordinator term that wrote it.
//     Labeler keeps the labels equal to the coordinator leader's owner table: Set writes
//     the namespaces of a batch of moved partitions at once, and a background loop
//     labels namespaces created later and puts back a label somebody changed. Every
//     write has the namespace's resourceVersion as precondition and is sent only while
//     the leader's Tenure is valid, so a deposed leader's late write cannot undo its
//     successor's. A term annotation above the writer's own is written over: while the
//     writer's tenure is valid no live leader can have written it.
//
//   - The policy. A ValidatingAdmissionPolicy without params (Policy, Binding with
//     validationActions [Deny], failurePolicy Fail) matches CREATE, UPDATE and DELETE of
//     namespaced resources (and their subresources) made by the shard ServiceAccount
//     only, and allows one only when the namespace's owner label (namespaceObject, from
//     the API server's Namespace informer) equals the authentication.kubernetes.io/pod-name
//     extra of the request's bound ServiceAccount token. The chart renders the same
//     objects (test/integration/chart checks that it does).
//
//   - The wait. A new owner must not act before the API server enforces its label, and
//     the coordinator must not tell it to act before the old owner is refused. Fence.Apply
//     writes a batch and then probes (Prober: a server-side dry-run Event created as the
//     probe user, PolicyParams.ProbeUser, with the shard's pod-name extra, by
//     impersonation) the namespace with the newest write until the new owner is let
//     through and a sentinel shard that no record names is refused: the API server's
//     Namespace informer applies events in resourceVersion order, so it then has every
//     write of the batch, and the policy is in force.
//
//   - The guards (guards.go). RecordPolicy keeps the owner label and term annotation of
//     every Namespace the coordinator's alone, on every path (namespaces/status and
//     namespaces/finalize included), and the coordinator to those two keys. LimitsPolicy
//     refuses the shard ServiceAccount's deletes of cluster-scoped objects and everything
//     of the probe user but a dry-run Event create: the coordinator impersonates that
//     user, never the shards.
//
//   - The check (check.go). No policy can guard the admission configuration itself, so a
//     deleted or changed binding switches the fence off silently. Checker, run by every
//     coordinator replica, watches the fence's policies and bindings, exports
//     kshard_fence_enforced and kshard_fence_check, and records FenceNotEnforced /
//     FenceRestored Events on the coordinators' election Lease.
//
// Why the owner is on the Namespace and not in a params object: a first version kept a
// partition → owner ConfigMap as the policy's params. The API server (1.37) resolves a
// binding's params before it evaluates matchConditions, for every matched request of every
// user: while the param informer was not synced (right after the policy was loaded, or on
// a loaded API server) every namespaced write in the cluster failed ("failed to configure
// binding", seen on the local control plane) under failurePolicy Fail, and was let through
// unfenced under Ignore; a missing ConfigMap costs a GET per request; and the API server's
// param informer can freeze when bindings come and go (kubernetes#130887). Without params,
// another user's request stops at the match conditions, which cannot fail, so the policy
// can fail closed. The price is one write per namespace of a moved partition instead of
// one per batch.
//
// What is not fenced, on purpose:
//
//   - Events (core/v1 and events.k8s.io), unless sent as a dry run. A shard's event
//     recorder sends events asynchronously, often after the reconcile that made them has
//     ended; a late event is an informative record, not a competing write to a
//     workload. Dry-run events are fenced because they are the probe.
//   - Cluster-scoped requests (the match is Namespaced). Namespaces, Nodes and the like
//     are worked through partition.ClusterKey's partition, which a namespace's label
//     cannot express. A shard may not delete them at all (LimitsPolicy), nor change a
//     Namespace's owner record (RecordPolicy); it may update namespaces/status and
//     namespaces/finalize of any Namespace otherwise.
//   - Requests of every other user, including the coordinator (which writes the labels)
//     and the namespace controller.
//
// docs/architecture.md lists what a shard's credentials can still do: the fence promises
// that no stale owner's write lands, not that a compromised shard is contained.
//
// A namespace without the label (created a moment ago, before the Labeler saw it) refuses
// every shard write until it is labelled.
package ownerrecord

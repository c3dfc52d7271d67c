// Package ownerrecord is kshard's server-side fence: the API server itself refuses a write
// by a shard to a namespace that shard does not own, so that a shard process paused
// between its last ownership check and the moment its request reaches the API server
// (GC pause, SIGSTOP, a partitioned node) cannot write late into a namespace another
// shard now works, and so that a dead shard's namespaces can be given away without
// waiting out its lease.
//
// The fence has these parts, all in this package:
//
//   - The owner record (record.go, labeler.go, roles.go, namespaces.go). Ownership is
//     RBAC in kshard's namespace: shard S owns partition P when the owner subject of S
//     (the ServiceAccount name OwnerRolePrefix+S there, which no credential authenticates
//     as) may OwnVerb PartitionsResource P. Each shard that owns anything has one owner
//     Role listing its partitions and one RoleBinding; every Namespace carries the
//     partition its name hashes to (PolicyParams.PartitionLabel, default
//     kshard.io/partition), written once. Labeler keeps both equal to the coordinator
//     leader's owner table: Set writes a batch of moved partitions as one Role write per
//     shard involved (removals before grants), whatever the number of namespaces; a
//     namespace loop labels namespaces as they appear; a Role/RoleBinding informer puts
//     back what somebody changed. Every Role write carries the writer's term
//     (TermAnnotation) and the Role's resourceVersion as precondition, and is sent only
//     while the leader's Tenure is valid, so a deposed leader's late write cannot undo its
//     successor's. A term above the writer's own is written over: while the writer's
//     tenure is valid no live leader can have written it. The term beacon (TermRoleName)
//     keeps the term of a leadership that wrote no owner Role.
//
//   - The policy. A ValidatingAdmissionPolicy without params (Policy, Binding with
//     validationActions [Deny], failurePolicy Fail) matches CREATE, UPDATE and DELETE of
//     namespaced resources (and their subresources), and UPDATE and DELETE of
//     cluster-scoped ones, made by the shard ServiceAccount only, and allows one only
//     when the API server's authorizer (CEL's authorizer.serviceAccount) lets the owner
//     subject of the request's authentication.kubernetes.io/pod-name extra own the
//     request's partition, the one the shard's gate maps it to: the partition in the
//     namespace's label (namespaceObject, from the API server's Namespace informer); a
//     Namespace's own label for its subresources (namespaces/status and
//     namespaces/finalize: the namespace controller); the cluster partition
//     (PolicyParams.ClusterPartition, the partition of partition.ClusterKey) for every
//     other cluster-scoped object, Namespaces themselves included (the garbage
//     collector's). The chart renders the same
//     objects, the cluster partition computed from its partitions value
//     (test/integration/chart checks that it does).
//
//   - The wait. A new owner must not act before the API server enforces its Role, and the
//     coordinator must not tell it to act before the old owner is refused. Fence.Apply
//     writes a batch, then asks the authorizer (LocalSubjectAccessReviews, review.go)
//     until every new owner is allowed its partitions and a sentinel shard is not: the
//     authorizer sees Role changes in resourceVersion order and Set writes every removal
//     before any grant, so the old owners are refused by then. A dry-run Event probe
//     (Prober, as the probe user PolicyParams.ProbeUser with the new owner's pod-name
//     extra, by impersonation) then shows the policy itself in force.
//
//   - The guards (guards.go). RecordPolicy keeps the owner record the coordinator's alone
//     — the partition label on every path (namespaces/status and namespaces/finalize
//     included), the owner Roles, their RoleBindings and any binding of an owner subject
//     — and the coordinator to the record, in the record's shape (never an owner rule
//     without resourceNames, which would grant every partition). LimitsPolicy refuses the
//     shard ServiceAccount's deletes of cluster-scoped objects (but the garbage
//     collector's: objects with owner references, never a Namespace), its updates of
//     cluster-scoped objects that do more than remove owner references or finalizers
//     (namespaces/status and namespaces/finalize aside), and everything of the probe user
//     but a dry-run Event create: the coordinator impersonates that user, never the
//     shards.
//
//   - The check (check.go). No policy can guard the admission configuration itself, so a
//     deleted or changed binding switches the fence off silently. Checker, run by every
//     coordinator replica, watches the fence's policies and bindings, exports
//     kshard_fence_enforced and kshard_fence_check, and records FenceNotEnforced /
//     FenceRestored Events on the coordinators' election Lease.
//
// Why the owner is in RBAC and not in a params object or on the Namespaces: a first
// version kept a partition → owner ConfigMap as the policy's params. The API server (1.37)
// resolves a binding's params before it evaluates matchConditions, for every matched
// request of every user: while the param informer was not synced (right after the policy
// was loaded, or on a loaded API server) every namespaced write in the cluster failed
// ("failed to configure binding", seen on the local control plane) under failurePolicy
// Fail, and was let through unfenced under Ignore; and the API server's param informer can
// freeze when bindings come and go (kubernetes#130887). A second version kept the owner in
// a label on every Namespace: a seizure of a shard's 2,500 namespaces (10,000 in the
// cluster, 4 shards) then took 2,500 label PATCHes, 8.6–17 s on this machine, before any
// Acquire could leave. RBAC is read by the API server's authorizer from informers synced
// before it serves, needs no params, and a move costs a few Role writes.
//
// What is not fenced, on purpose:
//
//   - Events (core/v1 and events.k8s.io), unless sent as a dry run. A shard's event
//     recorder sends events asynchronously, often after the reconcile that made them has
//     ended; a late event is an informative record, not a competing write to a
//     workload. Dry-run events are fenced because they are the probe.
//   - Creates of cluster-scoped objects: shards make none (their RBAC grants no
//     cluster-scoped create but access reviews, which store nothing). What a shard may
//     do to cluster-scoped objects at all is bounded by shape as well as by owner: it
//     may delete only those that have owner references and are not Namespaces, and
//     update them only to remove owner references or finalizers (LimitsPolicy: the
//     garbage collector's writes), nor change a Namespace's partition label
//     (RecordPolicy).
//   - Requests of every other user, including the coordinator (which writes the record)
//     and the namespace controller.
//
// docs/architecture.md lists what a shard's credentials can still do: the fence promises
// that no stale owner's write lands, not that a compromised shard is contained.
//
// A namespace without the partition label (created a moment ago, before the Labeler saw
// it) refuses every shard write until it is labelled.
//
// A binding that grants the verb own on partitions.kshard.io to a group every owner
// subject belongs to (system:serviceaccounts, system:serviceaccounts:<namespace>,
// system:authenticated is not one) or to * would let every shard write everywhere: the
// sentinel's review (Fence.Apply) then fails and moves wait, which the coordinator logs.
package ownerrecord

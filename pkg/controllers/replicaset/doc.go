// Package replicaset is kshard's ReplicaSet controller ("replicaset"), equal in behaviour to
// kube-controller-manager's: it creates and deletes pods so that each ReplicaSet has
// spec.replicas active pods, and reports their counts in its status.
//
// One sync of a ReplicaSet:
//
//  1. Claim pods: the ReplicaSet's own pods and its namespace's orphans, adopting orphans its
//     selector matches and releasing owned pods it no longer matches (internal/claim). Pods
//     controlled by someone else are never touched; pods being deleted and Succeeded or
//     Failed pods are not active and do not count.
//  2. Unless it is being deleted or earlier creates/deletes have not been observed yet
//     (expectations), create missing pods in slow-start batches (1, 2, 4, … stopping at
//     the first failing batch) or delete surplus pods, at most 500 per sync, choosing the
//     pods to delete as upstream ranks them (rank.go).
//  3. Write the status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
//     terminatingReplicas, observedGeneration and the ReplicaFailure condition) and requeue
//     when a ready pod will turn available after minReadySeconds.
//
// Expectations (internal/expectations) make informer lag harmless: after creating n pods the
// controller does not manage the ReplicaSet again until it has seen n pod additions (or a
// create failed, or five minutes passed); deletions are tracked per pod. Under sharding the
// shard's cache emits deletes for every object of a namespace that moves away, which drops
// that ReplicaSet's expectations; a deletion already visible in the cache counts as
// observed at every sync, so expectations left behind by a sync that raced a handoff
// cannot hold a ReplicaSet back after the namespace comes back.
//
// As kube-controller-manager 1.37 does (StaleControllerConsistencyReplicaSet), a sync also
// waits until the pod and ReplicaSet caches have reached the resourceVersions of the
// controller's own last writes for that ReplicaSet (internal/consistency): it fails and is
// retried with backoff instead of acting on a cache older than what it wrote.
//
// The controller serves a Kind (kind.go): ReplicaSets (New), or, as kube-controller-manager's
// replication manager wraps its ReplicaSet controller, core/v1 ReplicationControllers
// presented as ReplicaSets (package replicationcontroller calls NewForKind). The Kind
// supplies the group/version/kind of the pods' controllerRef, the informer, a lister and
// client that present the kind's objects as ReplicaSets, and the object events are
// recorded on; the logic above is the same for both.
package replicaset

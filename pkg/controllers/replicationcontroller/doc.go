// Package replicationcontroller is kshard's ReplicationController controller
// ("replicationcontroller"), equal in behaviour to kube-controller-manager's replication
// manager: it keeps spec.replicas pods of each core/v1 ReplicationController and reports
// them in its status.
//
// As upstream, it is the ReplicaSet controller (package replicaset) serving another kind:
// this package supplies only the replicaset.Kind of ReplicationControllers, which presents
// each one as a ReplicaSet (its map selector as matchLabels, its template, replicas,
// minReadySeconds and status) and writes statuses back as ReplicationControllers. So
// creation in slow-start batches, deletion ranking, adoption and release by the selector,
// expectations, the ReplicaFailure condition and the events (SuccessfulCreate,
// SuccessfulDelete, FailedCreate, FailedDelete, recorded on the ReplicationController by
// the component "replication-controller") are the ReplicaSet controller's, with pods
// controlled by kind ReplicationController. Differences to ReplicaSets, as upstream:
// the status has no terminatingReplicas, and a pod is selected by the map selector
// (an empty one selects nothing; the API server defaults it from the template's labels).
package replicationcontroller

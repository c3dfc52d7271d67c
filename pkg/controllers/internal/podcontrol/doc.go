// Package podcontrol creates and deletes an owner's pods the way kube-controller-manager's
// pod control does for the ReplicaSet, ReplicationController, DaemonSet and Job
// controllers: a pod built from the owner's template (its labels, annotations,
// finalizers and spec, the owner as controller, a generated name), and upstream's events
// on the owner: SuccessfulCreate / FailedCreate ("Created pod: …", "Error creating: …",
// none when the namespace is terminating) and SuccessfulDelete / FailedDelete ("Deleted
// pod: …", "Error deleting: …", none when the pod is already gone).
//
// It is one copy of what those controllers had written each for itself; the StatefulSet
// controller, whose pods have fixed names and whose events are worded otherwise, has its
// own. The package holds no state but the client and the recorder it is given, and knows
// nothing about sharding: the caller records its writes (consistency) itself.
package podcontrol

// Package disruption is kshard's PodDisruptionBudget controller ("disruption"), equal in
// behaviour to kube-controller-manager 1.37's disruption controller: it keeps the status
// of every PodDisruptionBudget (currentHealthy, desiredHealthy, expectedPods,
// disruptionsAllowed, disruptedPods, observedGeneration and the DisruptionAllowed
// condition) that the API server's eviction subresource reads to allow or refuse an
// eviction, and it resets the DisruptionTarget condition of pods that an eviction marked
// but that were never deleted.
//
// A budget's sync lists the pods its selector matches in its namespace. With an integer
// minAvailable the expected pods are the pods found; with a percentage minAvailable or
// any maxUnavailable they are the sum of the scales of the pods' controllers, found
// through the pods' controller references: a ReplicationController, a ReplicaSet's
// Deployment, a ReplicaSet, a StatefulSet (all from the shard's caches), and any other
// kind through its scale subresource (a GET through the controller's fenced client,
// mapped by discovery, so that a custom resource with a scale subresource counts). Pods
// without a controller are reported with an UnmanagedPods event. A pod counts as healthy
// when it is Ready, not being deleted and not listed in disruptedPods (the pods the
// eviction subresource allowed to go, given two minutes to be deleted); an entry whose
// pod was not deleted in that time is dropped with a NotDeleted event on the pod, and the
// budget is checked again when its earliest entry expires (the further queue
// "disruption_recheck"). A sync that fails sets disruptionsAllowed to 0 and the condition
// to False SyncFailed, so evictions are refused while the status is unknown.
//
// A pod whose DisruptionTarget condition is True but which is not terminating two minutes
// after the condition's transition (the eviction was allowed, then the delete failed) gets
// the condition set to False through the further queue "stale_pod_disruption"; conditions
// the kubelet set (reason TerminationByKubelet) and pods in a terminal phase are left.
//
// Everything a budget needs lives in its namespace, so the controller is sharded by
// namespace like the others: when a namespace arrives the shard queues every budget of it
// (which rebuilds the recheck times) and every pod (whose stale conditions are found
// again). Events are recorded as upstream's are, by the component "controllermanager".
package disruption

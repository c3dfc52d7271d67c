// Package podgc is kshard's pod garbage collector ("podgc",
// pod-garbage-collector-controller), equal in behaviour to kube-controller-manager 1.37's:
// it force-deletes (grace period 0) terminated pods above --terminated-pod-gc-threshold
// (12500; 0 switches that off), oldest first with evicted pods before the others;
// terminating pods on a node that is not ready and tainted
// node.kubernetes.io/out-of-service; pods bound to a node that no longer exists, after a
// 40 s quarantine of the node name and a live read that finds it gone, with a
// DisruptionTarget condition (DeletionByPodGC, "PodGC: node no longer exists"); and
// terminating pods never scheduled. A pod not yet Succeeded or Failed is patched Failed
// first, as upstream does. Metrics: pod_gc_collector_force_delete_pods_total and
// pod_gc_collector_force_delete_pod_errors_total{namespace,reason}.
//
// Under sharding each shard collects the pods of its own namespaces: its queue holds pod
// keys, added by pod events, by node events (a node deleted, or become not ready and
// out-of-service: the pods on it, through an index of pods by spec.nodeName) and by
// upstream's 20 s pass, which queues every cached pod that may need collecting. The
// quarantine is the pod key queued again for its end.
//
// The threshold is the cluster's, not a share per shard: every shard caches every
// terminated pod of the cluster (a field-selected informer, controllers.Resource's
// FieldSelector), counts them at each pass, orders them as upstream does and queues the
// keys above the threshold; its queue admits those of its own namespaces, whose syncs
// delete them. Every shard computes the same set from the same view, so together they
// delete exactly the cluster's excess, as one upstream controller would (docs/controllers.md).
package podgc

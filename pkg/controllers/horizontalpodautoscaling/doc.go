// Package horizontalpodautoscaling is kshard's horizontal pod autoscaler
// ("horizontalpodautoscaling"), equal in behaviour to kube-controller-manager 1.37's: every
// --horizontal-pod-autoscaler-sync-period (15 s) it reads each HorizontalPodAutoscaler's
// target through the scale subresource (any kind that serves one: Deployments,
// StatefulSets, custom resources), asks the replica calculator (package replicacalc) what
// count its metrics want (resource, container resource, Pods, Object and External
// metrics, from metrics.k8s.io, custom.metrics.k8s.io and external.metrics.k8s.io),
// stabilises and limits that count, rescales the target when it differs, and writes the
// HPA's status (current and desired replicas, currentMetrics, lastScaleTime,
// observedGeneration and the AbleToScale, ScalingActive, ScalingLimited and ScaledToZero
// conditions) when it changed. Events: SuccessfulRescale "New size: N; reason: R",
// FailedRescale, FailedGetScale, FailedComputeMetricsReplicas, the metric failures
// (FailedGet…Metric), SelectorRequired, InvalidSelector, AmbiguousSelector,
// FailedUpdateStatus, as component "horizontal-pod-autoscaler".
//
// Normalisation (normalize.go): without spec.behavior, the highest recommendation of the
// last --horizontal-pod-autoscaler-downscale-stabilization (5 min) holds a scale-down
// back, and a scale-up is limited to max(2 × current, 4) at a time; with behavior, the
// scale-up window's lowest and the scale-down window's highest recommendation bound the
// count, and each direction's policies (Pods, Percent, over their periods, selected by
// Max, Min or Disabled) limit the change counted from the recent rescales; minReplicas
// and maxReplicas bound both.
//
// The queue is upstream's: named "horizontalpodautoscaler", with a fixed-interval rate
// limiter of the sync period; every sync re-adds its key rate-limited unless the HPA is
// gone, an HPA's spec change (its generation) queues it at once, a status change after
// the period.
//
// # Sharding: the history after a move
//
// Upstream keeps each HPA's recent recommendations and, with behavior, its recent
// rescales in memory, and forgets them on a restart: its first sync then seeds the window
// with the current count. An HPA's namespace moves between shards far more often than
// kube-controller-manager restarts, and the seed alone lets the new owner act earlier
// than the old one would have in two cases: the target was scaled down by someone else
// within the window (the old owner would scale it back up to the window's highest
// recommendation; the new one keeps the lower count), and a behavior's policy whose
// allowance the old owner had just used (the new owner would get it again at once). So
// an HPA that comes to a shard with no history gets one rebuilt (rebuild.go), in its
// first sync, from what the previous owner left in the API: if status.lastScaleTime is
// within the horizon (the longest window or policy period), the controller lists the
// HPA's SuccessfulRescale events (by involvedObject.uid, reason and source), and each
// rescale to N at t within the scale-down window becomes a recommendation N at t
// (counted for the scale-down window only: the old owner had a recommendation of at
// least N no earlier than t, so the rebuilt window never lets the count below N before
// t plus the window; it may hold it up to a window longer than the old owner would have;
// recommendations that led to no rescale are not recovered, and matter only when the
// count was lowered by someone else: otherwise the seed holds the current count for a
// window from the move), and each rescale within its direction's longest policy
// period a scale event of the change from the rescale before it (the direction from the
// reason; the change of the only rescale known from the status when it is that
// rescale's). The status's lastScaleTime and desiredReplicas stand in for a rescale the
// events lack. Events are best effort (the recorder's spam filter and aggregation, a
// SIGKILL before they are sent, their TTL): what they lack is not recovered, and the
// rebuild is then never below upstream's seed. Rescales whose change cannot be told are
// counted in horizontal_pod_autoscaler_controller_rebuild_incomplete_total, rebuilds by
// source in _history_rebuilds_total (kshard's series). An HPA that scaled longer ago
// than the horizon costs no request. The history is dropped when the HPA is deleted,
// and when its namespace leaves the shard (the shard's cache deletes its objects, and
// the delete handler finds it gone from the cache).
//
// The rebuild trusts the namespace's Events: whoever may create Events there can write
// one that looks like the autoscaler's (the API checks no event's source). Such an event
// can make a new owner keep a count up to the HPA's maxReplicas for at most the scale-down
// window, or hold back a step by at most a policy period; it cannot move the count outside
// minReplicas..maxReplicas, which bound every recommendation, nor last past the horizon.
// Whoever may edit the HPA can do more; on a cluster where Events are writable by more
// principals than HPAs are, that is the exposure the rebuild adds.
//
// AmbiguousSelector is found among the HPAs of the shard, which are every HPA of the
// namespace (a namespace is worked by one shard): the add handler registers each HPA the
// cache holds before the shard works the namespace.
package horizontalpodautoscaling

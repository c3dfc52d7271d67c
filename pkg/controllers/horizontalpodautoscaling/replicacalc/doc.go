// Package replicacalc computes how many replicas a HorizontalPodAutoscaler wants, equal in
// behaviour to kube-controller-manager 1.37's replica calculator and metric computation
// (pkg/controller/podautoscaler: replica_calculator.go, metrics/, and horizontal.go's
// computeReplicasForMetrics with the computeStatusFor* functions), for kshard's
// horizontalpodautoscaling controller, which owns the rest (the scale subresource,
// stabilization, behavior policies, the status write).
//
// Two parts:
//
//   - MetricsClient reads the metrics APIs through k8s.io/metrics' clients: the resource
//     metrics API (metrics.k8s.io v1beta1 PodMetrics, listed by the target's selector;
//     a pod's containers summed, a pod with a container's resource missing left out), the
//     custom metrics API (custom.metrics.k8s.io, the preferred version found by discovery:
//     pods by selector, one object, or the namespace itself) and the external metrics API
//     (external.metrics.k8s.io v1beta1). NewRESTMetricsClient builds it from a client
//     configuration as kube-controller-manager does; NewMetricsClient takes the three
//     clients (unit tests pass k8s.io/metrics' fakes).
//   - Calculator turns metrics into a replica count per metric, as upstream's
//     ReplicaCalculator: utilization and average value of a pod or a container resource,
//     pods metrics, object metrics (value and average value), external metrics (value and
//     average value). Pods come from the shard's pod cache by the target's selector. Pods
//     being deleted or Failed are ignored; Pending pods, and for CPU pods not yet ready or
//     still in --horizontal-pod-autoscaler-cpu-initialization-period with a sample taken
//     before they became ready (or never ready within
//     --horizontal-pod-autoscaler-initial-readiness-delay of their start), count as
//     unready; pods without a sample are missing. Unready pods count as using nothing on a
//     scale-up and are left out otherwise; missing pods count as using nothing on a
//     scale-up and the target (100 % of their request for utilization) on a scale-down; a
//     change that these assumptions would turn around, or that stays within the tolerance
//     (--horizontal-pod-autoscaler-tolerance, or spec.behavior's scaleUp/scaleDown
//     tolerance: HPAConfigurableTolerance is GA and locked on in 1.37), keeps the current
//     count. Pod-level resource requests are used when a pod sets them (PodLevelResources
//     is beta and on by default in 1.37; kshard has no feature gates).
//
// ComputeReplicasForMetrics is the one entry point the controller calls: the largest
// proposal over the HPA's metrics, their statuses, and the ScalingActive condition to set
// (ValidMetricFound, or the first failing metric's reason: FailedGetResourceMetric,
// FailedGetContainerResourceMetric, FailedGetPodsMetric, FailedGetObjectMetric,
// FailedGetExternalMetric, InvalidMetricSourceType). As upstream, it fails (replicas -1)
// when every metric fails or when some fail and the others would scale down, and it
// returns the error together with a count when some fail and the others scale up. The
// Warning events upstream records from these functions (one per failing metric, reason
// as the condition's, the error as message) are recorded with the EventRecorder the
// Calculator is given, so they come in upstream's order; the controller records its own
// (FailedComputeMetricsReplicas and the rest).
//
// Upstream reads time.Now() where kshard reads an injected clock (tests), and kshard
// returns the condition where upstream sets it on the HPA; and a metric whose source
// struct is nil (or a Pods metric without an average value target), which the API
// server's validation refuses, fails as a spec error where upstream would dereference
// nil. Nothing else differs. The
// package keeps no state between calls and knows nothing of sharding: the pod lister is
// the shard's cache, which holds the pods of the namespaces the shard works. It logs (a
// pod missing from the resource metrics, at V(2), key "pod") to the logger of the context
// it is given, which the controller's sync carries with the HPA's namespace and name.
package replicacalc

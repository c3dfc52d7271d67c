// Package endpointslice is kshard's EndpointSlice controller ("endpointslice"), equal in
// behaviour to kube-controller-manager v1.37's: for every Service with a selector (not of
// type ExternalName) it keeps EndpointSlices, labelled
// endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io and
// kubernetes.io/service-name=<service>, that list the Service's pods with their
// ready/serving/terminating conditions, named ports resolved per pod, at most
// --max-endpoints-per-slice endpoints each, a placeholder slice for a Service without
// endpoints, and topology hints or trafficDistribution from the Nodes' zones.
//
// The reconciler, the EndpointSliceTracker (which slices and generations this process
// wrote or deleted), the trigger-time tracker, the topology cache and the metrics are
// upstream's own, from the published module k8s.io/endpointslice; this package is the
// controller around them, as upstream's endpointslice_controller.go is:
//
//   - handlers.go: Service events queue the Service; Pod events are mapped to the
//     Services whose selectors match the pod's old or new labels and queue them after
//     --endpointslice-updates-batch-period; EndpointSlice events queue their Service
//     (after max(1 s, batch period)) unless the tracker says the change is this
//     controller's own; Node events trigger the topology check.
//   - sync.go: one sync of a Service: the stale-cache check against the tracker, slices
//     being deleted dropped, the reconciler run; syncs counted by result (success, stale,
//     error) in endpoint_slice_controller_syncs.
//   - topology.go: the topology check (all Nodes into the topology cache, overloaded
//     Services queued), run by one goroutine per shard whose triggers coalesce.
//
// # Sharding
//
// The controller knows nothing of shards. Services, Pods and EndpointSlices are cached
// for the shard's namespaces, Nodes whole; the queue is the shard's gated queue, and
// writes go through the fenced client. Two things are per shard process:
//
//   - The topology cache: every shard feeds it all Nodes (the same on every shard, so
//     the same zone ratios) and its own Services' endpoints. The topology check writes
//     nothing: it only queues Service keys into the gated queue, so it runs ungated.
//   - The tracker's, trigger-time tracker's, reconciler metrics cache's and topology
//     cache's per-Service state. When a namespace leaves the shard, the cache shows its
//     Services to the handlers as deletes (shardcache's Release), after its work was
//     drained; the Service delete handler then forgets the Service's state once the
//     cache no longer holds it (forgetService). Without that, a slice this shard
//     created whose create it never saw would stay tracked, and were the namespace to
//     come back the tracker would call the cache stale on every sync of that Service,
//     which would never be reconciled again.
package endpointslice

// Package endpoint is kshard's Endpoints controller ("endpoint", kube-controller-manager's
// endpoints-controller), equal in behaviour to kube-controller-manager v1.37's: it keeps,
// for every Service with a selector, the core/v1 Endpoints of the same name listing the
// addresses of the pods the selector picks, as clients that still read Endpoints (rather
// than EndpointSlices) expect.
//
// One sync of a Service (sync.go):
//
//  1. A Service gone from the cache: DELETE its Endpoints. An ExternalName Service or
//     one without a selector: nothing (its Endpoints, if any, are someone else's).
//  2. Every selected pod that should be in Endpoints (k8s.io/endpointslice/util
//     ShouldPodBeInEndpoints: not terminal, with an IP, not terminating) gives one address
//     of the Service's IP family, with its hostname when the pod's subdomain names the
//     Service, per Service port whose target port (number or container port name) the pod
//     has; ready addresses when the pod is Ready or the Service publishes not-ready
//     addresses, not-ready ones otherwise. A headless Service without ports lists the
//     addresses without ports.
//  3. The subsets are repacked in upstream's canonical form (subsets.go: one subset per
//     set of addresses sharing the same ports, a not-ready port mapping trumping a ready
//     one, sorted as upstream sorts them), so that a stored Endpoints written by upstream
//     compares equal and is not rewritten.
//  4. Nothing is written when the cached Endpoints already has these subsets, the
//     Service's labels plus endpoints.kubernetes.io/managed-by: endpoint-controller, and
//     no over-capacity annotation. Otherwise it is created or updated with the Service's
//     labels, the managed-by label, the service.kubernetes.io/headless label for a
//     Service without a cluster IP, the endpoints.kubernetes.io/last-change-trigger-time
//     annotation (k8s.io/endpointslice/util's trigger-time tracker), and, above 1,000
//     addresses, the addresses truncated to 1,000 (ready ones first, spread over the
//     subsets in proportion) with endpoints.kubernetes.io/over-capacity: truncated
//     (truncate.go). As upstream, an over-capacity Endpoints is written on every sync.
//  5. A cached Endpoints older than one this controller wrote (its resourceVersion
//     recorded as stale after the update, stale.go) fails the sync, which is retried once
//     the cache caught up. A failing key is dropped after 15 retries, as upstream drops it.
//
// Pod events are mapped to the keys of the Services whose selectors match the pod's old
// or new labels in the event handler (k8s.io/endpointslice/util's pod projection), and
// queued after --endpoint-updates-batch-period; Service events queue the Service; a
// deleted Endpoints queues its Service (recreated if the Service still wants it).
//
// Sharding. The queue holds Service keys; the shard fills it with every cached Service
// of a namespace when it starts working the namespace. Upstream looks for Endpoints whose
// Service is gone once at start (checkLeftoverEndpoints); kshard does it on every
// acquire, for the acquired namespaces (Resync), so Endpoints whose Service was deleted
// while no shard (or another shard) worked the namespace are deleted by the new owner.
// Endpoints with the leader-election annotation are left alone there, as upstream leaves
// them. When a Service leaves the cache (a delete, or its namespace released), its
// trigger-time and stale-resourceVersion records are forgotten, so a namespace that comes
// back later starts as after a restart.
package endpoint

// Package endpointslicemirroring is kshard's EndpointSlice mirroring controller
// ("endpointslicemirroring", kube-controller-manager's endpointslice-mirroring-controller),
// equal in behaviour to kube-controller-manager 1.37's: it mirrors the Endpoints of a
// Service without a selector (Endpoints written by hand or by another controller) into
// EndpointSlices, so that consumers of EndpointSlices (kube-proxy, DNS) see them.
//
// One sync of a key namespace/name (sync.go), the name shared by the Endpoints, its
// Service and the slices labelled kubernetes.io/service-name=<name> and
// endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io:
//
//  1. Nothing to mirror — the Endpoints is gone, labelled
//     endpointslice.kubernetes.io/skip-mirror=true (the Endpoints controller labels those
//     of Services with a selector), carries a leader-election record annotation, or its
//     Service is gone or has a selector — deletes the mirrored slices.
//  2. If the slice cache does not yet show the controller's own last writes for the key
//     (k8s.io/endpointslice's EndpointSliceTracker compares generations), the key is
//     retried with backoff.
//  3. Otherwise (reconciler.go) the Endpoints' subsets are brought into canonical form
//     (repack.go, upstream's RepackSubsets) and each subset's ports and address type get
//     one slice: ready then not-ready addresses, at most
//     --mirroring-max-endpoints-per-subset (1000) of them, the rest skipped with a
//     TooManyAddressesToMirror warning; addresses that are not IPs are skipped with an
//     InvalidIPAddress warning. A slice is owned by the Endpoints, carries its labels
//     and its annotations but endpoints.kubernetes.io/last-change-trigger-time and
//     kubectl's last-applied-configuration, and is rewritten when it differs, so a hand
//     edit is reverted. Surplus slices are deleted, or recycled for a create.
//
// A key fails at most 15 times in a row before it is dropped (upstream's maxRetries), with
// a backoff of 1 s doubling to 100 s. The controller exports upstream's
// endpoint_slice_mirroring_controller_* series (metrics.go).
//
// Under sharding: the queue holds Endpoints keys, which the shard queues for every cached
// Endpoints when it starts working a namespace; Resync (resync.go) also queues the key of
// every mirrored slice there, so slices whose Endpoints went while the namespace was
// elsewhere are deleted. When an Endpoints leaves the shard's cache (deleted, or its
// namespace moved away) the tracker's record of it and its share of the gauges are
// forgotten at once (handlers.go), since the sync that would forget them does not run on a
// shard that no longer owns the namespace.
package endpointslicemirroring

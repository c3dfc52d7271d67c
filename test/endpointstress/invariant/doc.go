// Package invariant checks the EndpointSlice controller's promises to the Services it
// serves while the stress test (test/endpointstress) churns their pods and moves their
// namespaces between shards.
//
// Checker follows every managed EndpointSlice event of the test's Services (from the
// test's own informer) and the intents the test records before each request that can
// change a Service's endpoints. A pod is stably ready for a Service from the first slice
// event that shows it ready in the union of that Service's slices, while no intent of the
// test about that pod and Service is still to be seen in the slices, until the test records
// an intent that can remove it. A slice event after which the union lacks a stably ready
// pod, or shows it not ready, is a Violation (Service, pod, slice, resourceVersion, time).
// A violation that ends with the pod back, ready, in another slice of the Service is a
// move of the endpoint between two slices in two writes; any other is a loss.
//
// The test changes one Service at a time (one intent outstanding per Service) and waits
// until the Service's slices show the intent (Checker.Expect: the union equals the test's
// model of the Service), so the state a slice shows after that comes from a pod state at
// least as new as the intent's.
//
// The write checks read the API server's audit log of EndpointSlice writes (ParseAudit)
// and the shards' ownership intervals from their logs (ParseOwnership): every write the
// API server accepted from a shard was received while that shard, by its own log, worked
// the partition of the slice's namespace, and two shards that wrote one slice did so in
// intervals of which the first had ended before the second began (CheckWrites).
package invariant

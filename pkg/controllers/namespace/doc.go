// Package namespace is kshard's namespace controller ("namespace"), equal in behaviour to
// kube-controller-manager 1.37's: it finishes the deletion of a namespace. When a
// Namespace gets a deletionTimestamp, the controller
//
//  1. makes sure its phase is Terminating;
//  2. discovers every namespaced resource the API server serves with the preferred
//     version of each group (aggregated APIs and CRDs included) and keeps those that
//     support delete;
//  3. deletes the namespace's pods first (DeleteCollection, else list and delete item by
//     item, with background propagation), and goes on to the other resources only once
//     no pod is left;
//  4. deletes every other resource's content the same way and lists what remains;
//  5. writes the namespace's deletion conditions (NamespaceDeletionDiscoveryFailure,
//     NamespaceDeletionGroupVersionParsingFailure, NamespaceDeletionContentFailure,
//     NamespaceContentRemaining, NamespaceFinalizersRemaining) with upstream's reasons
//     and messages;
//  6. once nothing is left and nothing failed, removes the "kubernetes" finalizer through
//     the namespace's finalize subresource; the API server then deletes the Namespace.
//
// A namespace whose content is still going away (pods in their grace period, objects
// held by finalizers) is queued again after half the estimated time plus a second, as
// upstream does (controllers.RequeueAfterError); any other failure (a group whose
// discovery failed, a delete that failed) is retried with the queue's backoff, upstream's
// namespace rate limiter (5 ms doubling to 60 s, 10 per second overall). A group whose
// discovery fails (an aggregated API that is down) is reported in the
// NamespaceDeletionDiscoveryFailure condition and keeps the finalizer on, while the
// content of every other group is deleted.
//
// Under sharding the controller is given the namespaces of the partitions its shard
// holds (queue keys are Namespace names) and knows nothing else of it: a namespace whose
// deletion was interrupted by a handoff or by the death of its shard is queued by the new
// owner when it starts working the partition, and its sync starts over from what the API
// server says, as after a kube-controller-manager restart. Its clients run at 20 times
// the shard's QPS and 100 times its burst, as kube-controller-manager's namespace
// controller's do.
package namespace

// Package expectations records, per controller key, the creations and deletions of
// controlled objects (pods) a controller has asked the API server for and not yet seen in
// its cache, as kube-controller-manager's ControllerExpectations and
// UIDTrackingControllerExpectations do for the ReplicaSet and Job controllers. A sync that
// finds its key's expectations unmet does not create or delete again: a lagging cache
// would otherwise make it act twice.
//
// Expectations are set by a sync before its writes (ExpectCreations, ExpectDeletions,
// ExpectDeletionsOf; each replaces the key's earlier ones) and lowered by the informer
// handlers as the cache shows the writes, or by the sync itself for a write that failed
// and so will never show. They expire after Timeout, so that a lost watch event does not
// hold a key back for good, and are dropped with Forget when the controller's object
// leaves the cache.
//
// Deletions are counted (ExpectDeletions, DeletionObserved: any deletion of the key's
// objects counts, as the Job controller does) or tracked by object key
// (ExpectDeletionsOf, DeletionOfObserved, ObserveGone: only the deletion of an object
// asked for counts, and only once, as the ReplicaSet controller does).
package expectations

// Package ttlafterfinished is kshard's TTL-after-finished controller
// ("ttl-after-finished"), equal in behaviour to kube-controller-manager 1.37's: it deletes
// a finished Job (a true Complete or Failed condition) spec.ttlSecondsAfterFinished
// seconds after the condition's lastTransitionTime.
//
// A Job added or updated in the cache, finished, with a TTL and not being deleted, is
// queued. Its sync computes the time left from the cached Job; while time is left, the
// key is queued again for when it runs out. When none is left the Job is read again from
// the API server (the TTL, or the Job, may have changed since the cache saw it), the
// check is repeated on that copy, and only then is it deleted, with foreground propagation
// (the Job goes after its pods) and its UID as a precondition (a new Job of the same name
// is never deleted in its place).
//
// The timer lives only in the queue. When a namespace moves to another shard, the new
// owner queues every Job of it, and the sync computes the time left from the object: an
// expired TTL is acted on at once, the others are requeued for their expiry.
package ttlafterfinished

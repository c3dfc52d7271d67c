package garbagecollector

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RemoteDependents is the seam of the cross-shard barrier (docs/design-gc-quota.md §3.4).
// A cluster-scoped owner's dependents may live in namespaces other shards work, which
// this shard's graph does not hold; removing the owner's foregroundDeletion finalizer
// when the local graph shows no blocking dependent, or its orphan finalizer when the
// local dependents are orphaned, could then let the owner go before remote dependents
// are deleted (foreground) or, worse, before their references are removed, so that
// their shards collect them as dangling instead of orphaning them.
//
// The controller asks Pending before it removes either finalizer from a cluster-scoped
// owner, and only then; namespaced owners never ask (their dependents share their
// namespace, so their shard).
type RemoteDependents interface {
	// Pending reports whether dependents outside this shard's scope may still hold a
	// reference to owner that keeps finalizer in place: a blocking reference for
	// metav1.FinalizerDeleteDependents, any reference for metav1.FinalizerOrphanDependents.
	// true makes the owner wait (its key is worked again later); an error retries it
	// with backoff.
	Pending(ctx context.Context, owner metav1.OwnerReference, finalizer string) (bool, error)
}

// ConservativeRemote is the default RemoteDependents until §3.4's sweep exists: it always
// answers pending, so this shard never removes foregroundDeletion or orphan from a
// cluster-scoped owner, and such an owner stays (deletionTimestamp set) rather than
// leaving remote dependents collected wrongly. Background deletion of cluster-scoped
// owners, and every namespaced owner, is unaffected.
type ConservativeRemote struct{}

// Pending always reports pending.
func (ConservativeRemote) Pending(context.Context, metav1.OwnerReference, string) (bool, error) {
	return true, nil
}

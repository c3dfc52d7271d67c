package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// syncOrphan is attemptToOrphan's sync. A key is worked in up to two roles:
//
//   - as an owner being deleted with the orphan finalizer (its wantOrphan bit, or it is
//     orphaning), upstream's attemptToOrphanWorker: it removes the owner's references
//     from every dependent in the graph, then the owner's orphan finalizer (for a
//     cluster-scoped owner only once RemoteDependents says no reference is left
//     elsewhere);
//   - as a namespaced dependent (its wantOrphanRefs bit) of cluster-scoped owners being
//     deleted with the orphan finalizer: it removes its references to them. Every shard
//     does this for its own namespaces' dependents, since only the cluster partition's
//     holder works the owner's key.
//
// A key taken with neither bit set, for a node that is not orphaning, is a stale copy
// (see take) and does nothing: treating it as an owner would strip a live owner's
// references from its dependents.
//
// Any failure retries the whole.
func (c *Controller) syncOrphan(ctx context.Context, key string) error {
	var asOwner, asDependent, ownerWork bool
	it, ok := c.take(key, func(n *node) bool {
		asOwner, asDependent = n.wantOrphan.Swap(false), n.wantOrphanRefs.Swap(false)
		// Owner work only for an owner queued as such or still orphaning (a delayed
		// copy of an owner waiting for RemoteDependents).
		ownerWork = asOwner || n.orphaning
		return ownerWork || asDependent
	})
	if !ok {
		return nil
	}
	ctx, log := nodeLogger(ctx, it.identity)
	c.graph.mu.RLock()
	var owners []types.UID
	if asDependent && it.identity.Namespace != "" {
		owners = c.graph.orphaningClusterOwners(it.n)
	}
	var deps []objectReference
	if ownerWork {
		deps = make([]objectReference, 0, len(it.n.dependents))
		for d := range it.n.dependents {
			deps = append(deps, d.identity)
		}
	}
	c.graph.mu.RUnlock()
	var err error
	if len(owners) > 0 {
		log.V(5).Info("removing references to cluster-scoped owners being deleted with the orphan finalizer", "owners", owners)
		err = c.patchWithFallback(ctx, it.identity, deleteOwnerRefsSMP(it.identity.UID, owners), func() ([]byte, error) {
			return c.deleteOwnerRefsJMP(ctx, it.identity, owners)
		})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("removing the references of %s to orphaning cluster-scoped owners %v failed: %w", it.identity, owners, err)
		}
	}
	if err == nil && ownerWork {
		err = c.orphanOwner(ctx, it, deps)
	}
	if err != nil {
		if asOwner {
			it.n.wantOrphan.Store(true)
		}
		if asDependent {
			it.n.wantOrphanRefs.Store(true)
		}
		return err
	}
	return nil
}

// orphanOwner orphans the dependents deps of it, then removes its orphan finalizer.
func (c *Controller) orphanOwner(ctx context.Context, it item, deps []objectReference) error {
	_, log := nodeLogger(ctx, it.identity)
	if err := c.orphanDependents(ctx, it.identity, deps); err != nil {
		return err
	}
	if err := c.checkRemote(ctx, it.identity, metav1.FinalizerOrphanDependents); err != nil {
		return err
	}
	if err := c.removeFinalizer(ctx, it.identity, metav1.FinalizerOrphanDependents); err != nil {
		return fmt.Errorf("removeOrphanFinalizer for %s failed with %w", it.identity, err)
	}
	log.V(5).Info("orphaned the item's dependents and removed its orphan finalizer")
	return nil
}

// orphanDependents removes owner's reference from each of deps, in parallel; a dependent
// gone is fine.
func (c *Controller) orphanDependents(ctx context.Context, owner objectReference, deps []objectReference) error {
	errs := make([]error, len(deps))
	var wg sync.WaitGroup
	for i, dep := range deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owners := []types.UID{owner.UID}
			err := c.patchWithFallback(ctx, dep, deleteOwnerRefsSMP(dep.UID, owners), func() ([]byte, error) {
				return c.deleteOwnerRefsJMP(ctx, dep, owners)
			})
			if err != nil && !apierrors.IsNotFound(err) {
				errs[i] = fmt.Errorf("orphaning %s failed, %w", dep, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to orphan dependents of owner %s, got errors: %w", owner, err)
	}
	return nil
}

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

// syncOrphan is attemptToOrphan's sync, upstream's attemptToOrphanWorker: it removes the
// owner's references from every dependent in the graph, then the owner's orphan
// finalizer (for a cluster-scoped owner only once RemoteDependents says no dependent is
// left elsewhere). Any failure retries the whole.
func (c *Controller) syncOrphan(ctx context.Context, key string) error {
	it, ok := c.take(key, func(n *node) bool { return n.wantOrphan.Swap(false) })
	if !ok {
		return nil
	}
	ctx, log := nodeLogger(ctx, it.identity)
	c.graph.mu.RLock()
	deps := make([]objectReference, 0, len(it.n.dependents))
	for d := range it.n.dependents {
		deps = append(deps, d.identity)
	}
	c.graph.mu.RUnlock()
	err := c.orphanDependents(ctx, it.identity, deps)
	if err == nil {
		err = c.checkRemote(ctx, it.identity, metav1.FinalizerOrphanDependents)
	}
	if err == nil {
		if err = c.removeFinalizer(ctx, it.identity, metav1.FinalizerOrphanDependents); err != nil {
			err = fmt.Errorf("removeOrphanFinalizer for %s failed with %w", it.identity, err)
		}
	}
	if err != nil {
		it.n.wantOrphan.Store(true)
		return err
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

package garbagecollector

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/pkg/controllers"
)

// errEnqueuedVirtualDelete: the item was verified absent and a virtual delete queued;
// the graph builder takes it from there.
var errEnqueuedVirtualDelete = errors.New("enqueued virtual delete event")

// item is what a worker reads of a node under the graph's lock.
type item struct {
	n                  *node
	identity           objectReference
	virtual            bool
	beingDeleted       bool
	deletingDependents bool
}

// take resolves a queue key to its node, clearing its want bit (want), and reports
// whether there is work: want reports whether the node has work for this queue. A key taken with nothing wanted is a stale copy (a
// Resync that read a bit a worker cleared meanwhile, a delayed AddAfter copy of a key
// worked since) and is nothing to do. A node that is gone, or that was observed under
// another key meanwhile (a virtual owner turned out to live elsewhere), is nothing to do;
// a virtual node whose identity was replaced is queued under its new key.
func (c *Controller) take(key string, want func(*node) bool) (item, bool) {
	_, uid := parseKey(key)
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	n, ok := c.graph.nodes[uid]
	if !ok {
		return item{}, false
	}
	wanted := want(n)
	if n.key() != key {
		if n.virtual {
			c.enqueueDelete(n)
		}
		return item{}, false
	}
	if !wanted {
		return item{}, false
	}
	return item{n: n, identity: n.identity, virtual: n.virtual, beingDeleted: n.beingDeleted,
		deletingDependents: n.deletingDependents}, true
}

// syncDelete is attemptToDelete's sync, upstream's attemptToDeleteWorker: it collects the
// key's object if every owner is gone, verified live, or finishes a foreground deletion
// it waits for.
func (c *Controller) syncDelete(ctx context.Context, key string) error {
	// Any key is worked, bit or not, as upstream: the work reads the object and its
	// owners live, so a stale copy costs reads, never a wrong write.
	it, ok := c.take(key, func(n *node) bool {
		n.wantDelete.Store(false)
		return true
	})
	if !ok {
		return nil
	}
	ctx, log := nodeLogger(ctx, it.identity)
	err := c.attemptToDeleteItem(ctx, it)
	var mapping *restMappingError
	switch {
	case errors.Is(err, errEnqueuedVirtualDelete), errors.Is(err, errNamespacedOwnerOfClusterScoped):
		return nil
	case errors.As(err, &mapping):
		it.n.wantDelete.Store(true)
		return controllers.QuietRetryError{Err: err}
	case err != nil:
		it.n.wantDelete.Store(true)
		return err
	}
	c.graph.mu.RLock()
	virtual := it.n.virtual
	c.graph.mu.RUnlock()
	if virtual {
		// Not yet observed: an object added and removed while a watch was re-established
		// would otherwise leave its virtual node in the graph (kubernetes#56121).
		log.V(5).Info("item hasn't been observed via informer yet")
		it.n.wantDelete.Store(true)
		return errNotObserved
	}
	return nil
}

// ownersSolidInGraph reports whether the item is observed and not being deleted, and
// every owner it names is an observed node of exactly that identity (UID, group, kind,
// name, and the item's namespace unless cluster-scoped) that is not being deleted. Upstream
// reads the item and each such owner live and finds them all solid: nothing to do. The
// graph is read instead because it can only lead to doing nothing: an owner deleted
// meanwhile reaches the graph as a delete event, which queues its dependents for the
// live check, and a reference added meanwhile as an update event. It spares the live
// reads of every owner a dependent named before the owner's informer delivered it (a
// virtual node, observed since): at a start whose pod informer delivers before the
// ReplicaSet informer, one or two reads per ReplicaSet at the client's QPS.
func (c *Controller) ownersSolidInGraph(it item) bool {
	if it.virtual || it.beingDeleted {
		return false
	}
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	for _, ref := range it.n.owners {
		o, ok := c.graph.nodes[ref.UID]
		if !ok || o.virtual || o.beingDeleted || o.identity.Name != ref.Name || o.identity.Kind != ref.Kind ||
			groupOf(o.identity.APIVersion) != groupOf(ref.APIVersion) ||
			(o.identity.Namespace != "" && o.identity.Namespace != it.identity.Namespace) {
			return false
		}
	}
	return true
}

// groupOf is the API group of apiVersion ("" for the core group or a malformed one).
func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// attemptToDeleteItem reads the item live and deletes it when every owner is dangling
// (or is waiting for its dependents), patches out dangling and waiting references when a
// solid owner remains, and, for an item deleting its dependents, removes its
// foregroundDeletion finalizer once no blocking dependent is left.
func (c *Controller) attemptToDeleteItem(ctx context.Context, it item) error {
	_, log := nodeLogger(ctx, it.identity)
	log.V(2).Info("processing item", "virtual", it.virtual)
	if it.beingDeleted && !it.deletingDependents {
		// Being deleted is a one-way trip: wait for the delete event.
		log.V(5).Info("processing item returned at once, because its deletionTimestamp is set")
		return nil
	}
	if c.ownersSolidInGraph(it) {
		log.V(5).Info("item and every owner observed, none being deleted: nothing to do, no live read")
		return nil
	}
	latest, err := c.getObject(ctx, it.identity)
	switch {
	case apierrors.IsNotFound(err):
		log.V(5).Info("item not found, generating a virtual delete event")
		if it.virtual {
			c.reportOwnerElsewhere(ctx, it)
		}
		c.enqueueVirtualDelete(it.identity)
		return errEnqueuedVirtualDelete
	case err != nil:
		return err
	}
	if latest.UID != it.identity.UID {
		log.V(5).Info("UID doesn't match, item not found, generating a virtual delete event")
		c.enqueueVirtualDelete(it.identity)
		return errEnqueuedVirtualDelete
	}
	if it.virtual && it.n.verifiedIn != "" {
		// A cluster-scoped object a dependent here named exists: this shard's informer
		// will observe it, and its own collection is the cluster partition's holder's
		// (this shard's writes to it would be fenced).
		log.V(5).Info("virtual cluster-scoped owner exists; its own work belongs to the cluster partition")
		return nil
	}
	if it.deletingDependents {
		return c.processDeletingDependents(ctx, it)
	}
	refs := latest.OwnerReferences
	if len(refs) == 0 {
		log.V(2).Info("item doesn't have an owner, continue on next item")
		return nil
	}
	solid, dangling, waiting, err := c.classifyReferences(ctx, it.identity, refs)
	if err != nil {
		return err
	}
	log.V(5).Info("classify item's references", "solid", solid, "dangling", dangling, "waitingForDependentsDeletion", waiting)

	switch {
	case len(solid) != 0:
		log.V(2).Info("item has at least one existing owner, will not garbage collect", "owner", solid)
		if len(dangling) == 0 && len(waiting) == 0 {
			return nil
		}
		// Waiting owners' references go too, or those owners would wait for this
		// dependent forever.
		log.V(2).Info("remove dangling references and waiting references for item", "dangling", dangling, "waitingForDependentsDeletion", waiting)
		uids := append(refUIDs(dangling), refUIDs(waiting)...)
		return c.patchWithFallback(ctx, it.identity, deleteOwnerRefsSMP(it.identity.UID, uids), func() ([]byte, error) {
			return c.deleteOwnerRefsJMP(ctx, it.identity, uids)
		})
	case len(waiting) != 0 && c.hasDependents(it.n):
		if c.dependentDeletingDependents(it.n) {
			// A cycle is possible: make this item's references non-blocking first.
			log.V(2).Info("processing item, some of its owners and its dependent have FinalizerDeletingDependents, to prevent potential cycle, its ownerReferences are going to be modified to be non-blocking, then the item is going to be deleted with Foreground")
			owners := c.ownersOf(it.n)
			if err := c.patchWithFallback(ctx, it.identity, unblockOwnerRefsSMP(it.identity.UID, owners), func() ([]byte, error) {
				return c.unblockOwnerRefsJMP(ctx, it.identity, owners)
			}); err != nil {
				return err
			}
		}
		log.V(2).Info("at least one owner of item has FinalizerDeletingDependents, and the item itself has dependents, so it is going to be deleted in Foreground")
		return c.deleteItem(ctx, it.identity, latest, metav1.DeletePropagationForeground)
	default:
		policy := metav1.DeletePropagationBackground
		switch {
		case hasFinalizer(latest, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case hasFinalizer(latest, metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		log.V(2).Info("deleting item", "propagationPolicy", policy)
		return c.deleteItem(ctx, it.identity, latest, policy)
	}
}

// deleteItem deletes the item read as latest; NotFound becomes a virtual delete.
func (c *Controller) deleteItem(ctx context.Context, id objectReference, latest *metav1.PartialObjectMetadata, policy metav1.DeletionPropagation) error {
	err := c.deleteObject(ctx, id, latest.ResourceVersion, latest.OwnerReferences, policy)
	if apierrors.IsNotFound(err) {
		c.enqueueVirtualDelete(id)
		return errEnqueuedVirtualDelete
	}
	return err
}

func refUIDs(refs []metav1.OwnerReference) []types.UID {
	out := make([]types.UID, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.UID)
	}
	return out
}

func (c *Controller) hasDependents(n *node) bool {
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	return len(n.dependents) != 0
}

func (c *Controller) dependentDeletingDependents(n *node) bool {
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	for d := range n.dependents {
		if d.deletingDependents {
			return true
		}
	}
	return false
}

func (c *Controller) ownersOf(n *node) []metav1.OwnerReference {
	c.graph.mu.RLock()
	defer c.graph.mu.RUnlock()
	return append([]metav1.OwnerReference(nil), n.owners...)
}

// processDeletingDependents works an item waiting for its dependents (foreground
// deletion): with no blocking dependent left its foregroundDeletion finalizer is removed
// (for a cluster-scoped owner only once RemoteDependents says none is left elsewhere);
// otherwise its blocking dependents that are not themselves deleting dependents are
// queued.
func (c *Controller) processDeletingDependents(ctx context.Context, it item) error {
	_, log := nodeLogger(ctx, it.identity)
	c.graph.mu.RLock()
	blocking := it.n.blockingDependents()
	for _, dep := range blocking {
		if !dep.deletingDependents {
			log.V(2).Info("adding dependent to attemptToDelete, because its owner is deletingDependents", "dependent", dep.identity)
			c.enqueueDelete(dep)
		}
	}
	c.graph.mu.RUnlock()
	if len(blocking) != 0 {
		return nil
	}
	if err := c.checkRemote(ctx, it.identity, metav1.FinalizerDeleteDependents); err != nil {
		return err
	}
	log.V(2).Info("remove DeleteDependents finalizer for item")
	return c.removeFinalizer(ctx, it.identity, metav1.FinalizerDeleteDependents)
}

// isDangling reports whether ref's owner is absent, from the absent owner cache or a
// live GET in the item's namespace ("" for a cluster-scoped owner); a found owner is
// returned.
func (c *Controller) isDangling(ctx context.Context, ref metav1.OwnerReference, id objectReference) (bool, *metav1.PartialObjectMetadata, error) {
	_, log := nodeLogger(ctx, id)
	key := objectReference{OwnerReference: coordinates(ref)}
	if c.absent.Has(key) {
		log.V(5).Info("according to the absentOwnerCache, item's owner does not exist", "owner", ref)
		return true, nil, nil
	}
	key.Namespace = id.Namespace
	if c.absent.Has(key) {
		log.V(5).Info("according to the absentOwnerCache, item's owner does not exist in namespace", "owner", ref)
		return true, nil, nil
	}
	gvr, namespaced, err := c.resources.mapping(ref.APIVersion, ref.Kind)
	if err != nil {
		return false, nil, err
	}
	if !namespaced {
		key.Namespace = ""
	}
	if id.Namespace == "" && namespaced {
		log.V(2).Info("item is cluster-scoped, but refers to a namespaced owner", "owner", ref)
		return false, nil, errNamespacedOwnerOfClusterScoped
	}
	owner, err := c.metadata.Resource(gvr).Namespace(namespaceFor(namespaced, id.Namespace)).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.absent.Add(key)
		log.V(5).Info("item's owner is not found", "owner", ref)
		return true, nil, nil
	case err != nil:
		return false, nil, err
	}
	if owner.UID != ref.UID {
		log.V(5).Info("item's owner is not found, UID mismatch", "owner", ref)
		c.absent.Add(key)
		return true, nil, nil
	}
	return false, owner, nil
}

// classifyReferences sorts refs into solid (the owner exists and is not waiting for its
// dependents), dangling (it does not exist) and waiting (it is being deleted with
// foregroundDeletion).
func (c *Controller) classifyReferences(ctx context.Context, id objectReference, refs []metav1.OwnerReference) (solid, dangling, waiting []metav1.OwnerReference, err error) {
	for _, ref := range refs {
		isDangling, owner, err := c.isDangling(ctx, ref, id)
		if err != nil {
			return nil, nil, nil, err
		}
		switch {
		case isDangling:
			dangling = append(dangling, ref)
		case owner.DeletionTimestamp != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents):
			waiting = append(waiting, ref)
		default:
			solid = append(solid, ref)
		}
	}
	return solid, dangling, waiting, nil
}

// checkRemote returns nil when the owner's finalizer may go as far as dependents outside
// this shard are concerned: always for a namespaced owner (its dependents share its
// namespace, hence its shard), RemoteDependents' answer for a cluster-scoped one, whose
// dependents may live in other shards' namespaces. A wait is a RequeueAfterError, after
// remoteRetryMin doubling up to remoteRetryMax while the owner stays pending.
func (c *Controller) checkRemote(ctx context.Context, owner objectReference, finalizer string) error {
	if owner.Namespace != "" {
		return nil
	}
	pending, err := c.remote.Pending(ctx, owner.OwnerReference, finalizer)
	if err != nil {
		return err
	}
	if pending {
		return &controllers.RequeueAfterError{After: c.remoteRetry.When(owner.UID),
			Reason: fmt.Sprintf("dependents in other shards' namespaces may still reference the cluster-scoped owner (finalizer %s)", finalizer)}
	}
	c.remoteRetry.Forget(owner.UID)
	return nil
}

// The bound of reportOwnerElsewhere's lookups across the controller.
const (
	elsewhereLookupQPS   = 1
	elsewhereLookupBurst = 10
)

// reportOwnerElsewhere looks for a virtual owner, not found in its dependents' namespace,
// in every namespace: an owner in a namespace another shard works is never observed here,
// so upstream's OwnerRefInvalidNamespace event, recorded when the owner is observed in
// another namespace, would be missed. A consistent read is not needed (resourceVersion 0,
// the watch cache); the lookup is best effort, and its failure only costs the event. The
// dependents are then collected as dangling in their own namespace, as upstream.
//
// Each lookup is a cluster-wide list, and owner references are the tenants' to write: a
// dependent gets at most one lookup (one whose dependents all had theirs is skipped), and
// lookups across the controller are bounded by a token bucket (elsewhereLookupQPS,
// elsewhereLookupBurst); with the bucket empty the lookup is skipped, costing only the
// event.
func (c *Controller) reportOwnerElsewhere(ctx context.Context, it item) {
	_, log := nodeLogger(ctx, it.identity)
	gvr, namespaced, err := c.resources.mapping(it.identity.APIVersion, it.identity.Kind)
	if err != nil || !namespaced {
		return
	}
	c.graph.mu.RLock()
	deps := it.n.dependentList()
	c.graph.mu.RUnlock()
	fresh := false
	for _, d := range deps {
		fresh = fresh || !d.ownerLookedUp.Load()
	}
	if !fresh {
		log.V(5).Info("not looking for the owner in other namespaces: its dependents had their lookup")
		return
	}
	if !c.elsewhereLookups.TryAccept() {
		log.V(4).Info("not looking for the owner in other namespaces: too many lookups")
		return
	}
	for _, d := range deps {
		d.ownerLookedUp.Store(true)
	}
	list, err := c.metadata.Resource(gvr).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", it.identity.Name).String(), ResourceVersion: "0"})
	if err != nil {
		log.V(4).Info("cannot look for the owner in other namespaces", "err", err)
		return
	}
	for _, o := range list.Items {
		if o.UID != it.identity.UID || o.Name != it.identity.Name || o.Namespace == it.identity.Namespace {
			continue
		}
		c.graph.mu.RLock()
		for dep := range it.n.dependents {
			if dep.identity.Namespace != o.Namespace {
				log.V(2).Info("item references an owner but does not match namespaces", "item", dep.identity, "ownerNamespace", o.Namespace)
				c.reportInvalidNamespaceOwnerRef(dep, it.identity.UID)
			}
		}
		c.graph.mu.RUnlock()
		return
	}
}

package garbagecollector

import (
	"reflect"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

type eventType uint8

const (
	addEvent eventType = iota
	updateEvent
	deleteEvent
	// resyncEvent is one Resync call: applied, it adds every object of its scope that the
	// stores hold then, read when it is applied rather than when Resync was called, so
	// that a delete delivered in between is never undone by a stale snapshot; then it
	// queues again the work of every scope waiting (resync.go).
	resyncEvent
)

// event is one change of the graph: an informer's add, update or delete of an object of
// kind, a virtual delete (a node verified absent by a live GET), or a Resync. Informers
// queue one per object while the stores fill, so it is kept small (64 bytes): what it
// says of the kind is shared, not copied.
type event struct {
	typ     eventType
	virtual bool
	obj     any
	oldObj  any
	kind    *kindInfo
	// scope is a resyncEvent's.
	scope *controllers.Scope
}

// kindInfo is the kind of an event's object, one per served resource (or per virtual
// delete), shared by its events; apiVersion is computed once for every node of the kind.
type kindInfo struct {
	gvr        schema.GroupVersionResource // "" for a virtual delete's kind
	apiVersion string
	kind       string
}

func newKindInfo(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) *kindInfo {
	return &kindInfo{gvr: gvr, apiVersion: gvk.GroupVersion().String(), kind: gvk.Kind}
}

var _ controllers.ServedSubscriber = (*Controller)(nil)

// Added starts feeding r's objects to the graph (upstream's monitor of a resource). An
// informer already started replays its store as adds.
func (c *Controller) Added(r controllers.ServedResource, informer toolscache.SharedIndexInformer) {
	gvk := r.GroupVersion().WithKind(r.Kind)
	kind := newKindInfo(r.GroupVersionResource, gvk)
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.graphChanges.Add(&event{typ: addEvent, obj: obj, kind: kind}) },
		UpdateFunc: func(old, cur any) {
			c.graphChanges.Add(&event{typ: updateEvent, obj: cur, oldObj: old, kind: kind})
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			c.graphChanges.Add(&event{typ: deleteEvent, obj: obj, kind: kind})
		},
	})
	if err != nil {
		c.log.Error(err, "cannot watch a served resource; its objects stay out of the graph", "resource", r.GroupVersionResource)
		return
	}
	s := &served{res: r, kind: kind, informer: informer, reg: reg}
	c.resources.mu.Lock()
	defer c.resources.mu.Unlock()
	if old, ok := c.resources.byGVR[r.GroupVersionResource]; ok {
		_ = old.informer.RemoveEventHandler(old.reg)
	}
	c.resources.byGVR[r.GroupVersionResource] = s
	c.resources.byKind[gvk.GroupKind()] = s
	c.log.V(4).Info("watching a served resource", "resource", r.GroupVersionResource, "kind", r.Kind)
}

// Removed stops feeding r's objects to the graph. As upstream's stopped monitor, it sends
// no deletes: the graph keeps r's nodes.
func (c *Controller) Removed(r controllers.ServedResource) {
	c.resources.mu.Lock()
	defer c.resources.mu.Unlock()
	s, ok := c.resources.byGVR[r.GroupVersionResource]
	if !ok {
		return
	}
	_ = s.informer.RemoveEventHandler(s.reg)
	delete(c.resources.byGVR, r.GroupVersionResource)
	gk := r.GroupVersion().WithKind(r.Kind).GroupKind()
	if c.resources.byKind[gk] == s {
		delete(c.resources.byKind, gk)
	}
	c.log.V(4).Info("no longer watching a resource that is not served", "resource", r.GroupVersionResource)
}

// enqueueVirtualDelete asks the graph builder to remove the node of ref, verified absent.
func (c *Controller) enqueueVirtualDelete(ref objectReference) {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	c.graphChanges.Add(&event{typ: deleteEvent, virtual: true, kind: newKindInfo(schema.GroupVersionResource{}, gv.WithKind(ref.Kind)),
		obj: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}}})
}

func identityOf(e *event, obj metav1.Object) objectReference {
	return objectReference{
		OwnerReference: metav1.OwnerReference{APIVersion: e.kind.apiVersion, Kind: e.kind.kind, Name: obj.GetName(), UID: obj.GetUID()},
		Namespace:      obj.GetNamespace(),
	}
}

// processGraphChange applies one event to the graph and queues what it makes worth a
// look, as upstream's processGraphChanges.
func (c *Controller) processGraphChange(log logr.Logger, e *event) {
	if e.typ == resyncEvent {
		c.applyResync(log, *e.scope)
		return
	}
	obj, err := meta.Accessor(e.obj)
	if err != nil {
		log.Error(err, "cannot read an object's metadata", "apiVersion", e.kind.apiVersion, "kind", e.kind.kind)
		return
	}
	c.graph.mu.Lock()
	defer c.graph.mu.Unlock()
	g := c.graph
	existing, found := g.nodes[obj.GetUID()]
	if found && !e.virtual && existing.virtual {
		// A virtual node observed: its identity becomes the observed one, and dependents
		// whose references disagree with it are verified.
		observed := identityOf(e, obj)
		if observed != existing.identity {
			_, mismatched := partitionDependents(existing.dependentList(), observed)
			for _, dep := range mismatched {
				if observed.Namespace != "" && dep.identity.Namespace != observed.Namespace {
					log.V(2).Info("item references an owner but does not match namespaces", "item", dep.identity, "owner", observed)
					c.reportInvalidNamespaceOwnerRef(dep, observed.UID)
				}
				c.enqueueDelete(dep)
			}
			log.V(2).Info("replacing virtual item with observed item", "virtual", existing.identity, "observed", observed)
			existing.identity = observed
		}
		existing.virtual = false
	}
	switch {
	case (e.typ == addEvent || e.typ == updateEvent) && !found:
		n := &node{
			identity:           identityOf(e, obj),
			owners:             obj.GetOwnerReferences(),
			beingDeleted:       obj.GetDeletionTimestamp() != nil,
			deletingDependents: obj.GetDeletionTimestamp() != nil && hasFinalizer(obj, metav1.FinalizerDeleteDependents),
			orphaning:          isOrphaning(obj),
		}
		g.nodes[n.identity.UID] = n
		c.addDependentToOwners(log, n, n.owners)
		c.processTransitions(log, e.oldObj, obj, n)
	case e.typ == addEvent || e.typ == updateEvent:
		added, removed, changed := referencesDiffs(existing.owners, obj.GetOwnerReferences())
		if len(added) != 0 || len(removed) != 0 || len(changed) != 0 {
			c.addUnblockedOwnersToDeleteQueue(removed, changed)
			existing.owners = obj.GetOwnerReferences()
			c.addDependentToOwners(log, existing, added)
			c.removeDependentFromOwners(existing, removed)
		}
		if obj.GetDeletionTimestamp() != nil {
			existing.beingDeleted = true
		}
		existing.orphaning = isOrphaning(obj)
		if e.typ == addEvent {
			// A known node added again (Resync): its cluster-scoped owners may have
			// started waiting while its key could not be queued.
			for _, ref := range existing.owners {
				if owner, ok := g.nodes[ref.UID]; ok {
					c.queueForWaitingClusterOwner(log, existing, owner)
				}
			}
		}
		c.processTransitions(log, e.oldObj, obj, existing)
	case e.typ == deleteEvent:
		if !found {
			log.V(5).Info("item doesn't exist in the graph, this shouldn't happen", "uid", obj.GetUID())
			return
		}
		c.processDelete(e, obj, existing)
	}
}

// processDelete removes a deleted node (or, for a virtual delete whose coordinates
// disagree with some dependents', only verifies those that match) and queues its
// dependents and its owners waiting for their dependents.
func (c *Controller) processDelete(e *event, obj metav1.Object, existing *node) {
	g := c.graph
	remove := true
	if e.virtual {
		deleted := identityOf(e, obj)
		if existing.virtual {
			// The owner was verified absent under the coordinates of this virtual node.
			// Dependents naming other coordinates may still point at a real object.
			if matching, mismatched := partitionDependents(existing.dependentList(), deleted); len(mismatched) > 0 {
				remove = false
				if len(matching) > 0 {
					c.absent.Add(deleted)
					for _, dep := range matching {
						c.enqueueDelete(dep)
					}
				}
				if existing.identity == deleted {
					if alt := alternateOwnerIdentity(mismatched, deleted); alt != nil {
						existing.identity = *alt
						existing.wantDelete.Store(true)
						c.attemptToDelete.AddRateLimited(existing.key())
					}
				}
			}
		} else if existing.identity != deleted {
			// An observed object lives under other coordinates than a dependent named:
			// keep it, verify the dependents that named the absent ones.
			remove = false
			matching, _ := partitionDependents(existing.dependentList(), deleted)
			if len(matching) > 0 {
				c.absent.Add(deleted)
				for _, dep := range matching {
					c.enqueueDelete(dep)
				}
			}
		}
	}
	if !remove {
		return
	}
	delete(g.nodes, existing.identity.UID)
	if existing.identity.Namespace == "" {
		c.remoteRetry.Forget(existing.identity.UID)
	}
	c.removeDependentFromOwners(existing, existing.owners)
	if len(existing.dependents) > 0 {
		c.absent.Add(identityOf(e, obj))
	}
	for dep := range existing.dependents {
		c.enqueueDelete(dep)
	}
	for _, ref := range existing.owners {
		if owner, ok := g.nodes[ref.UID]; ok && owner.deletingDependents {
			c.enqueueDelete(owner)
		}
	}
}

// addDependentToOwners links n to the owners refs names, creating virtual nodes for
// owners not in the graph (queued for a live check), and queues n when a reference may be
// invalid: its owner lives in another namespace (recorded as upstream's
// OwnerRefInvalidNamespace event when the owner was observed), its coordinates disagree
// with the observed owner's, or a cluster-scoped virtual owner is named from a namespace.
func (c *Controller) addDependentToOwners(log logr.Logger, n *node, refs []metav1.OwnerReference) {
	g := c.graph
	suspect := false
	for _, ref := range refs {
		owner, ok := g.nodes[ref.UID]
		if !ok {
			// A virtual owner lives in its dependent's namespace, unless its kind is
			// known to be cluster-scoped: then it has none (its live read is
			// cluster-wide), and it is verified by its dependent's shard (verifiedIn).
			// A kind not known yet keeps the dependent's namespace, as upstream.
			ns, verifiedIn := n.identity.Namespace, ""
			if _, namespaced, err := c.resources.mapping(ref.APIVersion, ref.Kind); err == nil && !namespaced {
				ns, verifiedIn = "", n.identity.Namespace
			}
			owner = &node{
				identity:   objectReference{OwnerReference: coordinates(ref), Namespace: ns},
				virtual:    true,
				verifiedIn: verifiedIn,
			}
			log.V(5).Info("add virtual item", "identity", owner.identity)
			g.nodes[ref.UID] = owner
		}
		if owner.dependents == nil {
			owner.dependents = map[*node]struct{}{}
		}
		owner.dependents[n] = struct{}{}
		if ok {
			c.queueForWaitingClusterOwner(log, n, owner)
		}
		switch {
		case !ok:
			c.enqueueDelete(owner)
		case suspect:
		case owner.identity.Namespace != "" && owner.identity.Namespace != n.identity.Namespace:
			if !owner.virtual {
				log.V(2).Info("item references an owner but does not match namespaces", "item", n.identity, "owner", owner.identity)
				c.reportInvalidNamespaceOwnerRef(n, ref.UID)
			}
			suspect = true
		case !matchesCoordinates(ref, owner.identity.OwnerReference):
			if !owner.virtual {
				log.V(2).Info("item references an owner with coordinates that do not match the observed identity", "item", n.identity, "owner", owner.identity)
			}
			suspect = true
		case owner.identity.Namespace == "" && owner.identity.Namespace != n.identity.Namespace && owner.virtual:
			// A cluster-scoped virtual owner named from a namespace may really be a
			// namespaced owner that is missing (kubernetes#98040).
			suspect = true
		}
	}
	if suspect {
		c.enqueueDelete(n)
	}
}

// queueForWaitingClusterOwner queues n, a new dependent of owner, when owner is a
// cluster-scoped owner already being deleted with the orphan finalizer (n's references
// to it are to be removed) or in the foreground (n is to be deleted): the owner's own
// item is worked only by the cluster partition's holder, and n may have reached this
// shard's graph after the owner's transition (a partition moved here, a warm-up). The
// caller holds the graph's lock.
func (c *Controller) queueForWaitingClusterOwner(log logr.Logger, n, owner *node) {
	if owner.virtual || owner.identity.Namespace != "" || n.identity.Namespace == "" {
		return
	}
	switch {
	case owner.orphaning:
		log.V(5).Info("add dependent of an orphaning cluster-scoped owner to attemptToOrphan", "item", n.identity, "owner", owner.identity)
		c.enqueueOrphanRefs(n)
	case owner.deletingDependents:
		log.V(5).Info("add dependent of a cluster-scoped owner deleting its dependents to attemptToDelete", "item", n.identity, "owner", owner.identity)
		c.enqueueDelete(n)
	}
}

// reportInvalidNamespaceOwnerRef records upstream's Warning OwnerRefInvalidNamespace on
// n for its reference to owner, which lives in another namespace.
func (c *Controller) reportInvalidNamespaceOwnerRef(n *node, owner types.UID) {
	for _, ref := range n.owners {
		if ref.UID != owner {
			continue
		}
		invalid := objectReference{OwnerReference: coordinates(ref), Namespace: n.identity.Namespace}
		if c.recorder != nil {
			c.recorder.Eventf(&corev1.ObjectReference{
				Kind: n.identity.Kind, APIVersion: n.identity.APIVersion, Namespace: n.identity.Namespace,
				Name: n.identity.Name, UID: n.identity.UID,
			}, corev1.EventTypeWarning, "OwnerRefInvalidNamespace", "ownerRef %s does not exist in namespace %q", invalid, n.identity.Namespace)
		}
		return
	}
}

// removeDependentFromOwners unlinks n from the owners refs names. A virtual owner left
// without dependents is dropped: nothing refers to it any more (a partition's release
// removes its objects this way, which upstream's graph never sees).
func (c *Controller) removeDependentFromOwners(n *node, refs []metav1.OwnerReference) {
	for _, ref := range refs {
		owner, ok := c.graph.nodes[ref.UID]
		if !ok {
			continue
		}
		delete(owner.dependents, n)
		if owner.virtual && len(owner.dependents) == 0 {
			delete(c.graph.nodes, ref.UID)
		}
	}
}

type refPair struct{ old, cur metav1.OwnerReference }

// referencesDiffs compares two owner reference lists by UID.
func referencesDiffs(old, cur []metav1.OwnerReference) (added, removed []metav1.OwnerReference, changed []refPair) {
	byUID := make(map[types.UID]metav1.OwnerReference, len(old))
	for _, r := range old {
		byUID[r.UID] = r
	}
	for _, r := range cur {
		o, ok := byUID[r.UID]
		if !ok {
			added = append(added, r)
			continue
		}
		if !reflect.DeepEqual(o, r) {
			changed = append(changed, refPair{old: o, cur: r})
		}
		delete(byUID, r.UID)
	}
	for _, r := range old {
		if _, ok := byUID[r.UID]; ok {
			removed = append(removed, r)
		}
	}
	return added, removed, changed
}

// addUnblockedOwnersToDeleteQueue queues owners a dependent stopped blocking (its
// reference removed, or no longer blockOwnerDeletion): one waiting for its dependents may
// now finish.
func (c *Controller) addUnblockedOwnersToDeleteQueue(removed []metav1.OwnerReference, changed []refPair) {
	for _, ref := range removed {
		if isBlocking(ref) {
			if owner, ok := c.graph.nodes[ref.UID]; ok {
				c.enqueueDelete(owner)
			}
		}
	}
	for _, p := range changed {
		if isBlocking(p.old) && !isBlocking(p.cur) {
			if owner, ok := c.graph.nodes[p.cur.UID]; ok {
				c.enqueueDelete(owner)
			}
		}
	}
}

// isOrphaning reports whether obj is being deleted with the orphan finalizer.
func isOrphaning(obj metav1.Object) bool {
	return obj.GetDeletionTimestamp() != nil && hasFinalizer(obj, metav1.FinalizerOrphanDependents)
}

func hasFinalizer(obj metav1.Object, finalizer string) bool {
	for _, f := range obj.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}

// deletionStartsWithFinalizer reports whether obj is being deleted with finalizer and
// old (nil for an add) was not.
func deletionStartsWithFinalizer(old any, obj metav1.Object, finalizer string) bool {
	if obj.GetDeletionTimestamp() == nil || !hasFinalizer(obj, finalizer) {
		return false
	}
	if old == nil {
		return true
	}
	o, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	return o.GetDeletionTimestamp() == nil || !hasFinalizer(o, finalizer)
}

// processTransitions queues n for orphaning when its deletion starts with the orphan
// finalizer, and marks it deletingDependents and queues it and its dependents when it
// starts with foregroundDeletion. A cluster-scoped n's namespaced dependents are queued
// for orphaning too, keyed by themselves: n's own key is worked only by the cluster
// partition's holder, theirs by their namespaces' shards (doc.go, "Across shards").
func (c *Controller) processTransitions(log logr.Logger, old any, obj metav1.Object, n *node) {
	if deletionStartsWithFinalizer(old, obj, metav1.FinalizerOrphanDependents) {
		log.V(5).Info("add item to attemptToOrphan", "item", n.identity)
		c.enqueueOrphan(n)
		if n.identity.Namespace == "" {
			for dep := range n.dependents {
				if dep.identity.Namespace != "" {
					c.enqueueOrphanRefs(dep)
				}
			}
		}
		return
	}
	if deletionStartsWithFinalizer(old, obj, metav1.FinalizerDeleteDependents) {
		log.V(2).Info("add item to attemptToDelete, because it's waiting for its dependents to be deleted", "item", n.identity)
		n.deletingDependents = true
		for dep := range n.dependents {
			c.enqueueDelete(dep)
		}
		c.enqueueDelete(n)
	}
}

// partitionDependents splits deps into those whose reference to owner's UID matches its
// coordinates (and namespace, for a namespaced owner) and those with one that does not.
func partitionDependents(deps []*node, owner objectReference) (matching, mismatched []*node) {
	namespaced := owner.Namespace != ""
	for _, dep := range deps {
		match, mismatch := false, false
		if namespaced && owner.Namespace != dep.identity.Namespace {
			mismatch = true
		} else {
			for _, ref := range dep.owners {
				if ref.UID == owner.UID {
					if matchesCoordinates(ref, owner.OwnerReference) {
						match = true
					} else {
						mismatch = true
					}
				}
			}
		}
		if match {
			matching = append(matching, dep)
		}
		if mismatch {
			mismatched = append(mismatched, dep)
		}
	}
	return matching, mismatched
}

func referenceLess(a, b objectReference) bool {
	switch {
	case a.Kind != b.Kind:
		return a.Kind < b.Kind
	case a.APIVersion != b.APIVersion:
		return a.APIVersion < b.APIVersion
	case a.Namespace != b.Namespace:
		return a.Namespace < b.Namespace
	case a.Name != b.Name:
		return a.Name < b.Name
	}
	return a.UID < b.UID
}

// alternateOwnerIdentity picks the next identity to verify for a virtual owner whose
// identity absent was verified absent, among the coordinates deps name for its UID: the
// first after absent in a fixed order, else the first (so every one is tried in turn).
func alternateOwnerIdentity(deps []*node, absent objectReference) *objectReference {
	clusterScoped := absent.Namespace == ""
	seen := map[objectReference]bool{absent: true}
	var first, next *objectReference
	for _, dep := range deps {
		for _, ref := range dep.owners {
			if ref.UID != absent.UID {
				continue
			}
			if matchesCoordinates(ref, absent.OwnerReference) && (clusterScoped || absent.Namespace == dep.identity.Namespace) {
				continue
			}
			alt := objectReference{OwnerReference: coordinates(ref), Namespace: dep.identity.Namespace}
			if clusterScoped && alt.APIVersion == absent.APIVersion && alt.Kind == absent.Kind {
				alt.Namespace = ""
			}
			if seen[alt] {
				continue
			}
			seen[alt] = true
			a := alt
			if first == nil || referenceLess(a, *first) {
				first = &a
			}
			if referenceLess(absent, a) && (next == nil || referenceLess(a, *next)) {
				next = &a
			}
		}
	}
	if next != nil {
		return next
	}
	return first
}

package garbagecollector

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// objectReference is a node's identity: the coordinates of an owner reference (apiVersion,
// kind, name, uid; never controller or blockOwnerDeletion, so that identities compare by
// value) and a namespace ("" for cluster-scoped objects).
type objectReference struct {
	metav1.OwnerReference
	Namespace string
}

// String renders r as upstream does, which its OwnerRefInvalidNamespace event message
// carries: "[apiVersion/kind, namespace: ns, name: n, uid: u]".
func (r objectReference) String() string {
	return fmt.Sprintf("[%s/%s, namespace: %s, name: %s, uid: %s]", r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID)
}

// coordinates keeps only the fields of ref that identify its owner.
func coordinates(ref metav1.OwnerReference) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
}

// matchesCoordinates reports whether a and b name the same owner by uid, name, kind and
// apiVersion.
func matchesCoordinates(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.Name == b.Name && a.Kind == b.Kind && a.APIVersion == b.APIVersion
}

// isBlocking reports whether ref holds back its owner's foreground deletion.
func isBlocking(ref metav1.OwnerReference) bool {
	return ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion
}

// node is one object of the dependency graph, observed through an informer, or virtual:
// an owner some dependent names that no informer has shown (yet). Its fields other than
// the want bits are guarded by the graph's lock; only the graph builder's goroutine
// writes them.
type node struct {
	identity objectReference
	owners   []metav1.OwnerReference
	// dependents is nil until the node has one: most objects (pods) never do.
	dependents map[*node]struct{}
	// virtual: not observed by an informer; its identity comes from a dependent's
	// reference, with the dependent's namespace (none for a kind known to be
	// cluster-scoped).
	virtual bool
	// verifiedIn is, for a virtual node of a cluster-scoped kind, the namespace of the
	// dependent that named it: its key's namespace, so that the dependent's shard, whose
	// graph holds the dependent, verifies it (a "<uid>" key would be worked only by the
	// cluster partition's holder, whose graph may not hold the dependent, and the
	// dependent would never be collected). Once observed, the node is keyed "<uid>".
	verifiedIn string
	// beingDeleted: it has a deletionTimestamp (never turns off).
	beingDeleted bool
	// deletingDependents: being deleted with the foregroundDeletion finalizer.
	deletingDependents bool
	// orphaning: being deleted with the orphan finalizer (as last observed).
	orphaning bool
	// wantDelete and wantOrphan are set whenever the node's key is added to a queue and
	// cleared when a worker takes it: a key the shard's gate dropped (its partition was
	// not held) keeps its bit, and Resync queues it again once the partition is held.
	wantDelete atomic.Bool
	wantOrphan atomic.Bool
	// wantOrphanRefs is attemptToOrphan's bit for n as a dependent: its references to
	// cluster-scoped owners that are orphaning are to be removed (the dependent's shard
	// does this; see doc.go, "Across shards").
	wantOrphanRefs atomic.Bool
	// ownerLookedUp: one of n's virtual owners was looked for in every namespace
	// (reportOwnerElsewhere); n gets no other such lookup.
	ownerLookedUp atomic.Bool
}

// key is the node's queue key: "<namespace>/<uid>", or "<uid>" when cluster-scoped. UIDs
// hold no "/", so the shard's gate maps it to the namespace's partition, or the cluster
// partition.
func (n *node) key() string {
	ns := n.identity.Namespace
	if n.virtual && ns == "" {
		ns = n.verifiedIn
	}
	if ns == "" {
		return string(n.identity.UID)
	}
	return ns + "/" + string(n.identity.UID)
}

// parseKey returns the namespace and UID of a queue key.
func parseKey(key string) (namespace string, uid types.UID) {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i], types.UID(key[i+1:])
	}
	return "", types.UID(key)
}

func (n *node) dependentList() []*node {
	out := make([]*node, 0, len(n.dependents))
	for d := range n.dependents {
		out = append(out, d)
	}
	return out
}

// blockingDependents are the dependents whose reference to n has blockOwnerDeletion.
func (n *node) blockingDependents() []*node {
	var out []*node
	for d := range n.dependents {
		for _, ref := range d.owners {
			if ref.UID == n.identity.UID && isBlocking(ref) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// orphaningClusterOwners returns the UIDs of n's cluster-scoped, observed owners that
// are being deleted with the orphan finalizer. The caller holds the graph's lock.
func (g *graph) orphaningClusterOwners(n *node) []types.UID {
	var out []types.UID
	for _, ref := range n.owners {
		if o, ok := g.nodes[ref.UID]; ok && o.orphaning && !o.virtual && o.identity.Namespace == "" && !slices.Contains(out, ref.UID) {
			out = append(out, ref.UID)
		}
	}
	return out
}

// graph is the dependency graph: nodes by UID. The graph builder is its only writer;
// workers read it under the read lock.
type graph struct {
	mu    sync.RWMutex
	nodes map[types.UID]*node
}

func newGraph() *graph { return &graph{nodes: map[types.UID]*node{}} }

// absentOwnerCacheSize is upstream's size of the cache of owners known absent.
const absentOwnerCacheSize = 500

// absentOwners is a bounded LRU of owner identities verified absent (NotFound, or
// another UID), keyed by coordinates and, for namespaced owners, the namespace looked
// in: a dependent whose owner is in it is dangling without a live GET.
type absentOwners struct{ cache *lru.Cache }

func newAbsentOwners(size int) *absentOwners { return &absentOwners{cache: lru.New(size)} }

func (a *absentOwners) Add(r objectReference) { a.cache.Add(r, nil) }

func (a *absentOwners) Has(r objectReference) bool {
	_, ok := a.cache.Get(r)
	return ok
}

// Clear forgets everything: Resync's way of dropping entries a partition's release may
// have added for owners that still exist (entries are not indexed by namespace; a
// cleared entry costs one live GET).
func (a *absentOwners) Clear() { a.cache.Clear() }

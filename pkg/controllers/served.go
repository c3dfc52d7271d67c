package controllers

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// ServedResources is what a controller that acts on every resource the API server serves
// asks for (the garbage collector, ResourceQuota): resources no Descriptor can list,
// found by discovery in each group's preferred version and kept current while the shard
// runs (a CRD created or deleted, an aggregated API registered), each read through a
// metadata-only informer that is sharded like every other (namespaced: only the shard's
// partitions). The shard shares the informers between the controllers that ask.
type ServedResources struct {
	// Verbs are the verbs every such resource supports: at least list and watch (the
	// garbage collector adds delete).
	Verbs []string
	// NamespacedOnly leaves cluster-scoped resources out.
	NamespacedOnly bool
	// Ignore are resources the controller never acts on, whatever they support
	// (upstream's garbage collector ignores events).
	Ignore []schema.GroupResource
	// Permissions are the verbs the controller needs on each such resource beyond list
	// and watch (the garbage collector's get, patch and delete). RBAC grants them, with
	// list and watch, on every resource of every group ("*"/"*"): a resource served later
	// cannot be named now. Never "*".
	Permissions []string
}

// validate reports a ServedResources the shard cannot serve.
func (s ServedResources) validate() error {
	for _, v := range []string{"list", "watch"} {
		if !slices.Contains(s.Verbs, v) {
			return fmt.Errorf("a descriptor's Served.Verbs %v must include %q: the shard watches every resource it finds", s.Verbs, v)
		}
	}
	if slices.Contains(s.Verbs, "*") || slices.Contains(s.Permissions, "*") {
		return fmt.Errorf("served resources: a verb is never a wildcard (Verbs %v, Permissions %v)", s.Verbs, s.Permissions)
	}
	return nil
}

// permission is the rule Served needs: list, watch and Permissions on every resource.
func (s ServedResources) permission() Permission {
	verbs := []string{"list", "watch"}
	for _, v := range s.Permissions {
		if !slices.Contains(verbs, v) {
			verbs = append(verbs, v)
		}
	}
	return Permission{Group: "*", Resource: "*", Verbs: verbs}
}

// ServedResource is one resource served by the API server, in its group's preferred
// version.
type ServedResource struct {
	schema.GroupVersionResource
	// Kind is its kind, as discovery names it.
	Kind string
	// Namespaced reports whether its objects live in namespaces.
	Namespaced bool
}

// ServedInformers hands a controller the resources its Descriptor's Served asks for.
type ServedInformers interface {
	// Subscribe registers s before the shard starts: it then hears of every resource
	// found, and of every one that is gone, one call at a time.
	Subscribe(s ServedSubscriber)
	// Failing reports whether the lists of r fail now (an aggregated API whose backend is
	// down, a CRD whose conversion webhook fails): its informer's store may then miss
	// objects of any namespace, and a controller that counts them (ResourceQuota) must
	// not trust it. Resources of the API server's built-in groups never fail so: the shard
	// waits for them as for every informer a controller declares.
	Failing(r ServedResource) bool
}

// ServedSubscriber is a controller's side of ServedInformers. The informers it is handed
// may hold typed objects (where another controller reads the resource typed, the shard
// shares that informer, as kube-controller-manager does) or *metav1.PartialObjectMetadata:
// read them through meta.Accessor.
type ServedSubscriber interface {
	// Added hands it a resource now served, with its informer (shared, already
	// started; its store fills as partitions are prepared). Add event handlers to it.
	Added(r ServedResource, informer toolscache.SharedIndexInformer)
	// Removed says a resource it was handed is no longer served: its informer is
	// stopped; drop it.
	Removed(r ServedResource)
}

// Resyncer is a controller with work that no Primary key brings back after a restart: the
// keys of served resources (the garbage collector's "<namespace>/<uid>" and "<uid>"), or
// objects whose owner is gone (Endpoints left behind by a deleted Service). When the shard
// starts working partitions, the runtime adds the keys of cached Primary objects to the
// controller's queues and then calls Resync, and the controller adds what else it would
// work after a restart. The shard's stores already hold scope's objects then (Prepare),
// though event handlers may not all have run yet. A descriptor whose Served is set and
// whose Primary (or a queue's Primary) is empty must build a Controller that implements
// it.
type Resyncer interface {
	Resync(scope Scope)
}

// DiscoveryFailureCounter is a controller of served resources that counts the shard's
// failed discovery rounds (wholly or for some groups, or empty) in a metric of its own, as
// kube-controller-manager's garbage collector counts them in
// garbagecollector_controller_resources_sync_error_total. The shard calls it once per
// such round.
type DiscoveryFailureCounter interface {
	DiscoveryFailed()
}

// Scope names the objects of the partitions the shard starts working: those of
// Namespaces, and every cluster-scoped one when Cluster is set.
type Scope struct {
	Namespaces []string
	Cluster    bool
}

package served

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Spec says which served resources a consumer wants.
type Spec struct {
	// Verbs are the verbs every wanted resource supports: the garbage collector's
	// delete, list and watch, for example. Informers need list and watch at least.
	Verbs []string
	// NamespacedOnly leaves cluster-scoped resources out (ResourceQuota counts
	// namespaced objects only).
	NamespacedOnly bool
	// Ignore are resources never wanted, whatever they support (upstream's garbage
	// collector ignores events, for example).
	Ignore []schema.GroupResource
}

// Validate reports a Spec a consumer could not use: informers need list and watch.
func (s Spec) Validate() error {
	for _, v := range []string{"list", "watch"} {
		if !slices.Contains(s.Verbs, v) {
			return fmt.Errorf("served: a Spec's Verbs must include %q: the shard watches what it finds (got %v)", v, s.Verbs)
		}
	}
	return nil
}

// Resource is one served resource, in its group's preferred version.
type Resource struct {
	schema.GroupVersionResource
	// Kind is the resource's kind, as discovery names it.
	Kind string
	// Namespaced reports whether its objects live in namespaces.
	Namespaced bool
}

// Set holds served resources by GroupVersionResource.
type Set map[schema.GroupVersionResource]Resource

// Sorted returns the set's resources ordered by group, resource and version, so that logs
// and the informers started from them come in a stable order.
func (s Set) Sorted() []Resource {
	out := make([]Resource, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	sortResources(out)
	return out
}

func sortResources(rs []Resource) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i].GroupVersionResource, rs[j].GroupVersionResource
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Version < b.Version
	})
}

// Discover asks d for the resources it serves, each in its group's preferred version, and
// returns those spec wants. Groups whose discovery failed (an aggregated API server that
// is down, for example) are left out of the set and returned in failed; err is set only
// when discovery failed as a whole, and then the set is nil.
func Discover(d discovery.ServerResourcesInterface, spec Spec) (found Set, failed map[schema.GroupVersion]error, err error) {
	lists, failed, err := Preferred(d)
	if err != nil {
		return nil, nil, err
	}
	return spec.Select(lists), failed, nil
}

// Preferred asks d for the resources it serves, each in its group's preferred version:
// one discovery for every Spec of a round. Groups whose discovery failed are returned in
// failed; err is set only when discovery failed as a whole.
func Preferred(d discovery.ServerResourcesInterface) (lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error, err error) {
	lists, err = d.ServerPreferredResources()
	if err != nil {
		var partial *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &partial) {
			return nil, nil, fmt.Errorf("served: discovery: %w", err)
		}
		failed = partial.Groups
	}
	return lists, failed, nil
}

// Select returns the resources of lists (Preferred's) that s wants.
func (s Spec) Select(lists []*metav1.APIResourceList) Set {
	ignored := map[schema.GroupResource]bool{}
	for _, gr := range s.Ignore {
		ignored[gr] = true
	}
	found := Set{}
	for _, list := range discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: s.Verbs}, lists) {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			// Discovery answered something that is not a group version: leave it out,
			// as upstream does, rather than fail every other resource.
			continue
		}
		for _, r := range list.APIResources {
			if !wanted(r, s, ignored, gv) {
				continue
			}
			gvr := gv.WithResource(r.Name)
			found[gvr] = Resource{GroupVersionResource: gvr, Kind: r.Kind, Namespaced: r.Namespaced}
		}
	}
	return found
}

// wanted reports whether spec wants r, one of group version gv's resources.
func wanted(r metav1.APIResource, spec Spec, ignored map[schema.GroupResource]bool, gv schema.GroupVersion) bool {
	switch {
	case r.Name == "" || r.Kind == "":
		return false
	case spec.NamespacedOnly && !r.Namespaced:
		return false
	case ignored[gv.WithResource(r.Name).GroupResource()]:
		return false
	}
	return true
}

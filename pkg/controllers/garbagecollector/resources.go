package garbagecollector

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// served is one resource the controller was handed, with its informer and the
// registration of its event handlers.
type served struct {
	res      controllers.ServedResource
	kind     *kindInfo // shared by the resource's events
	informer toolscache.SharedIndexInformer
	reg      toolscache.ResourceEventHandlerRegistration
}

// resources maps kinds to the served resources handed to Added: upstream's RESTMapper,
// limited to what the shard serves to the garbage collector.
type resources struct {
	mu     sync.RWMutex
	byGVR  map[schema.GroupVersionResource]*served
	byKind map[schema.GroupKind]*served
}

func newResources() *resources {
	return &resources{byGVR: map[schema.GroupVersionResource]*served{}, byKind: map[schema.GroupKind]*served{}}
}

// restMappingError is upstream's: an owner reference's kind is not known (a CRD not yet
// discovered, or a group/version that is not served). It is retried quietly: discovery
// may still bring it.
type restMappingError struct{ kind, apiVersion string }

func (e *restMappingError) Error() string {
	return fmt.Sprintf("unable to get REST mapping for %s/%s", e.apiVersion, e.kind)
}

// mapping returns the resource of kind in apiVersion and whether it is namespaced. It
// maps by group and kind: the served resource is in its group's preferred version, and
// an object is read the same whichever version names it. A kind not served to the
// garbage collector is a restMappingError.
func (r *resources) mapping(apiVersion, kind string) (schema.GroupVersionResource, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false, &restMappingError{kind: kind, apiVersion: apiVersion}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.byKind[gv.WithKind(kind).GroupKind()]
	if !ok {
		return schema.GroupVersionResource{}, false, &restMappingError{kind: kind, apiVersion: apiVersion}
	}
	return s.res.GroupVersionResource, s.res.Namespaced, nil
}

// informer returns the informer of gvr, if it is served.
func (r *resources) informer(gvr schema.GroupVersionResource) toolscache.SharedIndexInformer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s, ok := r.byGVR[gvr]; ok {
		return s.informer
	}
	return nil
}

// all returns every served resource.
func (r *resources) all() []*served {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*served, 0, len(r.byGVR))
	for _, s := range r.byGVR {
		out = append(out, s)
	}
	return out
}

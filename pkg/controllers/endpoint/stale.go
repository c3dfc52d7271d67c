package endpoint

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// staleTracker remembers, per Endpoints, the resourceVersion it had before this controller
// updated it: while the cache still returns that version, it has not seen the update, and
// a sync computed against it could undo it (upstream's staleEndpointsTracker). Exact
// equality, not an order of resourceVersions: kshard's caches are fed by several watch
// streams, and resourceVersions are opaque.
type staleTracker struct {
	mu    sync.Mutex
	stale map[types.NamespacedName]string
}

func newStaleTracker() *staleTracker {
	return &staleTracker{stale: map[types.NamespacedName]string{}}
}

// markStale records ep's resourceVersion as one the cache must move past.
func (t *staleTracker) markStale(ep *corev1.Endpoints) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale[types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}] = ep.ResourceVersion
}

// isStale reports whether ep is a version this controller already replaced.
func (t *staleTracker) isStale(ep *corev1.Endpoints) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	rv, ok := t.stale[types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}]
	return ok && rv == ep.ResourceVersion
}

// forget drops the record of namespace/name.
func (t *staleTracker) forget(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.stale, types.NamespacedName{Namespace: namespace, Name: name})
}

// len is the number of Endpoints recorded (tests).
func (t *staleTracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.stale)
}

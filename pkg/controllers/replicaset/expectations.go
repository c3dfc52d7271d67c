package replicaset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// expectationsTTL is how long unobserved creates or deletes hold a ReplicaSet back at
// most (kube-controller-manager's ExpectationsTimeout): a lost watch event must not stop
// it for good.
const expectationsTTL = 5 * time.Minute

// expectations records, per ReplicaSet key, the pod creations and deletions the controller
// made and has not yet seen in its cache.
type expectations struct {
	clock clock.PassiveClock

	mu    sync.Mutex
	byKey map[string]*expectation
}

type expectation struct {
	adds     int
	deleting sets.Set[string] // pod keys (namespace/name) of deletes not yet observed
	since    time.Time
}

func newExpectations(c clock.PassiveClock) *expectations {
	return &expectations{clock: c, byKey: map[string]*expectation{}}
}

// satisfied reports whether the ReplicaSet may be managed: nothing is pending, or what
// is pending is older than expectationsTTL.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.byKey[key]
	if !ok {
		return true
	}
	return (x.adds <= 0 && x.deleting.Len() == 0) || e.clock.Since(x.since) > expectationsTTL
}

// pending returns the outstanding creations and deletions of key, for logs and tests.
func (e *expectations) pending(key string) (adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		return x.adds, x.deleting.Len()
	}
	return 0, 0
}

// expectCreations replaces key's expectations with n creations.
func (e *expectations) expectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey[key] = &expectation{adds: n, deleting: sets.New[string](), since: e.clock.Now()}
}

// expectDeletions replaces key's expectations with the deletion of podKeys.
func (e *expectations) expectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey[key] = &expectation{deleting: sets.New(podKeys...), since: e.clock.Now()}
}

// creationObserved counts one creation as seen (or as never going to be seen: a failed
// or skipped create).
func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.adds--
	}
}

// deletionObserved counts the deletion of podKey as seen, if it was expected.
func (e *expectations) deletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.deleting.Delete(podKey)
	}
}

// observeGone counts as seen every expected deletion that present no longer reports as a
// live pod: the cache already shows the deletion, whether or not its event reached the
// handlers (a cache handoff may have swallowed it).
func (e *expectations) observeGone(key string, present func(podKey string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.byKey[key]
	if !ok {
		return
	}
	for pk := range x.deleting {
		if !present(pk) {
			x.deleting.Delete(pk)
		}
	}
}

// forget drops key's expectations (the ReplicaSet is gone from the cache).
func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}

package job

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// expectationsTTL is how long unobserved creates or deletes hold a Job back at most
// (kube-controller-manager's ExpectationsTimeout): a lost watch event must not stop it for
// good.
const expectationsTTL = 5 * time.Minute

// expectations counts, per Job key, the pod creations and deletions the controller made
// and has not yet seen in its cache (upstream's ControllerExpectations): a Job is not
// managed again before they are seen, so a lagging cache never makes it create a pod
// twice.
type expectations struct {
	clock clock.PassiveClock

	mu    sync.Mutex
	byKey map[string]*expectation
}

type expectation struct {
	adds, dels int
	since      time.Time
}

func newExpectations(c clock.PassiveClock) *expectations {
	return &expectations{clock: c, byKey: map[string]*expectation{}}
}

// satisfied reports whether the Job may be managed.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.byKey[key]
	return !ok || (x.adds <= 0 && x.dels <= 0) || e.clock.Since(x.since) > expectationsTTL
}

func (e *expectations) expectCreations(key string, n int) { e.set(key, n, 0) }

func (e *expectations) expectDeletions(key string, n int) { e.set(key, 0, n) }

func (e *expectations) set(key string, adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey[key] = &expectation{adds: adds, dels: dels, since: e.clock.Now()}
}

func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.adds--
	}
}

func (e *expectations) deletionObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.byKey[key]; ok {
		x.dels--
	}
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}

// finalizerExpectations records, per Job key, the pods whose tracking finalizer the
// controller removed and has not yet seen removed in its cache: such a pod is already
// counted in the status (or in uncountedTerminatedPods), so a sync on a lagging cache must
// not count it again.
type finalizerExpectations struct {
	mu    sync.Mutex
	byKey map[string]sets.Set[types.UID]
}

func newFinalizerExpectations() *finalizerExpectations {
	return &finalizerExpectations{byKey: map[string]sets.Set[types.UID]{}}
}

// expected returns a copy of key's pending removals.
func (f *finalizerExpectations) expected(key string) sets.Set[types.UID] {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byKey[key].Clone()
}

func (f *finalizerExpectations) expectRemoved(key string, uids []types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.byKey[key]
	if !ok {
		s = sets.New[types.UID]()
		f.byKey[key] = s
	}
	s.Insert(uids...)
}

func (f *finalizerExpectations) removalObserved(key string, uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.byKey[key]; ok {
		s.Delete(uid)
	}
}

func (f *finalizerExpectations) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byKey, key)
}

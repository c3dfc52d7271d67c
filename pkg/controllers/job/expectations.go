package job

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

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

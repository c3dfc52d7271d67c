package horizontalpodautoscaling

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// selectorStore keeps, per namespace, the pod selector of each HPA's target (as its last
// sync found it), to refuse an HPA whose pods another HPA also scales
// (AmbiguousSelector), as upstream's selector store. An HPA is registered with a
// selector of nothing when it is added, and its selector set by its syncs.
type selectorStore struct {
	mu sync.RWMutex
	ns map[string]map[string]labels.Selector // namespace → HPA name → selector
}

func newSelectorStore() *selectorStore {
	return &selectorStore{ns: map[string]map[string]labels.Selector{}}
}

// putIfAbsent registers name with sel unless it is registered; true when it was not.
func (s *selectorStore) putIfAbsent(namespace, name string, sel labels.Selector) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ns[namespace]
	if m == nil {
		m = map[string]labels.Selector{}
		s.ns[namespace] = m
	}
	if _, ok := m[name]; ok {
		return false
	}
	m[name] = sel
	return true
}

// putIfPresent sets name's selector if it is registered; false when it is not (the HPA
// was deleted).
func (s *selectorStore) putIfPresent(namespace, name string, sel labels.Selector) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ns[namespace]
	if _, ok := m[name]; !ok {
		return false
	}
	m[name] = sel
	return true
}

// delete forgets name; true when it was registered.
func (s *selectorStore) delete(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ns[namespace]
	if _, ok := m[name]; !ok {
		return false
	}
	delete(m, name)
	if len(m) == 0 {
		delete(s.ns, namespace)
	}
	return true
}

// matching returns the names of the HPAs in namespace whose selector matches one of
// pods, sorted, stopping at limit (> 0).
func (s *selectorStore) matching(namespace string, pods []*corev1.Pod, limit int) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.ns[namespace]
	seen := map[string]bool{}
	var out []string
	sets := map[string]labels.Set{}
	for _, p := range pods {
		set := labels.Set(p.Labels)
		sets[set.String()] = set
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, set := range sets {
		for _, n := range names {
			if !seen[n] && m[n].Matches(set) {
				seen[n] = true
				out = append(out, n)
				if limit > 0 && len(out) >= limit {
					slices.Sort(out)
					return out
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

package controllertest

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// Served is controllers.ServedInformers for unit tests: the test plays the shard's
// discovery, handing every subscriber a resource and its informer (Add) or taking one
// back (Remove), one call at a time as the shard does.
type Served struct {
	mu   sync.Mutex
	subs []controllers.ServedSubscriber
	// Down are the resources Failing reports.
	Down map[schema.GroupVersionResource]bool
}

// Failing reports whether the test put r in Down.
func (s *Served) Failing(r controllers.ServedResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Down[r.GroupVersionResource]
}

var _ controllers.ServedInformers = (*Served)(nil)

// Subscribe registers sub.
func (s *Served) Subscribe(sub controllers.ServedSubscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, sub)
}

// Add tells every subscriber that r is served, read through informer.
func (s *Served) Add(r controllers.ServedResource, informer toolscache.SharedIndexInformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range s.subs {
		sub.Added(r, informer)
	}
}

// Remove tells every subscriber that r is no longer served.
func (s *Served) Remove(r controllers.ServedResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range s.subs {
		sub.Removed(r)
	}
}

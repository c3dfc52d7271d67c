package horizontalpodautoscaling

import "sync"

// histories holds each HPA's history by key ("namespace/name"). The queue never hands
// one key to two workers at once, so a history is only ever used by one sync; the lock
// guards the map, which handlers change too (a deleted HPA's history is dropped).
type histories struct {
	mu    sync.Mutex
	byKey map[string]*history
}

func newHistories() *histories { return &histories{byKey: map[string]*history{}} }

// get returns key's history, or nil when it has none yet.
func (s *histories) get(key string) *history {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[key]
}

// put stores h as key's history unless it already has one, and returns key's history.
func (s *histories) put(key string, h *history) *history {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.byKey[key]; cur != nil {
		return cur
	}
	s.byKey[key] = h
	return h
}

// drop forgets key's history.
func (s *histories) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byKey, key)
}

// len is how many HPAs have a history (tests).
func (s *histories) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

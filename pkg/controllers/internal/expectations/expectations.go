package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// Timeout is how long unobserved creations or deletions hold a key back at most
// (kube-controller-manager's ExpectationsTimeout): a lost watch event must not stop it for
// good.
const Timeout = 5 * time.Minute

// Expectations holds the pending creations and deletions of every key. It is safe for
// concurrent use by a controller's workers and informer handlers.
type Expectations struct {
	clock clock.PassiveClock

	mu    sync.Mutex
	byKey map[string]*pending
}

// pending is one key's expectations.
type pending struct {
	adds     int
	dels     int              // counted deletions not yet observed
	deleting sets.Set[string] // object keys (namespace/name) of tracked deletions not yet observed
	since    time.Time
}

// New returns Expectations that expire by c.
func New(c clock.PassiveClock) *Expectations {
	return &Expectations{clock: c, byKey: map[string]*pending{}}
}

// Satisfied reports whether key may be managed: nothing is pending, or what is pending is
// older than Timeout.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.byKey[key]
	if !ok {
		return true
	}
	return (p.adds <= 0 && p.dels <= 0 && p.deleting.Len() == 0) || e.clock.Since(p.since) > Timeout
}

// Pending returns key's outstanding creations and deletions (counted and tracked), for
// logs and tests.
func (e *Expectations) Pending(key string) (adds, dels int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		return p.adds, p.dels + p.deleting.Len()
	}
	return 0, 0
}

// ExpectCreations replaces key's expectations with n creations.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.set(key, &pending{adds: n})
}

// ExpectDeletions replaces key's expectations with n deletions, counted: each
// DeletionObserved lowers them by one, whichever object it was.
func (e *Expectations) ExpectDeletions(key string, n int) {
	e.set(key, &pending{dels: n})
}

// ExpectDeletionsOf replaces key's expectations with the deletions of the objects keyed
// objKeys (namespace/name), tracked: only their deletions count, each once.
func (e *Expectations) ExpectDeletionsOf(key string, objKeys []string) {
	e.set(key, &pending{deleting: sets.New(objKeys...)})
}

func (e *Expectations) set(key string, p *pending) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p.since = e.clock.Now()
	e.byKey[key] = p
}

// CreationObserved counts one creation of key's as seen (or as never going to be seen: a
// failed or skipped create).
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		p.adds--
	}
}

// DeletionObserved counts one of key's counted deletions as seen (or as never going to be
// seen: a failed delete).
func (e *Expectations) DeletionObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		p.dels--
	}
}

// DeletionOfObserved counts the tracked deletion of objKey as seen, if key expects it.
func (e *Expectations) DeletionOfObserved(key, objKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.byKey[key]; ok {
		p.deleting.Delete(objKey)
	}
}

// ObserveGone counts as seen every tracked deletion of key's whose object present no
// longer reports as live: the cache already shows the deletion, whether or not its event
// reached the handlers (a cache handoff may have swallowed it).
func (e *Expectations) ObserveGone(key string, present func(objKey string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.byKey[key]
	if !ok {
		return
	}
	for k := range p.deleting {
		if !present(k) {
			p.deleting.Delete(k)
		}
	}
}

// Forget drops key's expectations (its object is gone from the cache).
func (e *Expectations) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byKey, key)
}

package consistency

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// RVSource is an informer store that knows the newest resourceVersion it has applied
// (client-go's Store with the AtomicFIFO feature, on by default).
type RVSource interface {
	LastStoreSyncResourceVersion() string
}

// NamespacedRVSource is an RVSource that merges several watch streams whose
// resourceVersions are not ordered against each other (kshard's shard cache, when its
// server-side selector is split over slices): its store-wide resourceVersion says nothing
// about one namespace, so it tells, per namespace, the newest resourceVersion it has
// applied of the stream that carries the namespace.
type NamespacedRVSource interface {
	RVSource
	LastStoreSyncResourceVersionIn(namespace string) string
}

// StaleError fails a sync whose cache of Resource is older than the controller's own last
// write of it for that owner; the queue retries the key with backoff.
type StaleError struct {
	Resource    schema.GroupResource
	Read, Wrote string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("cache of %s at resourceVersion %s is older than this controller's write at %s; waiting for it",
		e.Resource, e.Read, e.Wrote)
}

// Store remembers, per owner key ("namespace/name") and UID, the newest resourceVersion
// the controller wrote of each resource, and compares them with its informers' stores.
type Store struct {
	stores map[schema.GroupResource]RVSource

	mu    sync.Mutex
	byKey map[string]*writes
}

type writes struct {
	uid types.UID
	rv  map[schema.GroupResource]string
}

// New returns a Store reading the informer stores of the given resources; writes of other
// resources never hold a sync back.
func New(stores map[schema.GroupResource]RVSource) *Store {
	return &Store{stores: stores, byKey: map[string]*writes{}}
}

// Wrote records that the controller wrote res at rv for the owner key with uid. A write
// for another UID of the same key (the owner was deleted and recreated) starts afresh.
func (c *Store) Wrote(key string, uid types.UID, res schema.GroupResource, rv string) {
	if rv == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.byKey[key]
	if w == nil || w.uid != uid {
		w = &writes{uid: uid, rv: map[schema.GroupResource]string{}}
		c.byKey[key] = w
	}
	if prev, ok := w.rv[res]; ok {
		if cmp, err := resourceversion.CompareResourceVersion(prev, rv); err == nil && cmp >= 0 {
			return
		}
	}
	w.rv[res] = rv
}

// Clear forgets key's writes; with a uid only if they were of that owner.
func (c *Store) Clear(key string, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.byKey[key]; w != nil && (uid == "" || w.uid == uid) {
		delete(c.byKey, key)
	}
}

// Ready returns a *StaleError while a store has not reached a recorded write of key, and
// forgets the writes once all have been reached. A store that cannot tell, or
// resourceVersions that do not compare, never hold a sync back. A NamespacedRVSource is
// asked about key's namespace.
func (c *Store) Ready(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.byKey[key]
	if w == nil {
		return nil
	}
	for res, wrote := range w.rv {
		store := c.stores[res]
		if store == nil {
			continue
		}
		var read string
		if ns, ok := store.(NamespacedRVSource); ok {
			namespace, _, found := strings.Cut(key, "/")
			if !found {
				namespace = "" // a cluster-scoped owner
			}
			read = ns.LastStoreSyncResourceVersionIn(namespace)
		} else {
			read = store.LastStoreSyncResourceVersion()
		}
		if read == "" {
			continue
		}
		if cmp, err := resourceversion.CompareResourceVersion(wrote, read); err == nil && cmp > 0 {
			return &StaleError{Resource: res, Read: read, Wrote: wrote}
		}
	}
	delete(c.byKey, key)
	return nil
}

package replicaset

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// rvSource is an informer store that knows the newest resourceVersion it has applied
// (client-go's Store with the AtomicFIFO feature, on by default).
type rvSource interface {
	LastStoreSyncResourceVersion() string
}

// resource names what a consistency record is about.
type resource string

const (
	resourcePods        resource = "pods"
	resourceReplicaSets resource = "replicasets"
)

// errStaleCache fails a sync whose caches are older than the controller's own last
// writes for that ReplicaSet; the queue retries it with backoff.
type errStaleCache struct {
	resource    resource
	read, wrote string
}

func (e *errStaleCache) Error() string {
	return fmt.Sprintf("cache of %s at resourceVersion %s is older than this controller's write at %s; waiting for it",
		e.resource, e.read, e.wrote)
}

// consistency makes a sync wait until the informers have seen what the previous sync of
// the same ReplicaSet wrote (kube-controller-manager's StaleControllerConsistencyReplicaSet,
// on by default in 1.37): it remembers, per ReplicaSet key and UID, the newest
// resourceVersion written of each resource. Expectations count pods; this also covers
// adoptions and the ReplicaSet's own status.
type consistency struct {
	stores map[resource]rvSource

	mu    sync.Mutex
	byKey map[string]*writes
}

type writes struct {
	uid types.UID
	rv  map[resource]string
}

func newConsistency(stores map[resource]rvSource) *consistency {
	return &consistency{stores: stores, byKey: map[string]*writes{}}
}

// wrote records that the controller wrote res at rv for the ReplicaSet key with uid.
func (c *consistency) wrote(key string, uid types.UID, res resource, rv string) {
	if rv == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.byKey[key]
	if w == nil || w.uid != uid {
		w = &writes{uid: uid, rv: map[resource]string{}}
		c.byKey[key] = w
	}
	if prev, ok := w.rv[res]; ok {
		if cmp, err := resourceversion.CompareResourceVersion(prev, rv); err == nil && cmp >= 0 {
			return
		}
	}
	w.rv[res] = rv
}

// clear forgets key's writes; with a uid only if they were of that ReplicaSet.
func (c *consistency) clear(key string, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.byKey[key]; w != nil && (uid == "" || w.uid == uid) {
		delete(c.byKey, key)
	}
}

// ready returns an errStaleCache while a store has not reached a recorded write of key,
// and forgets the writes once all have been reached. A store that cannot tell, or
// resourceVersions that do not compare, never hold a sync back.
func (c *consistency) ready(key string) error {
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
		read := store.LastStoreSyncResourceVersion()
		if read == "" {
			continue
		}
		if cmp, err := resourceversion.CompareResourceVersion(wrote, read); err == nil && cmp > 0 {
			return &errStaleCache{resource: res, read: read, wrote: wrote}
		}
	}
	delete(c.byKey, key)
	return nil
}

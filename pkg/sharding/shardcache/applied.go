package shardcache

// How far the store has applied each stream. A store's resourceVersion
// (LastStoreSyncResourceVersion) is the newest it has applied of one ordered stream;
// controllers compare it with their own writes to tell whether the cache has seen them yet
// (pkg/controllers/internal/consistency). A feed merging several streams (a selector split
// over slices) delivers them interleaved, so that value may belong to another stream,
// ahead of the one carrying a write. Such a feed's store therefore also answers per
// namespace: the newest resourceVersion applied of the stream carrying it. It keeps:
//   - A stream's applied position only grows, recorded by the informer's event handler,
//     which runs after the store has applied the change.
//   - Once the last relist's Replace has been applied, each stream counts as applied at
//     least as far as its list (or streamed initial events) ended.
//   - When streams split, each child counts as applied as far as its parent.

import (
	"strconv"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
)

// appliedState is the applied part of a feed's state (guarded by feed.mu).
type appliedState struct {
	// applied is the newest resourceVersion the store has applied of each stream
	// (2^appliedBits of them), as its event handler saw it.
	applied     []uint64
	appliedBits int
}

// feedInformer is the informer controllers get: client-go's, whose store also answers
// LastStoreSyncResourceVersionIn.
type feedInformer struct {
	toolscache.SharedIndexInformer
	store *feedStore
}

// GetStore returns the informer's indexer, with LastStoreSyncResourceVersionIn.
func (i *feedInformer) GetStore() toolscache.Store { return i.store }

// GetIndexer returns the informer's indexer, with LastStoreSyncResourceVersionIn.
func (i *feedInformer) GetIndexer() toolscache.Indexer { return i.store }

// feedStore is the informer's indexer with LastStoreSyncResourceVersionIn.
type feedStore struct {
	toolscache.Indexer
	f *feed
}

// LastStoreSyncResourceVersionIn returns the newest resourceVersion the store has
// applied of the stream that carries namespace's events ("" when unknown). With one
// stream it is the store's own resourceVersion.
func (s *feedStore) LastStoreSyncResourceVersionIn(namespace string) string {
	storeRV := s.Indexer.LastStoreSyncResourceVersion()
	f := s.f
	f.mu.Lock()
	if f.bits == 0 {
		f.mu.Unlock()
		return storeRV
	}
	f.alignAppliedLocked()
	k := hashrange.SliceOf(hashrange.Hash(namespace), f.appliedBits)
	pos := f.applied[k]
	relistRV, listed := f.relistRV, f.listedAt
	f.mu.Unlock()
	if k < len(listed) && f.storeCaughtUp(relistRV) {
		// The relist's Replace has been applied: each stream is at least where its list
		// (or streamed initial events) ended.
		pos = max(pos, listed[k])
	}
	if pos == 0 {
		return ""
	}
	return strconv.FormatUint(pos, 10)
}

// noteApplied records, from the informer's event handler (which runs after the store
// has applied the change), that the stream carrying obj's namespace has been applied up
// to obj's resourceVersion.
func (f *feed) noteApplied(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	rv, ok := parseRV(m.GetResourceVersion())
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bits == 0 {
		return // the store's own resourceVersion tells
	}
	f.alignAppliedLocked()
	k := hashrange.SliceOf(hashrange.Hash(m.GetNamespace()), f.appliedBits)
	f.applied[k] = max(f.applied[k], rv)
}

// alignAppliedLocked splits the applied positions into the streams' finer slices: a
// child stream has been applied at least as far as its parent.
func (f *feed) alignAppliedLocked() {
	if len(f.applied) > 0 && f.appliedBits >= f.bits {
		return
	}
	split := make([]uint64, 1<<f.bits)
	if len(f.applied) > 0 {
		shift := f.bits - f.appliedBits
		for i := range split {
			split[i] = f.applied[i>>shift]
		}
	}
	f.appliedBits, f.applied = f.bits, split
}

// appliedHandler keeps the feed's applied positions.
func (f *feed) appliedHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { f.noteApplied(obj) },
		UpdateFunc: func(_, obj any) { f.noteApplied(obj) },
		DeleteFunc: f.noteApplied,
	}
}

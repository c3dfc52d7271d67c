package shardcache

// Partitions: Prepare admits and warms them, Release revokes and drops them. It keeps:
//   - Admission changes here only, under Cache.mu, ahead of any work on the stores:
//     Prepare admits first (so the watch keeps the partition's events while it warms),
//     Release revokes first (so no event of the partition is queued behind its deletes).
//   - A partition has at most one warm-up (warmup.go), and at most one refresh running. A
//     Prepare (or Refresh) that gives up leaves it running and the next one waits for the
//     same; only Release (or the end of the Cache) stops it.
//   - Before the informers start, Prepare only admits: their first filtered list fills
//     every admitted partition at once.
//   - Release waits only for the partitions still not admitted: one prepared again
//     meanwhile is coming back on purpose.

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// ErrReleased is returned by Prepare when a partition it waits for is released before its
// objects are cached.
var ErrReleased = errors.New("sharding cache: partition released")

// partitionState is an admitted partition.
type partitionState struct {
	// warm is the partition's warm-up; nil when the partition was admitted before Start,
	// in which case the informers' first (filtered) list fills it.
	warm *warmup
	// refresh is the partition's latest second list (Refresh): a Refresh joins it while
	// it runs, so that a caller that gives up and asks again does not start over.
	refresh *warmup
}

// Prepare admits partitions and returns once their objects are in the store of every
// informer registered so far, so that the shard can answer Prepared.
//
// While the informers run, each partition is warmed without relisting the cluster: for
// every namespace of the partition and every resource type, the namespace's events are
// buffered, the namespace is listed (at most Options.WarmupConcurrency lists at a time),
// and the list is merged into the running watch in resourceVersion order — listed objects
// first, then the buffered events newer than the list, then a bookmark that restores the
// reflector's resourceVersion. A relist that happens meanwhile covers the partition
// instead.
//
// Before the informers start, the informers' first cluster-wide list, filtered, fills
// every prepared partition at once. After Run, the first Prepare arms the start (see
// Run) and every Prepare waits for that first list. Without Run or Start, Prepare only
// admits: the caller starts the cache itself and waits with WaitForCacheSync.
//
// Prepare is idempotent. If ctx ends first it returns ctx's error and the warm-up goes
// on; if a partition is released meanwhile it returns ErrReleased.
func (c *Cache) Prepare(ctx context.Context, partitions []partition.ID) error {
	logger := klog.FromContext(ctx)
	var waits []*warmup
	needInitial := false

	c.mu.Lock()
	c.adm.update(partitions, true)
	for _, p := range dedupe(partitions) {
		st := c.parts[p]
		if st == nil {
			st = &partitionState{}
			c.parts[p] = st
			if c.started {
				st.warm = c.startWarmupLocked(p)
				logger.V(2).Info("Warming partition", "partition", p)
			}
		}
		switch {
		case !c.started && c.lazyCtx == nil:
		case st.warm == nil:
			needInitial = true
		default:
			waits = append(waits, st.warm)
		}
	}
	if needInitial {
		c.armStartLocked()
	}
	if c.filter != nil && c.started {
		c.filter.prepared()
	}
	c.mu.Unlock()

	if needInitial {
		select {
		case <-c.firstSync:
		case <-ctx.Done():
			return ctx.Err()
		}
		// An informer created after Start is not covered by firstSync.
		if !c.informersSynced() {
			if err := c.WaitForCacheSync(ctx); err != nil {
				return err
			}
		}
		c.mu.Lock()
		for _, p := range partitions {
			if c.parts[p] == nil {
				c.mu.Unlock()
				return ErrReleased // released while the informers started
			}
		}
		c.mu.Unlock()
	}
	for _, w := range waits {
		select {
		case <-w.done:
			if w.err != nil {
				return w.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Prepared reports whether partition is admitted and its objects are cached (for a
// partition prepared before Start: whether the informers have synced).
func (c *Cache) Prepared(partition partition.ID) bool {
	c.mu.Lock()
	st := c.parts[partition]
	started := c.started
	c.mu.Unlock()
	switch {
	case st == nil || !started:
		return false
	case st.warm == nil:
		return c.informersSynced()
	default:
		select {
		case <-st.warm.done:
			return st.warm.err == nil
		default:
			return false
		}
	}
}

// Synced reports, for readiness, whether every partition of partitions is cached; the
// error names the first that is not.
func (c *Cache) Synced(partitions []partition.ID) error {
	if len(partitions) > 0 && !c.Started() {
		return errors.New("informers not started yet")
	}
	for _, p := range partitions {
		if !c.Prepared(p) {
			return fmt.Errorf("partition %d not synced", p)
		}
	}
	return nil
}

// Admitted returns the admitted partitions, sorted.
func (c *Cache) Admitted() []partition.ID {
	out := c.adm.list()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Release stops admitting partitions and drops their objects from every store: each
// cached object becomes a synthetic DELETED event, queued behind the events already on
// their way, so event handlers see the deletes in stream order and memory goes back
// down. Warm-ups of the partitions are cancelled (their Prepare returns ErrReleased).
//
// Release returns once the stores hold no object of the partitions, or with ctx's error;
// admission is revoked at once either way. Before Start it only revokes admission.
func (c *Cache) Release(ctx context.Context, partitions []partition.ID) error {
	logger := klog.FromContext(ctx)
	set := map[partition.ID]struct{}{}
	ps := dedupe(partitions)

	c.mu.Lock()
	for _, p := range ps {
		set[p] = struct{}{}
		if st := c.parts[p]; st != nil {
			if st.warm != nil {
				st.warm.cancel()
			}
			if st.refresh != nil {
				st.refresh.cancel()
			}
			delete(c.parts, p)
		}
	}
	c.adm.update(ps, false)
	feeds := append([]*feed(nil), c.order...)
	started := c.started
	c.mu.Unlock()

	tickets := make([]releaseTicket, len(feeds))
	for i, f := range feeds {
		tickets[i] = f.release(set)
	}
	if c.filter != nil && started {
		c.filter.released()
	}
	if !started {
		return nil
	}
	for _, p := range ps {
		logger.V(2).Info("Releasing partition", "partition", p)
	}
	return wait.PollUntilContextCancel(ctx, c.opts.PollInterval, true, func(context.Context) (bool, error) {
		// A partition prepared again meanwhile is no longer waited for: its objects
		// are coming back on purpose.
		var gone []partition.ID
		for _, p := range ps {
			if !c.adm.admitted(p) {
				gone = append(gone, p)
			}
		}
		for i, f := range feeds {
			if !f.releaseDone(tickets[i], gone) {
				return false, nil
			}
		}
		return true, nil
	})
}

// ClusterPartition is the partition whose holder works cluster-scoped objects.
func (c *Cache) ClusterPartition() partition.ID { return c.partitionOf(partition.ClusterKey) }

// NamespacesOf returns the namespaces of partition known to the Namespace informer.
func (c *Cache) NamespacesOf(partition partition.ID) []string {
	objs, err := c.nsInformer.GetIndexer().ByIndex(PartitionIndex, PartitionIndexValue(partition))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, objectName(o))
	}
	sort.Strings(out)
	return out
}

// NamespaceCount returns how many namespaces of partition the Namespace informer knows,
// without building or sorting their names: the shard's heartbeat counts every owned
// partition's namespaces each second, which at 10,000 namespaces made NamespacesOf a
// quarter of an idle shard's CPU.
func (c *Cache) NamespaceCount(partition partition.ID) int {
	keys, err := c.nsInformer.GetIndexer().IndexKeys(PartitionIndex, PartitionIndexValue(partition))
	if err != nil {
		return 0
	}
	return len(keys)
}

func dedupe(ps []partition.ID) []partition.ID {
	seen := make(map[partition.ID]struct{}, len(ps))
	out := make([]partition.ID, 0, len(ps))
	for _, p := range ps {
		if _, ok := seen[p]; !ok {
			seen[p] = struct{}{}
			out = append(out, p)
		}
	}
	return out
}

package shardcache

// Cluster-wide warm-up lists: when many namespace lists wait at once
// (Options.ClusterListThreshold), a feed serves them with one paged cluster-wide list of
// the type per round instead of one list per namespace (warmInBulk). It keeps:
//   - A round serves only the namespaces that were buffering before its list was issued,
//     so the list is newer than each buffer's start, as a namespace's own list would be;
//     warm-ups that start during a round wait for the next one.
//   - Each namespace of a round gets its own objects of the list, at the list's
//     resourceVersion, and is merged exactly as if it had been listed alone.
//   - A round first gathers its burst: it lists once no warm-up has joined for
//     Options.ClusterListGather, at the latest 10 times that after the first.
//   - In ModeServerFilter a round lists only once the selector covers every namespace of
//     it, with the selector of each namespace's slice.
//   - The loop runs while namespaces wait, on the Cache's context; a failed list is
//     retried with backoff.

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

// bulkState is the cluster-wide warm-up part of a feed's state (guarded by feed.mu).
type bulkState struct {
	// bulkRunning: the cluster-wide warm-up loop runs (warmInBulk).
	bulkRunning bool
	// bulkJoined is when a warm-up last joined the next cluster-wide round.
	bulkJoined time.Time
}

// warmInBulk serves every namespace of the feed that waits for its warm-up list, and
// those that begin to wait while it runs, with cluster-wide lists instead of one list per
// namespace: one paged list of the type per round, whose items are handed to each
// waiting namespace as if it had been listed on its own (at the list's resourceVersion).
// A round serves only the namespaces that were buffering before it started, so that its
// list is newer than the start of their buffers, as a namespace's own list would be; so
// each round first gathers the warm-ups of a burst (gather, see
// Options.ClusterListGather). The loop runs on ctx (the cache's) until no namespace waits.
func (f *feed) warmInBulk(ctx context.Context, pageSize int64, gather time.Duration) {
	f.mu.Lock()
	for _, s := range f.syncs {
		if s.state == syncBuffering && s.epoch == f.epoch && !s.listed && !s.bulk {
			s.bulk = true
			f.bulkJoined = time.Now()
		}
	}
	start := !f.bulkRunning
	f.bulkRunning = true
	f.mu.Unlock()
	if start {
		go f.runBulk(ctx, pageSize, gather)
	}
}

// gatherBulk waits until no warm-up has joined the next round for quiet, or for 10 ×
// quiet in all, or until ctx ends.
func (f *feed) gatherBulk(ctx context.Context, quiet time.Duration) {
	first := time.Now()
	for {
		f.mu.Lock()
		wait := untilQuiet(time.Now(), first, f.bulkJoined, quiet, 10*quiet)
		f.mu.Unlock()
		if wait <= 0 {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// inBulk reports whether the feed's cluster-wide warm-up loop runs: a warm-up that starts
// meanwhile joins it instead of listing its namespaces.
func (f *feed) inBulk() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bulkRunning
}

// bulkBatchLocked returns the namespaces the next cluster-wide round serves, with their syncs.
func (f *feed) bulkBatchLocked() map[string]*nsSync {
	batch := map[string]*nsSync{}
	for ns, s := range f.syncs {
		if s.bulk && s.state == syncBuffering && s.epoch == f.epoch && !s.listed {
			batch[ns] = s
		}
	}
	return batch
}

func (f *feed) runBulk(ctx context.Context, pageSize int64, gather time.Duration) {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}
	for {
		f.gatherBulk(ctx, gather)
		f.mu.Lock()
		batch := f.bulkBatchLocked()
		if len(batch) == 0 || ctx.Err() != nil {
			f.bulkRunning = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		// ModeServerFilter: list once the watch carries every namespace of the batch,
		// with the selector of their slice (see covers).
		bySel, ok := f.coversAll(batch)
		if !ok {
			for ns := range batch {
				f.filter.need(ns)
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		for sel, part := range bySel {
			if err := f.listBulk(ctx, sel, part, pageSize); err != nil {
				if ctx.Err() != nil {
					break // ends the loop above
				}
				f.logger.Error(err, "Cluster-wide warm-up list failed, retrying", "resource", f.rt.Name(), "namespaces", len(part))
				select {
				case <-time.After(backoff.Step()):
				case <-ctx.Done():
				}
				break
			}
		}
	}
}

// listBulk lists the namespaces of batch with one cluster-wide list (with selector) and
// completes their warm-ups.
func (f *feed) listBulk(ctx context.Context, selector string, batch map[string]*nsSync, pageSize int64) error {
	start := time.Now()
	items, rv, err := f.list(ctx, "", selector, pageSize, func(ns string) bool { return batch[ns] != nil }, &f.counters.bulkLists)
	if err != nil {
		return err
	}
	byNS := make(map[string][]runtime.Object, len(batch))
	for _, o := range items {
		ns, _, _ := objectKeys(o)
		byNS[ns] = append(byNS[ns], o)
	}
	for ns, s := range batch {
		f.completeSync(s, byNS[ns], rv)
	}
	f.logger.V(2).Info("Warmed namespaces with a cluster-wide list", "resource", f.rt.Name(),
		"namespaces", len(batch), "objects", len(items), "resourceVersion", rv, "duration", time.Since(start))
	return nil
}

// coversAll reports whether the feed's streams carry every namespace of batch (see
// covers), and returns the namespaces by the selector a cluster-wide list of them uses:
// the selector of their slice (one "" in ModeClientFilter).
func (f *feed) coversAll(batch map[string]*nsSync) (map[string]map[string]*nsSync, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filter == nil {
		return map[string]map[string]*nsSync{"": batch}, true
	}
	if !f.canReopenLocked() {
		return nil, false
	}
	bySel := map[string]map[string]*nsSync{}
	for ns, s := range batch {
		if !f.cov.set.Covers(ns) {
			return nil, false
		}
		sel := f.cov.sels[f.cov.set.SliceOf(ns)]
		if bySel[sel] == nil {
			bySel[sel] = map[string]*nsSync{}
		}
		bySel[sel][ns] = s
	}
	return bySel, true
}

package shardcache

// Starting the informers. It keeps:
//   - The informers start once (Start). After Run they start by themselves, once the first
//     Prepares pause for a tenth of Options.StartWindow (at most StartWindow after the
//     first), so that the first assignment is filled by one filtered cluster-wide list per
//     type instead of a list per namespace.
//   - firstSync is closed once every informer started by Start has synced: the thousands
//     of Prepares of a first assignment wait on it instead of each polling every informer.

import (
	"context"
	"errors"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Run hands the informers' start to the cache: the first Prepare after Run arms a timer,
// collecting the partitions of the shard's first assignment until no Prepare has come for
// a tenth of Options.StartWindow (at most StartWindow after the first), after which the
// informers start with ctx and their first lists fill every partition admitted so far.
// Prepare, after Run, returns only once its partitions are cached. Run returns at once;
// calling it after Start has no effect.
func (c *Cache) Run(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lazyCtx == nil {
		c.lazyCtx = ctx
	}
}

// armStartLocked notes a Prepare before the start and arms the start's timer once;
// c.mu must be held.
func (c *Cache) armStartLocked() {
	if c.started || c.lazyCtx == nil {
		return
	}
	now := time.Now()
	c.lastPrepare = now
	if c.startTimer != nil {
		return
	}
	c.firstPrepare = now
	quiet := c.opts.StartWindow / 10
	c.startTimer = time.AfterFunc(quiet, c.startWhenQuiet)
}

// startWhenQuiet starts the informers once Prepares have paused for a tenth of
// StartWindow or StartWindow has passed since the first, and otherwise waits again.
func (c *Cache) startWhenQuiet() {
	c.mu.Lock()
	wait := untilQuiet(time.Now(), c.firstPrepare, c.lastPrepare, c.opts.StartWindow/10, c.opts.StartWindow)
	if wait > 0 {
		c.startTimer.Reset(wait)
		c.mu.Unlock()
		return
	}
	ctx := c.lazyCtx
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Starting informers", "admittedPartitions", len(c.adm.list()), "resources", c.Resources())
	c.Start(ctx)
}

// Start runs the informers until ctx is done. Partitions prepared before Start are
// filled by the informers' first list, one filtered cluster-wide list per type instead of
// one list per namespace. Calling Start again has no effect.
func (c *Cache) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return
	}
	c.started = true
	c.runCtx = ctx
	for _, p := range c.plainOrder {
		c.runInformerLocked(p.key, p.inf)
	}
	synced := make([]toolscache.InformerSynced, 0, len(c.plainOrder)+len(c.order))
	for _, p := range c.plainOrder {
		synced = append(synced, p.synced())
	}
	for _, f := range c.order {
		c.runInformerLocked(f.rt.Key(), f.informer)
		synced = append(synced, syncedOrFailing(f.informer, f.health))
	}
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), synced...) {
			close(c.firstSync)
		}
	}()
}

// Started reports whether the informers run.
func (c *Cache) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// synced returns the HasSynced funcs of every informer.
func (c *Cache) syncedFuncs() []toolscache.InformerSynced {
	c.mu.Lock()
	defer c.mu.Unlock()
	var synced []toolscache.InformerSynced
	for _, p := range c.plainOrder {
		synced = append(synced, p.synced())
	}
	for _, f := range c.order {
		synced = append(synced, syncedOrFailing(f.informer, f.health))
	}
	return synced
}

// informersSynced asks every informer without building syncedFuncs' closures: it runs
// for every partition's Prepare and readiness check, thousands of times at a start.
func (c *Cache) informersSynced() bool {
	c.mu.Lock()
	plain, order := c.plainOrder, c.order // never changed in place: appended to or copied (remove.go), under c.mu
	c.mu.Unlock()
	for _, p := range plain {
		if !isSyncedOrFailing(p.inf, p.health) {
			return false
		}
	}
	for _, f := range order {
		if !isSyncedOrFailing(f.informer, f.health) {
			return false
		}
	}
	return true
}

// WaitForCacheSync waits until every informer has completed its first list, and so holds
// every partition prepared before Start. It returns ctx's error if ctx ends first.
func (c *Cache) WaitForCacheSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), c.syncedFuncs()...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("shardcache: caches did not sync")
	}
	return nil
}

// runInformerLocked runs inf until the Cache's context ends or Remove stops it (c.mu held).
func (c *Cache) runInformerLocked(key Key, inf toolscache.SharedIndexInformer) {
	ctx, cancel := context.WithCancel(c.runCtx)
	c.stops[key] = cancel
	go inf.RunWithContext(ctx)
}

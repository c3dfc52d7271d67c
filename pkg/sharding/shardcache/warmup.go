package shardcache

// Warming a partition while the informers run (the Cache's side; nssync.go is a feed's).
// It keeps:
//   - The warm-up runs on the Cache's context, not on the Prepare's; Release cancels it.
//   - It enumerates the partition's namespaces only once the unfiltered informers have
//     synced. A namespace that shows up in the partition later is warmed on its own
//     (onNamespaceAdded), unless it was created after the enumeration (with
//     newNamespaceGrace of margin): then all its objects come through the watch.
//   - At most Options.WarmupConcurrency namespace lists run at a time, over every warm-up;
//     beyond Options.ClusterListThreshold waiting lists the feeds list cluster-wide
//     (bulk.go).
//   - In ModeServerFilter a namespace is listed only once its feed's selector covers it. A
//     namespace that appears outside the selector is covered, then merged type by type,
//     dependents before their owners (ownerRank).
//   - A refresh (Refresh) is a warm-up of a partition already cached: same lists, same
//     merge, on the Cache's context; it is done only once the store has also applied the
//     deletes of objects the lists no longer return (syncDone).

import (
	"context"
	"sync"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// newNamespaceGrace: a namespace that appears in a warmed partition is listed again unless
// it was created this long after the warm-up enumerated the partition's namespaces (then
// it is new, and every object in it arrives through the watch anyway). The margin covers
// the Namespace informer's lag and clock skew between the apiserver and the shard.
const newNamespaceGrace = time.Minute

// warmup is the background warm-up of one partition prepared while the cache runs. It
// runs on the Cache's context, not on the caller's: a Prepare that times out leaves it
// running, and the next Prepare of the partition waits for the same warm-up. Only Release
// (or the end of the Cache) stops it.
type warmup struct {
	partition partition.ID
	cancel    context.CancelFunc
	done      chan struct{}
	err       error // valid once done is closed

	mu           sync.Mutex
	enumerated   bool
	enumeratedAt time.Time
	namespaces   map[string]struct{}
}

func (c *Cache) startWarmupLocked(p partition.ID) *warmup {
	ctx, cancel := context.WithCancel(c.runCtx)
	w := &warmup{partition: p, cancel: cancel, done: make(chan struct{}), namespaces: map[string]struct{}{}}
	feeds := append([]*feed(nil), c.order...)
	go c.runWarmup(ctx, w, feeds)
	return w
}

// runWarmup warms partition w.partition in feeds and closes w.done.
func (c *Cache) runWarmup(ctx context.Context, w *warmup, feeds []*feed) {
	defer close(w.done)
	logger := klog.FromContext(ctx).WithValues("partition", w.partition)
	start := time.Now()
	// The unfiltered informers (Namespaces, which the warm-up needs, and the
	// cluster-scoped types, whose objects the cluster partition's work reads) hold
	// every object once synced: wait for them all.
	var plain []toolscache.InformerSynced
	for _, p := range c.plainList() {
		plain = append(plain, p.synced())
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), plain...) {
		w.err = c.warmupErr(ctx)
		return
	}
	w.mu.Lock()
	names := c.NamespacesOf(w.partition)
	for _, ns := range names {
		w.namespaces[ns] = struct{}{}
	}
	w.enumerated = true
	w.enumeratedAt = time.Now()
	w.mu.Unlock()

	syncs, err := c.warmNamespaces(ctx, feeds, names, w.partition)
	if err != nil {
		w.err = err
		return
	}
	err = c.waitSynced(ctx, syncs)
	if err != nil {
		w.err = err
		if ctx.Err() != nil {
			w.err = c.warmupErr(ctx)
		}
		return
	}
	logger.V(2).Info("Partition warm", "namespaces", len(names), "resources", len(feeds), "duration", time.Since(start))
}

// Refresh lists partition p's namespaces again in every filtered informer and merges the
// lists into the running watches as a warm-up does, returning once the stores hold them.
// It is for a partition warmed while another shard still worked it: each informer
// follows its own watch, so right after that shard's last writes one informer may show
// them and another not yet; after Refresh every informer holds p's namespaces as they were
// at the call or later. A partition cached by the informers' first list, not yet started,
// needs none. Cluster-scoped informers and the Namespace informer are not listed again:
// they are cached whole and no shard's move fences their writes.
//
// The lists run on the Cache's context, like a warm-up's, not on ctx: a Refresh whose
// ctx ends returns ctx's error and leaves them running (a namespace's buffered events are
// only ever merged or superseded, never dropped while p is admitted), and the next
// Refresh of p waits for the same lists instead of starting over. Release stops them.
func (c *Cache) Refresh(ctx context.Context, p partition.ID) error {
	c.mu.Lock()
	st := c.parts[p]
	if st == nil {
		c.mu.Unlock()
		return ErrReleased
	}
	if !c.started || c.runCtx == nil {
		c.mu.Unlock()
		return nil
	}
	r := st.refresh
	if r == nil || r.finished() {
		rctx, cancel := context.WithCancel(c.runCtx)
		r = &warmup{partition: p, cancel: cancel, done: make(chan struct{}), namespaces: map[string]struct{}{}}
		st.refresh = r
		go c.runRefresh(rctx, r, append([]*feed(nil), c.order...))
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runRefresh lists r.partition's namespaces again in feeds and closes r.done once the
// stores hold the lists.
func (c *Cache) runRefresh(ctx context.Context, r *warmup, feeds []*feed) {
	defer close(r.done)
	names := c.NamespacesOf(r.partition)
	klog.FromContext(ctx).V(2).Info("Listing partition again before working it", "partition", r.partition, "namespaces", len(names))
	syncs, err := c.warmNamespaces(ctx, feeds, names, r.partition)
	if err == nil {
		err = c.waitSynced(ctx, syncs)
	}
	if err != nil && ctx.Err() != nil {
		err = c.warmupErr(ctx)
	}
	r.err = err
}

// waitSynced waits until every sync of syncs is in its informer's store.
func (c *Cache) waitSynced(ctx context.Context, syncs []syncJob) error {
	return wait.PollUntilContextCancel(ctx, c.opts.PollInterval, true, func(context.Context) (bool, error) {
		for _, j := range syncs {
			if j.f.health.isFailing() {
				continue // optional and failing: nothing waits for it (optional.go)
			}
			if done, err := j.f.syncDone(j.s); err != nil || !done {
				return false, err
			}
		}
		return true, nil
	})
}

// finished reports whether w has ended.
func (w *warmup) finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// warmupErr maps the end of a warm-up's context to Prepare's error.
func (c *Cache) warmupErr(ctx context.Context) error {
	if c.runCtx.Err() != nil {
		return c.runCtx.Err()
	}
	if ctx.Err() != nil {
		return ErrReleased
	}
	return nil
}

type syncJob struct {
	f *feed
	s *nsSync
}

// warmNamespaces starts a sync of every namespace in every feed, then lists them with
// bounded concurrency and hands each list to its feed. It returns the syncs to wait for.
func (c *Cache) warmNamespaces(ctx context.Context, feeds []*feed, names []string, partition partition.ID) ([]syncJob, error) {
	return c.warmNamespacesHeld(ctx, feeds, names, partition, false)
}

// warmNamespacesHeld is warmNamespaces; with hold, the lists are not merged until unhold.
func (c *Cache) warmNamespacesHeld(ctx context.Context, feeds []*feed, names []string, partition partition.ID, hold bool) ([]syncJob, error) {
	var jobs []syncJob
	for _, f := range feeds {
		for _, ns := range names {
			s := f.beginSync(ctx, ns, partition)
			if s != nil && hold {
				f.mu.Lock()
				s.hold = true
				f.mu.Unlock()
			}
			if s == nil {
				if ctx.Err() != nil {
					return nil, c.warmupErr(ctx)
				}
				return nil, ErrReleased
			}
			jobs = append(jobs, syncJob{f: f, s: s})
		}
	}
	// Many namespaces waiting at once (thousands handed over together, by a scale-out or
	// a killed shard): a cluster-wide list per type serves them all with a few requests
	// instead of one per namespace through the client's rate limit. Once a feed lists in
	// bulk, warm-ups that start meanwhile join it.
	waiting := c.waitingLists.Add(int64(len(jobs)))
	defer c.waitingLists.Add(-int64(len(jobs)))
	for _, f := range feeds {
		if t := c.opts.ClusterListThreshold; (t > 0 && waiting > int64(t)) || f.inBulk() {
			f.warmInBulk(c.runCtx, c.opts.ClusterListPageSize, c.opts.ClusterListGather)
		}
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		if j.f.health != nil {
			// Optional: its list may fail for as long as its API is down, retrying
			// until the partition is released; waitSynced waits for it while healthy.
			go c.listInto(ctx, j.f, j.s, partition)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.listInto(ctx, j.f, j.s, partition)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, c.warmupErr(ctx)
	}
	return jobs, nil
}

// listInto lists s's namespace and completes s, retrying failed lists with backoff until
// it succeeds or ctx ends (then s is abandoned).
func (c *Cache) listInto(ctx context.Context, f *feed, s *nsSync, partition partition.ID) {
	logger := klog.FromContext(ctx).WithValues("partition", partition, "namespace", s.namespace, "resource", f.rt.Name())
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}
	for {
		switch f.modeOf(s) {
		case listSkip:
			f.completeSync(s, nil, "")
			return
		case listBulk:
			return // the feed's cluster-wide list completes s
		}
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			f.abandon(s)
			return
		}
		if f.modeOf(s) != listNamespace { // moved to the cluster-wide list meanwhile
			<-c.sem
			continue
		}
		if !f.covers(s.namespace) {
			// ModeServerFilter: list only once the watch carries the namespace's
			// events, or events between the list and the new selector are lost.
			<-c.sem
			c.filter.need(s.namespace)
			select {
			case <-time.After(c.opts.PollInterval):
			case <-ctx.Done():
				f.abandon(s)
				return
			}
			continue
		}
		items, rv, err := f.listNamespace(ctx, s.namespace, c.opts.WarmupPageSize)
		<-c.sem
		if err == nil {
			if f.hooks != nil && f.hooks.afterNamespaceList != nil {
				f.hooks.afterNamespaceList(f.rt.Name(), s.namespace)
			}
			logger.V(4).Info("Listed namespace for warm-up", "objects", len(items), "resourceVersion", rv)
			f.completeSync(s, items, rv)
			return
		}
		if ctx.Err() != nil {
			f.abandon(s)
			return
		}
		if f.health != nil {
			// Optional: its state change is logged once (optional.go), not each retry.
			logger.V(4).Info("Warm-up list of an optional resource failed, retrying", "err", err.Error())
		} else {
			logger.Error(err, "Warm-up list failed, retrying")
		}
		select {
		case <-time.After(backoff.Step()):
		case <-ctx.Done():
			f.abandon(s)
			return
		}
	}
}

// onNamespaceAdded re-warms a namespace that shows up in a partition after the partition's
// warm-up enumerated its namespaces: the Namespace informer may have lagged, and objects
// of the namespace dropped before the partition was admitted would otherwise be missing.
func (c *Cache) onNamespaceAdded(obj any, isInInitialList bool) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || isInInitialList {
		return
	}
	p := c.partitionOf(ns.Name)
	c.mu.Lock()
	st := c.parts[p]
	runCtx := c.runCtx
	feeds := append([]*feed(nil), c.order...)
	c.mu.Unlock()
	if st != nil && runCtx != nil && c.filter != nil {
		if cov := c.filter.current(); cov != nil && !cov.set.Covers(ns.Name) {
			// ModeServerFilter: the watches do not carry the namespace. Cover it (one
			// restart per burst of namespaces) and warm it once covered: its objects may
			// be older than the watches' position.
			klog.FromContext(runCtx).V(2).Info("Warming namespace outside the shard selector", "partition", p, "namespace", ns.Name)
			c.filter.need(ns.Name)
			if st.warm != nil {
				st.warm.mu.Lock()
				st.warm.namespaces[ns.Name] = struct{}{}
				st.warm.mu.Unlock()
			}
			go c.warmNewNamespace(runCtx, feeds, ns.Name, p)
			return
		}
	}
	if st == nil || st.warm == nil || runCtx == nil {
		return
	}
	w := st.warm
	w.mu.Lock()
	_, known := w.namespaces[ns.Name]
	fresh := ns.CreationTimestamp.After(w.enumeratedAt.Add(newNamespaceGrace))
	if !w.enumerated || known || fresh {
		w.mu.Unlock()
		return
	}
	w.namespaces[ns.Name] = struct{}{}
	w.mu.Unlock()
	klog.FromContext(runCtx).V(2).Info("Warming namespace that appeared after its partition's warm-up", "partition", p, "namespace", ns.Name)
	// No waiter: Prepare has returned or waits for its own namespaces. Release needs no
	// context to stop it: it cancels the syncs, and beginSync refuses once revoked.
	go func() { _, _ = c.warmNamespaces(runCtx, feeds, []string{ns.Name}, p) }()
}

// ownerRank orders the merge of a newly covered namespace (warmNewNamespace): objects
// are made visible dependents first, so that a controller sees an owner's pods, replica
// sets or jobs in its caches when the owner appears, as it does when they come through a
// cluster-wide watch in the order they were created. Types not listed rank 0.
var ownerRank = map[string]int{
	"replicasets.apps": 1, "replicationcontrollers": 1, "statefulsets.apps": 1, "daemonsets.apps": 1,
	"jobs.batch": 1, "services": 1, "poddisruptionbudgets.policy": 1,
	"deployments.apps": 2, "cronjobs.batch": 2,
	"horizontalpodautoscalers.autoscaling": 3,
}

// warmNewNamespace warms a namespace of an admitted partition that appeared outside the
// selector (ModeServerFilter): every feed lists it once covered, and the lists are merged
// rank by rank (ownerRank), each rank once the previous one is in its stores.
func (c *Cache) warmNewNamespace(ctx context.Context, feeds []*feed, namespace string, partition partition.ID) {
	jobs, err := c.warmNamespacesHeld(ctx, feeds, []string{namespace}, partition, true)
	if err != nil {
		return
	}
	maxRank := 0
	for _, j := range jobs {
		maxRank = max(maxRank, ownerRank[j.f.rt.Name()])
	}
	for rank := 0; rank <= maxRank; rank++ {
		var batch []syncJob
		for _, j := range jobs {
			if ownerRank[j.f.rt.Name()] == rank {
				j.f.unhold(j.s)
				batch = append(batch, j)
			}
		}
		if rank == maxRank {
			return
		}
		_ = wait.PollUntilContextCancel(ctx, c.opts.PollInterval, true, func(context.Context) (bool, error) {
			for _, j := range batch {
				if j.f.health.isFailing() {
					continue
				}
				if done, err := j.f.syncDone(j.s); err != nil || !done {
					return err != nil, nil // released: stop waiting
				}
			}
			return true, nil
		})
		if ctx.Err() != nil {
			return
		}
	}
}

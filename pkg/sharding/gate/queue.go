package gate

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// QueueConfig configures one controller's Queue.
type QueueConfig struct {
	// Name is the controller name (for example "replicaset"). It is required because
	// client-go registers its workqueue metrics only for named queues, and the name is
	// the label that tells controllers apart.
	Name string

	// RateLimiter decides AddRateLimited delays. Nil means client-go's
	// DefaultTypedControllerRateLimiter, the one kube-controller-manager uses.
	RateLimiter workqueue.TypedRateLimiter[string]

	// MetricsProvider receives the client-go workqueue metrics of this queue. Nil means
	// client-go's global provider (see workqueue.SetProvider); kshard passes its own so
	// that nothing depends on process-global state.
	MetricsProvider workqueue.MetricsProvider

	// Keys maps the queue's keys to partitions; nil means the Gate's (ObjectKeys for a
	// shard). A queue whose unnamespaced keys are namespace names uses NamespaceNameKeys.
	Keys KeyPartition

	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
}

// Queue is a controller's work queue: client-go's typed rate-limiting queue, fenced by a
// Gate. It implements workqueue.TypedRateLimitingInterface[string] so controllers use it
// exactly as in kube-controller-manager; keys are "namespace/name" or, for cluster-scoped
// objects, "name".
type Queue struct {
	gate *Gate
	name string
	// partitionOf maps this queue's keys (QueueConfig.Keys, or the Gate's).
	partitionOf KeyPartition
	rl          workqueue.TypedRateLimitingInterface[string]

	// mu guards the maps and counts below. It is taken after gate.mu when both are held.
	mu sync.Mutex
	// queued holds, per partition, keys admitted by an Add* and not yet returned by the
	// underlying Get. It mirrors what client-go holds (ready or delayed) closely enough to
	// count stale keys and to forget their rate-limiter state on Release; it can miss a
	// key that client-go holds twice (ready and delayed), which only makes Stale low.
	queued  map[partition.ID]map[string]struct{}
	nqueued int
	// stale counts queued keys whose partition is not acquired. It changes only with
	// gate.mu held exclusively (Acquire, Release, Get) so it agrees with g.acquired.
	stale int
	// limited holds keys passed to AddRateLimited and not yet forgotten: exactly the keys
	// for which the rate limiter may hold per-item state.
	limited map[string]partition.ID
	// active holds keys between a successful Get and Done, with their partition.
	active map[string]partition.ID
	// shutdown is set by ShutDown; guarded by gate.mu (not mu) because fenced Gets wait
	// on the gate and must observe it.
	shutdown bool

	dropped   atomic.Uint64
	discarded atomic.Uint64
}

var _ workqueue.TypedRateLimitingInterface[string] = (*Queue)(nil)

// NewQueue creates a Queue gated by g. It panics if cfg.Name is empty, a programming error
// that would silently leave the queue without metrics.
func (g *Gate) NewQueue(cfg QueueConfig) *Queue {
	if cfg.Name == "" {
		panic("gate: QueueConfig.Name is required")
	}
	rateLimiter := cfg.RateLimiter
	if rateLimiter == nil {
		rateLimiter = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	keys := cfg.Keys
	if keys == nil {
		keys = g.partitionOf
	}
	q := &Queue{
		gate:        g,
		name:        cfg.Name,
		partitionOf: keys,
		rl: workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter, workqueue.TypedRateLimitingQueueConfig[string]{
			Name:            cfg.Name,
			MetricsProvider: cfg.MetricsProvider,
			Clock:           cfg.Clock,
		}),
		queued:  map[partition.ID]map[string]struct{}{},
		limited: map[string]partition.ID{},
		active:  map[string]partition.ID{},
	}
	g.mu.Lock()
	g.queues[q] = struct{}{}
	g.mu.Unlock()
	return q
}

// Name returns the controller name the queue was created with.
func (q *Queue) Name() string { return q.name }

// Add queues key if its partition is acquired and drops it otherwise, so a shard never
// holds work it does not own.
func (q *Queue) Add(key string) {
	q.admit(key, false, func() { q.rl.Add(key) })
}

// AddAfter queues key after duration if its partition is acquired now. If the partition is
// released before the delay ends, the key becomes stale and Get discards it.
func (q *Queue) AddAfter(key string, duration time.Duration) {
	q.admit(key, false, func() { q.rl.AddAfter(key, duration) })
}

// AddRateLimited queues key after the rate limiter's delay if its partition is acquired.
// A dropped key does not consult the rate limiter, so no backoff state is created for work
// this shard does not own.
func (q *Queue) AddRateLimited(key string) {
	q.admit(key, true, func() { q.rl.AddRateLimited(key) })
}

// admit runs add if key's partition is acquired. The shared gate lock is held across the
// underlying add so that Release's revocation cannot interleave: once Release has marked a
// partition, no key of it enters the underlying queue any more.
func (q *Queue) admit(key string, rateLimited bool, add func()) {
	p, ok := q.partitionOf(key)
	g := q.gate
	g.mu.RLock()
	defer g.mu.RUnlock()
	if q.shutdown {
		return // like client-go: adds after ShutDown are ignored, not dropped work
	}
	if !ok || !g.acquiredLocked(p) {
		q.dropped.Add(1)
		return
	}
	q.mu.Lock()
	keys := q.queued[p]
	if keys == nil {
		keys = map[string]struct{}{}
		q.queued[p] = keys
	}
	if _, dup := keys[key]; !dup {
		keys[key] = struct{}{}
		q.nqueued++
	}
	if rateLimited {
		q.limited[key] = p
	}
	q.mu.Unlock()
	add()
}

// verdict is what Get does with a key taken from the underlying queue.
type verdict int

const (
	verdictStart    verdict = iota // hand it to the worker
	verdictDiscard                 // partition not acquired: drop it
	verdictShutdown                // queue shut down while the key was held by a fence
)

// Get blocks until a key of an acquired partition can be worked while the shard is not
// fenced, and returns it; the caller must call Done with it. Keys whose partition is no
// longer acquired are discarded on the way. shutdown=true means the worker should exit:
// as with client-go, after ShutDown Get keeps returning queued keys until the queue is
// empty — except while fenced, when no work may start, so it returns shutdown at once.
func (q *Queue) Get() (key string, shutdown bool) {
	for {
		// Park idle workers before they take a key, so that while fenced client-go does
		// not count held keys as being processed.
		if q.waitUnfenced() {
			return "", true
		}
		key, shutdown := q.rl.Get()
		if shutdown {
			return "", true
		}
		switch q.start(key) {
		case verdictStart:
			return key, false
		case verdictDiscard:
			q.discarded.Add(1)
			q.rl.Forget(key)
			q.rl.Done(key)
		case verdictShutdown:
			q.rl.Done(key)
			return "", true
		}
	}
}

// waitUnfenced blocks while the gate is fenced; it reports true if the queue was shut
// down while fenced.
func (q *Queue) waitUnfenced() bool {
	g := q.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.blockedLocked() {
		if q.shutdown {
			return true
		}
		ch := g.waitChLocked()
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	return false
}

// start decides, under the gate's exclusive lock, whether key may be worked, and if so
// marks it in flight in the same critical section. Because Release revokes a partition
// under that same lock, a key is either in flight before Release's mark (and Release waits
// for it) or is seen as not acquired (and discarded): there is no third case.
//
// If the gate is fenced here (the deadline passed after waitUnfenced), the key is held
// until a new deadline lifts the fence, its partition is released, or the queue shuts down.
func (q *Queue) start(key string) verdict {
	p, ok := q.partitionOf(key)
	g := q.gate
	g.mu.Lock()
	defer g.mu.Unlock()

	if ok {
		q.mu.Lock()
		if keys := q.queued[p]; keys != nil {
			if _, tracked := keys[key]; tracked {
				delete(keys, key)
				if len(keys) == 0 {
					delete(q.queued, p)
				}
				q.nqueued--
				if !g.acquiredLocked(p) {
					q.stale--
				}
			}
		}
		q.mu.Unlock()
	}

	for {
		if !ok || !g.acquiredLocked(p) {
			q.mu.Lock()
			delete(q.limited, key)
			q.mu.Unlock()
			return verdictDiscard
		}
		if !g.blockedLocked() {
			q.mu.Lock()
			q.active[key] = p
			q.mu.Unlock()
			g.inFlight[p]++
			g.total++
			return verdictStart
		}
		if q.shutdown {
			return verdictShutdown
		}
		ch := g.waitChLocked()
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
}

// Done marks key as finished. The in-flight count is lowered before client-go's Done so
// that client-go cannot hand the same key to another worker while it still counts as
// ours; a Release waiting for this partition wakes up.
func (q *Queue) Done(key string) {
	g := q.gate
	g.mu.Lock()
	q.mu.Lock()
	p, ok := q.active[key]
	delete(q.active, key)
	q.mu.Unlock()
	if ok {
		if g.inFlight[p]--; g.inFlight[p] == 0 {
			delete(g.inFlight, p)
		}
		g.total--
		g.broadcastLocked()
	}
	g.mu.Unlock()
	if ok && g.observer != nil {
		g.observer.Done(p)
	}
	q.rl.Done(key)
}

// Forget clears the rate limiter's state for key, as in client-go.
func (q *Queue) Forget(key string) {
	q.mu.Lock()
	delete(q.limited, key)
	q.mu.Unlock()
	q.rl.Forget(key)
}

// NumRequeues returns how many times key was rate-limited since it was last forgotten.
func (q *Queue) NumRequeues(key string) int { return q.rl.NumRequeues(key) }

// Len returns client-go's queue length: ready keys, including stale keys of released
// partitions that no worker has discarded yet (see Stats).
func (q *Queue) Len() int { return q.rl.Len() }

// ShutDown stops the queue as client-go's ShutDown does; additionally, workers parked by a
// fence return shutdown=true at once.
func (q *Queue) ShutDown() {
	q.markShutdown()
	q.rl.ShutDown()
}

// ShutDownWithDrain is client-go's ShutDownWithDrain: it waits until in-flight keys are
// Done. Keys held by a fence are let go so the drain can finish.
func (q *Queue) ShutDownWithDrain() {
	q.markShutdown()
	q.rl.ShutDownWithDrain()
}

// ShuttingDown reports whether ShutDown has been called.
func (q *Queue) ShuttingDown() bool { return q.rl.ShuttingDown() }

func (q *Queue) markShutdown() {
	g := q.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	q.shutdown = true
	// A shut-down queue needs no Release bookkeeping and must not pin its memory.
	delete(g.queues, q)
	g.broadcastLocked()
}

// forgetPartition clears rate-limiter state of every key of partition this queue knows
// of. The keys stay tracked as queued (and stale) until Get discards them, because they
// are still inside client-go's queue.
func (q *Queue) forgetPartition(partition partition.ID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key := range q.queued[partition] {
		q.rl.Forget(key)
	}
	for key, p := range q.limited {
		if p == partition {
			delete(q.limited, key)
			q.rl.Forget(key)
		}
	}
}

// QueueStats is a point-in-time view of one Queue, for metrics and debugging.
type QueueStats struct {
	// Name is the controller name.
	Name string
	// Depth is client-go's Len: ready keys, stale ones included.
	Depth int
	// Pending counts admitted keys of acquired partitions not yet handed to a worker,
	// ready or delayed.
	Pending int
	// Stale counts keys still inside client-go's queue (ready or delayed) whose partition
	// is no longer acquired. Workers discard them without starting work; until then they
	// inflate Depth and client-go's depth metric.
	Stale int
	// InFlight counts keys between Get and Done.
	InFlight int
	// Dropped counts Add/AddAfter/AddRateLimited calls refused because the key's
	// partition was not acquired (or the key could not be mapped).
	Dropped uint64
	// Discarded counts keys Get took from client-go's queue and threw away because their
	// partition was not acquired any more.
	Discarded uint64
}

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	s := QueueStats{
		Name:     q.name,
		Pending:  q.nqueued - q.stale,
		Stale:    q.stale,
		InFlight: len(q.active),
	}
	q.mu.Unlock()
	s.Depth = q.rl.Len()
	s.Dropped = q.dropped.Load()
	s.Discarded = q.discarded.Load()
	return s
}

// KeyContext returns the context a reconcile of key should run under: parent, ended
// early when the key's partition is revoked (fenced, or demoted by the coordinator), so
// that work the shard no longer owns stops where it is instead of running on, and marked
// with the key's partition (PartitionFrom), so that the reconcile's API requests and
// their wait in the client's rate limiter are counted as that partition's load. The
// worker loop calls it for each key it gets; the cancel func must be called when the
// reconcile returns. A key whose partition is not held gets a context that is already
// cancelled.
func (q *Queue) KeyContext(parent context.Context, key string) (context.Context, context.CancelFunc) {
	p, ok := q.partitionOf(key)
	if ok {
		parent = WithPartition(parent, p)
	}
	ctx, cancel := context.WithCancel(parent)
	var tenure context.Context
	if ok {
		tenure = q.gate.tenureContext(p)
	}
	if tenure == nil {
		cancel()
		return ctx, cancel
	}
	stop := context.AfterFunc(tenure, cancel)
	return ctx, func() { stop(); cancel() }
}

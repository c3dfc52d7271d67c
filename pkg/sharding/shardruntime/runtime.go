package shardruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

// Options configure the Runtime.
type Options struct {
	// RetryInterval paces retries of failed warm-ups, drains and drops (default 1s).
	RetryInterval time.Duration
	// Meter is the shard's load meter, the gate's observer (gate.WithObserver), which
	// Load reads; nil means the shard measures no load and Load reports nothing.
	Meter *loadmeter.Meter
}

// Controller is what the runtime needs of one controller: how to run it, and where the
// keys of a newly acquired partition go. It knows nothing else about controllers; the
// shard command builds these from the controllers' descriptors.
type Controller struct {
	// Name names the controller in logs.
	Name string
	// Queues are the controller's queues (its primary one first, then any further ones),
	// at least one. Each is one of the gate's, so each is drained and fenced on a release
	// or revocation by the gate itself; the runtime fills each on acquire.
	Queues []Queue
	// Run runs the controller's workers until ctx ends.
	Run func(ctx context.Context)
	// Resync, when set, is called on acquire after the queues are filled, with the
	// namespaces of the partition and whether it is the cluster partition (its
	// cluster-scoped objects): for a controller whose queues hold keys no Primary names
	// (the garbage collector's, of every served resource), which refills them itself.
	Resync func(namespaces []string, cluster bool)
}

// Queue is one of a controller's queues as the runtime sees it.
type Queue struct {
	// Name names the queue in errors.
	Name string
	// Queue receives, when a partition is acquired, the key of every cached object of
	// Primary in that partition: adds made while the partition was not acquired were
	// dropped, and timers that lived on the previous owner are rebuilt by those syncs.
	Queue interface{ Add(key string) }
	// Primary are the informers whose objects' keys Queue holds.
	Primary []shardcache.Key
}

// Runtime carries out the session's actions on the cache and the queues.
type Runtime struct {
	opts  Options
	cache *shardcache.Cache
	gate  *gate.Gate
	ctrls []Controller
	log   logr.Logger

	mu     sync.Mutex
	ctx    context.Context // set by Run
	serial map[partition.ID]*opQueue
}

// New wires a runtime. The controllers must already have asked c for their informers,
// and every Primary informer must be one c can serve.
func New(c *shardcache.Cache, g *gate.Gate, ctrls []Controller, opts Options, log logr.Logger) (*Runtime, error) {
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	for _, ctrl := range ctrls {
		if (len(ctrl.Queues) == 0 && ctrl.Resync == nil) || ctrl.Run == nil {
			return nil, fmt.Errorf("shardruntime: controller %q needs a queue and a Run func", ctrl.Name)
		}
		for _, q := range ctrl.Queues {
			if q.Queue == nil {
				return nil, fmt.Errorf("shardruntime: controller %q: queue %q is nil", ctrl.Name, q.Name)
			}
			for _, k := range q.Primary {
				if _, err := c.Informer(k); err != nil {
					return nil, fmt.Errorf("shardruntime: controller %q: queue %q: primary %s: %w", ctrl.Name, q.Name, k, err)
				}
			}
		}
	}
	return &Runtime{opts: opts, cache: c, gate: g, ctrls: ctrls, log: log, serial: map[partition.ID]*opQueue{}}, nil
}

// Run hands the informers' start to the cache (they start shortly after the first
// assignment), starts the partition operations that arrived before it and the
// controllers' workers, and blocks until ctx ends. Workers find nothing to do until
// partitions are acquired.
func (r *Runtime) Run(ctx context.Context) {
	r.cache.Run(ctx)
	r.mu.Lock()
	r.ctx = ctx
	for p, q := range r.serial {
		if !q.running && len(q.ops) > 0 {
			q.running = true
			go r.drain(ctx, p, q)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range r.ctrls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Run(ctx)
		}()
	}
	wg.Wait()
}

// Warm starts caching p and calls done once its objects are cached.
func (r *Runtime) Warm(p partition.ID, done func()) {
	r.do(p, "warm", func(ctx context.Context) error {
		if err := r.cache.Prepare(ctx, []partition.ID{p}); err != nil {
			if errors.Is(err, shardcache.ErrReleased) {
				return nil // dropped meanwhile: nothing to report
			}
			return err
		}
		done()
		return nil
	})
}

// Work starts working p once its caches are synced: the key of every primary object of
// p goes into the queue whose primary it is (a controller's first queue or a further
// one), because adds made before were dropped by the queues. With refresh, p's caches
// are listed again first (shardcache.Cache.Refresh): they were warmed while another
// shard still worked p, and an informer may not show that shard's last writes yet while
// another does; a sync on that view would act twice.
func (r *Runtime) Work(p partition.ID, refresh bool) {
	r.do(p, "work", func(ctx context.Context) error {
		if err := r.cache.Prepare(ctx, []partition.ID{p}); err != nil {
			return err
		}
		if refresh {
			if err := r.cache.Refresh(ctx, p); err != nil {
				return err
			}
		}
		// Acquire first, then list the keys; the other order loses work. The queues drop
		// the adds of a partition that is not acquired, so an object that changed between
		// a listing and the Acquire would be missed twice: its handler's add dropped, the
		// listing older than the change. Acquired first, every change from now on reaches
		// the queue through the informers' handlers, and every object cached before the
		// listing through the listing; a key added by both is queued once.
		r.gate.Acquire(p)
		for _, c := range r.ctrls {
			for _, q := range c.Queues {
				for _, k := range q.Primary {
					keys, err := r.cache.Keys(k, p)
					if err != nil {
						return fmt.Errorf("controller %s: queue %s: keys of %s: %w", c.Name, q.Name, k, err)
					}
					for _, key := range keys {
						q.Queue.Add(key)
					}
				}
			}
			if c.Resync != nil {
				c.Resync(r.cache.NamespacesOf(p), r.cache.ClusterPartition() == p)
			}
		}
		return nil
	})
}

// Drain stops taking keys of p and calls done when its in-flight work has finished. The
// handoff state machine asks for it on a release, and again for a release of a partition
// it revoked meanwhile (Stop): done then reports when the cancelled work is gone, never
// while any of it still runs.
func (r *Runtime) Drain(p partition.ID, done func()) {
	r.do(p, "drain", func(ctx context.Context) error {
		if err := r.gate.Release(ctx, p); err != nil {
			return err
		}
		done()
		return nil
	})
	// Stop new work at once, ahead of any queued operation of the partition (the work
	// already running may finish and write: that is the drain), and make sure a Work still
	// queued or waiting for its caches cannot acquire it again.
	r.gate.StopStarting(p)
	r.abandon(p, "work")
}

// Stop stops working p at once, and again after any operation of p still queued (a Work
// waiting for its caches must not re-acquire it); its caches stay. Its reconciles still
// running are cancelled and none of their writes leaves any more (Gate.Revoke).
func (r *Runtime) Stop(p partition.ID) {
	r.gate.Revoke(p)
	r.do(p, "stop", func(context.Context) error {
		r.gate.Revoke(p)
		return nil
	})
}

// Drop drops p's caches.
func (r *Runtime) Drop(p partition.ID) {
	r.gate.Revoke(p)
	// A warm-up that cannot finish (an unreachable apiserver) must not hold the drop
	// back: Warm and Work of this partition still queued or running are abandoned.
	r.abandon(p, "warm", "work")
	r.do(p, "drop", func(ctx context.Context) error {
		r.gate.Revoke(p)
		return r.cache.Release(ctx, []partition.ID{p})
	})
}

// SetDeadline passes the lease deadline to the queues.
func (r *Runtime) SetDeadline(t time.Time) { r.gate.SetDeadline(t) }

// Stats are the runtime's numbers. The session reports them with every hello and
// heartbeat (the shard command puts them on the wire as protocol.Stats), and they back
// the runtime's metrics.
type Stats struct {
	// AcquiredPartitions are worked; PreparedPartitions are cached without being worked (a
	// handoff in progress).
	AcquiredPartitions, PreparedPartitions int
	// Namespaces counts the namespaces of the acquired partitions.
	Namespaces int
	// CachedObjects counts the objects in every informer's store.
	CachedObjects int
	// QueueDepth sums the lengths of the gate's queues (stale keys included).
	QueueDepth int
	// Fenced: the lease deadline has passed, no work starts.
	Fenced bool
}

// Stats returns the runtime's numbers now; they walk every acquired partition.
func (r *Runtime) Stats() Stats {
	acquired := r.gate.Partitions()
	s := Stats{AcquiredPartitions: len(acquired)}
	for _, p := range acquired {
		s.Namespaces += r.cache.NamespaceCount(p)
	}
	for _, n := range r.cache.CachedObjects() {
		s.CachedObjects += n
	}
	gs := r.gate.Stats()
	for _, q := range gs.Queues {
		s.QueueDepth += q.Depth
	}
	s.PreparedPartitions = max(len(r.cache.Admitted())-len(acquired), 0)
	s.Fenced = gs.Fenced
	return s
}

// Load is what the shard tells the coordinator of the load of its partitions
// (docs/design-placement.md §1): each held partition's smoothed load and what a move of
// it would cost, and the shard's saturation.
type Load struct {
	// At is the instant of the sample.
	At time.Time
	// Partitions are the acquired partitions held for at least the meter's MinAge that
	// have load, namespaces or cached objects, in ascending order.
	Partitions []PartitionLoad
	// LimiterWait is the time the shard's requests waited in its controllers' client rate
	// limiters, in seconds per second, shard-wide.
	LimiterWait float64
}

// PartitionLoad is one partition's entry of Load: the meter's rates and age, and the
// partition's size as the shard's caches know it.
type PartitionLoad struct {
	loadmeter.PartitionLoad
	// Namespaces counts the partition's namespaces.
	Namespaces int
	// Objects counts the objects the shard caches for the partition: what a new owner
	// must warm (shardcache.Cache.ObjectsOf).
	Objects int
}

// Load samples the load meter (Options.Meter) now and returns the load of the acquired
// partitions. A partition with no load, no namespace and no cached object is left out:
// it costs nothing wherever it goes. Without a meter it returns a zero Load.
func (r *Runtime) Load() Load {
	m := r.opts.Meter
	if m == nil {
		return Load{}
	}
	snap := m.Snapshot(m.Now())
	out := Load{At: snap.At, LimiterWait: snap.LimiterWait}
	for _, pl := range snap.Partitions {
		e := PartitionLoad{PartitionLoad: pl, Namespaces: r.cache.NamespaceCount(pl.Partition), Objects: r.cache.ObjectsOf(pl.Partition)}
		if e.Load > 0 || e.Namespaces > 0 || e.Objects > 0 {
			out.Partitions = append(out.Partitions, e)
		}
	}
	return out
}

// Synced reports whether every acquired partition's caches are synced (readiness).
func (r *Runtime) Synced() error { return r.cache.Synced(r.gate.Partitions()) }

// opQueue runs one partition's operations in order.
type opQueue struct {
	ops     []op
	running bool
	// current is the running operation's name and the cancel func of its context.
	current       string
	cancelCurrent context.CancelFunc
}

// abandon drops the queued operations of p with one of names and cancels the running one
// if it has one of them; an abandoned operation never calls its done callback.
func (r *Runtime) abandon(p partition.ID, names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.serial[p]
	if q == nil {
		return
	}
	q.ops = slices.DeleteFunc(q.ops, func(o op) bool { return slices.Contains(names, o.name) })
	if q.cancelCurrent != nil && slices.Contains(names, q.current) {
		q.cancelCurrent()
	}
}

type op struct {
	name string
	fn   func(ctx context.Context) error
}

// do queues fn for p; it is retried every RetryInterval until it succeeds or the
// runtime stops. An operation queued behind it waits.
func (r *Runtime) do(p partition.ID, name string, fn func(ctx context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.serial[p]
	if q == nil {
		q = &opQueue{}
		r.serial[p] = q
	}
	q.ops = append(q.ops, op{name: name, fn: fn})
	if q.running || r.ctx == nil {
		return // Run starts the operations that arrive before it
	}
	q.running = true
	go r.drain(r.ctx, p, q)
}

// slowOperation is how long a partition operation may take before its end is logged.
const slowOperation = 5 * time.Second

func (r *Runtime) drain(ctx context.Context, p partition.ID, q *opQueue) {
	log := r.log.WithValues("partition", p)
	for {
		r.mu.Lock()
		if len(q.ops) == 0 {
			q.running = false
			delete(r.serial, p)
			r.mu.Unlock()
			return
		}
		o := q.ops[0]
		q.ops = q.ops[1:]
		opCtx, cancel := context.WithCancel(ctx)
		q.current, q.cancelCurrent = o.name, cancel
		r.mu.Unlock()

		attempt, began := 0, time.Now()
		_ = wait.PollUntilContextCancel(opCtx, r.opts.RetryInterval, true, func(ctx context.Context) (bool, error) {
			attempt++
			opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := o.fn(opCtx); err != nil {
				if ctx.Err() == nil {
					log.Info("partition operation failed; retrying", "op", o.name, "attempt", attempt, "err", err.Error())
				}
				return false, nil
			}
			// Until a work operation is done the partition's changes wait (the gate drops
			// them and the listing at its end picks them up): say when that was long.
			if took := time.Since(began); took >= slowOperation || attempt > 1 {
				log.Info("partition operation done late", "op", o.name, "attempts", attempt, "duration", took.Round(time.Millisecond))
			}
			return true, nil
		})
		cancel()
		r.mu.Lock()
		q.current, q.cancelCurrent = "", nil
		r.mu.Unlock()
	}
}

package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Gate is the ownership state shared by all queues of one shard: the set of acquired
// partitions, the tenure of each partition it may still write to, the lease deadline, and
// the in-flight work per partition. It is the single
// point the shard runtime drives when the coordinator says Acquire or Release, or when the
// session lease expires; controllers never see it.
//
// Lock order: Gate.mu, then Queue.mu, then client-go's internal locks. Nothing that holds
// a client-go lock ever calls back into this package, so the order cannot invert.
type Gate struct {
	partitionOf KeyPartition

	// mu guards every field below. Adds take it shared so that they run in parallel but
	// never interleave with Release's revocation; Get, Done and state changes take it
	// exclusively.
	mu       sync.RWMutex
	acquired map[partition.ID]struct{}
	// tenures holds the partitions whose work may still write: acquired ones, and released
	// ones still draining their in-flight work. Revoking a partition cancels its tenure,
	// and with it every reconcile and write of the partition still running.
	tenures map[partition.ID]*tenure
	// deadline is the end of the shard's session lease; no work starts at or after it.
	// Zero means no lease (tests and standalone use).
	deadline time.Time
	now      func() time.Time
	inFlight map[partition.ID]int // partition → keys between Get and Done, all queues
	total    int                  // sum of inFlight
	queues   map[*Queue]struct{}
	// refused counts writes the fence refused or cancelled, by reason.
	refused struct{ fenced, notHeld, revoked atomic.Uint64 }
	// changed is closed (and reset to nil) whenever a waiter may need to re-check state.
	// It is created lazily by a waiter, so Done costs no allocation when nobody waits.
	changed chan struct{}
	// observer, if set, learns of acquisitions, releases and completed reconciles
	// (WithObserver); it is set at New and never changes.
	observer Observer
}

// New returns a Gate with no partition acquired and not fenced, so a freshly started
// shard does no work until the coordinator grants it some.
func New(partitionOf KeyPartition, opts ...Option) *Gate {
	if partitionOf == nil {
		panic("gate: New needs a KeyPartition")
	}
	g := &Gate{
		partitionOf: partitionOf,
		acquired:    map[partition.ID]struct{}{},
		tenures:     map[partition.ID]*tenure{},
		inFlight:    map[partition.ID]int{},
		queues:      map[*Queue]struct{}{},
		now:         time.Now,
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// SetDeadline sets the end of the shard's right to work (its session lease: the send time
// of the last acknowledged heartbeat plus the TTL). Every Get checks it against the clock
// when it starts a key, so a worker that resumes after a process pause never starts work
// past the deadline, without waiting for any timer of the runtime.
func (g *Gate) SetDeadline(deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deadline = deadline
	g.broadcastLocked()
}

// Deadline returns the lease deadline set last.
func (g *Gate) Deadline() time.Time {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.deadline
}

// Revoke takes partition away at once without waiting for its in-flight work, for a
// shard that stops working a partition it keeps the caches of (fenced, or demoted by the
// coordinator): no key of it starts, its tenure ends, so every reconcile of it still
// running has its context cancelled and every write of it is refused from now on. Only a
// Release still reports when that work has finished. Release is the variant that lets the
// in-flight work finish and write.
func (g *Gate) Revoke(partition partition.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endTenureLocked(partition)
	if _, ok := g.acquired[partition]; !ok {
		return
	}
	delete(g.acquired, partition)
	g.observeReleasedLocked(partition)
	for q := range g.queues {
		q.mu.Lock()
		q.stale += len(q.queued[partition])
		q.mu.Unlock()
	}
	g.broadcastLocked()
}

// observeReleasedLocked tells the observer, if any, that partition is no longer
// acquired; g.mu must be held exclusively.
func (g *Gate) observeReleasedLocked(partition partition.ID) {
	if g.observer != nil {
		g.observer.Released(partition)
	}
}

// blockedLocked reports whether no work may start now: the lease deadline has passed.
// g.mu must be held.
func (g *Gate) blockedLocked() bool {
	return !g.deadline.IsZero() && !g.now().Before(g.deadline)
}

// Acquire lets queues admit and start keys of partition. The caller (the shard runtime)
// must then enqueue every cached object of the partition, because adds made before
// Acquire were dropped. Acquiring an acquired partition is a no-op.
func (g *Gate) Acquire(partition partition.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.acquired[partition]; ok {
		return
	}
	g.acquired[partition] = struct{}{}
	if g.observer != nil {
		g.observer.Acquired(partition)
	}
	if t := g.tenures[partition]; t != nil {
		t.draining = false // handed back before its drain finished: the tenure goes on
	} else {
		g.tenures[partition] = newTenure()
	}
	// Keys of the partition still sitting in the underlying queues from an earlier
	// tenure are live again and will be processed rather than discarded.
	for q := range g.queues {
		q.mu.Lock()
		q.stale -= len(q.queued[partition])
		q.mu.Unlock()
	}
	g.broadcastLocked()
}

// Release takes partition away from this shard, in the order the handoff protocol needs:
//
//  1. it marks the partition not acquired, atomically with respect to every Get and Add,
//     so from this point no queue admits a key of it and no worker starts one; the work
//     already running may still write (the partition is draining);
//  2. it waits until every key of the partition that a worker already took (between Get
//     and Done, in any queue) is Done; ctx bounds this wait;
//  3. it ends the partition's tenure, so nothing of it writes any more, and forgets the
//     rate-limiter state of its keys in every queue. Keys still inside client-go's queues
//     cannot be removed; they are stale and Get discards them.
//
// Release returns nil only when no work of the partition runs any more, so the shard may
// then answer Released. If ctx ends first it returns an error wrapping ctx.Err(): the
// partition stays revoked (step 1 is not undone), but some of its work may still be
// running, so the shard must not report it released; calling Release again resumes the
// wait. Releasing a partition that is not acquired still waits for leftover in-flight
// work of it (of a revoked partition, that work can no longer write), which makes a
// retried Release safe and lets the shard answer Released for a revoked partition only
// once its work is gone.
func (g *Gate) Release(ctx context.Context, partition partition.ID) error {
	g.StopStarting(partition)

	if err := g.wait(ctx, func() bool { return g.inFlight[partition] == 0 }); err != nil {
		return fmt.Errorf("release partition %d: waiting for in-flight work: %w", partition, err)
	}

	// Holding the lock keeps a concurrent Acquire of the same partition from interleaving:
	// if it was re-acquired meanwhile, its tenure and backoff state belong to the new one.
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.acquired[partition]; ok {
		return nil
	}
	g.endTenureLocked(partition)
	for q := range g.queues {
		q.forgetPartition(partition)
	}
	return nil
}

// StopStarting is Release's first step alone: no key of partition is admitted or started
// from now on, while the work already running may finish and write (the partition is
// draining). The runtime calls it the moment the coordinator asks for a release, ahead
// of the operations still queued for the partition.
func (g *Gate) StopStarting(partition partition.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.acquired[partition]; !ok {
		return
	}
	delete(g.acquired, partition)
	g.observeReleasedLocked(partition)
	if t := g.tenures[partition]; t != nil {
		t.draining = true
	}
	for q := range g.queues {
		q.mu.Lock()
		q.stale += len(q.queued[partition])
		q.mu.Unlock()
	}
	// Wake a Get that holds a key of this partition while fenced, so it discards it.
	g.broadcastLocked()
}

// Fenced reports whether the Gate is past its lease deadline: no work starts and, through
// FenceTransport, no write leaves.
func (g *Gate) Fenced() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.blockedLocked()
}

// Partitions returns the acquired partitions in ascending order.
func (g *Gate) Partitions() []partition.ID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]partition.ID, 0, len(g.acquired))
	for p := range g.acquired {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Draining returns the partitions that are released but may still write because their
// in-flight work has not finished, in ascending order.
func (g *Gate) Draining() []partition.ID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []partition.ID
	for p, t := range g.tenures {
		if t.draining {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Stats is a point-in-time view of a Gate, for metrics and debugging.
type Stats struct {
	Fenced   bool
	Acquired int // number of acquired partitions
	InFlight int // keys in flight over all queues
	// InFlightPartitions counts the keys in flight by partition (partitions with none
	// are absent).
	InFlightPartitions map[partition.ID]int
	// RefusedWrites counts the controllers' writes the fence refused or cancelled.
	RefusedWrites RefusedWrites
	Queues        []QueueStats
}

// RefusedWrites counts writes the shard's fence stopped, by reason.
type RefusedWrites struct {
	Fenced  uint64 // the lease had run out
	NotHeld uint64 // the partition was not held
	Revoked uint64 // cancelled in flight by a revocation
}

// Stats returns a snapshot of the Gate and of every queue that has not been shut down,
// sorted by queue name.
func (g *Gate) Stats() Stats {
	g.mu.RLock()
	s := Stats{Fenced: g.blockedLocked(), Acquired: len(g.acquired), InFlight: g.total,
		InFlightPartitions: make(map[partition.ID]int, len(g.inFlight))}
	for p, n := range g.inFlight {
		s.InFlightPartitions[p] = n
	}
	s.RefusedWrites = RefusedWrites{Fenced: g.refused.fenced.Load(), NotHeld: g.refused.notHeld.Load(), Revoked: g.refused.revoked.Load()}
	queues := make([]*Queue, 0, len(g.queues))
	for q := range g.queues {
		queues = append(queues, q)
	}
	g.mu.RUnlock()
	for _, q := range queues {
		s.Queues = append(s.Queues, q.Stats())
	}
	slices.SortFunc(s.Queues, func(a, b QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// acquiredLocked reports whether partition is acquired; g.mu must be held.
func (g *Gate) acquiredLocked(partition partition.ID) bool {
	_, ok := g.acquired[partition]
	return ok
}

// tenure is one stretch of time in which the shard may write to a partition: from
// Acquire until a Revoke, or until a Release has seen its in-flight work finish. Work of
// the partition runs under its context (Queue.KeyContext, FenceTransport), so ending the
// tenure cancels that work wherever it is.
type tenure struct {
	ctx      context.Context
	cancel   context.CancelFunc
	draining bool // released; in-flight work may still finish and write
}

func newTenure() *tenure {
	ctx, cancel := context.WithCancel(context.Background())
	return &tenure{ctx: ctx, cancel: cancel}
}

// endTenureLocked cancels partition's tenure, if any; g.mu must be held exclusively.
func (g *Gate) endTenureLocked(partition partition.ID) {
	if t := g.tenures[partition]; t != nil {
		t.cancel()
		delete(g.tenures, partition)
	}
}

// tenureContext returns the context of partition's tenure, or nil if the shard may not
// write to it now.
func (g *Gate) tenureContext(partition partition.ID) context.Context {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if t := g.tenures[partition]; t != nil {
		return t.ctx
	}
	return nil
}

// broadcastLocked wakes every waiter; g.mu must be held exclusively.
func (g *Gate) broadcastLocked() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// waitChLocked returns the channel that the next broadcast closes; g.mu must be held
// exclusively.
func (g *Gate) waitChLocked() <-chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// wait blocks until cond, evaluated under g.mu, is true or ctx ends.
func (g *Gate) wait(ctx context.Context, cond func() bool) error {
	g.mu.Lock()
	for !cond() {
		ch := g.waitChLocked()
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
	}
	g.mu.Unlock()
	return nil
}

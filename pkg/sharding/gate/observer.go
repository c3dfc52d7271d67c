package gate

import (
	"context"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Observer learns, as it happens, what the gate knows of each partition's work: when the
// shard starts and stops holding a partition, and each reconcile of it that finished.
// The shard's load meter (pkg/sharding/loadmeter) is one: the coordinator places
// partitions by the load the shards measure, and only the gate sees every queue's
// completed work and every change of what the shard holds. The gate calls it with its
// own lock held for Acquired and Released (so that the observer sees them in the order
// they happened), and without it for Done; an Observer must therefore be quick and must
// never call back into the Gate.
type Observer interface {
	// Acquired: the shard holds partition from now on (Gate.Acquire of a partition not
	// acquired).
	Acquired(p partition.ID)
	// Released: the shard stopped holding partition (Release, StopStarting or Revoke of
	// an acquired partition); work of it still draining may still call Done.
	Released(p partition.ID)
	// Done: a worker finished one key of partition (Queue.Done of a key it had started),
	// once per completed reconcile. Keys discarded without work are not reported.
	Done(p partition.ID)
}

// Option configures a Gate at New.
type Option func(*Gate)

// WithObserver has the gate report to o (see Observer).
func WithObserver(o Observer) Option {
	return func(g *Gate) { g.observer = o }
}

// partitionKey is the context key of the partition a reconcile works.
type partitionKey struct{}

// WithPartition returns ctx marked as the work of partition p, so that what runs under it
// (the API requests of a reconcile, and their wait in the client's rate limiter) can be
// told apart by partition. Queue.KeyContext marks every reconcile's context this way.
func WithPartition(ctx context.Context, p partition.ID) context.Context {
	return context.WithValue(ctx, partitionKey{}, p)
}

// PartitionFrom returns the partition ctx was marked with by WithPartition (a reconcile's
// context, Queue.KeyContext), and whether it was marked.
func PartitionFrom(ctx context.Context) (partition.ID, bool) {
	p, ok := ctx.Value(partitionKey{}).(partition.ID)
	return p, ok
}

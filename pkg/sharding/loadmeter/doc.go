// Package loadmeter measures the load a shard's controllers put on the cluster, per
// partition, so that the coordinator can place partitions by the work they carry and not
// by their count (docs/design-placement.md §1, issue 31).
//
// A [Meter] holds dense per-partition counters, one slot per partition of the shard's
// partition map, updated on the hot paths with atomic adds only (no lock per request or
// reconcile):
//
//   - API requests, by [Transport], a RoundTripper wrapped around every controller client
//     (the fenced clientset, the events clientset and the metadata client). The partition
//     is the one of the namespace the request's URL names (gate.RequestNamespace), so an
//     event is its namespace's load and namespaces/x/finalize is x's; cluster-scoped
//     requests are the cluster partition's. Each request counts the weight its client was
//     given: 1/ClientQPSScale of its controller, so that the namespace controller's ×20
//     client counts 1/20 per request and a partition's load is a share of one default
//     client's budget.
//   - Reconciles: the Meter is the gate's Observer, told once per completed reconcile
//     (Queue.Done), and of every partition the shard starts and stops holding.
//   - Client rate-limiter wait, by [Limiter], which wraps a controller client's token
//     bucket and attributes the time a request waited to the partition of the reconcile
//     it was made from (gate.PartitionFrom on the request's context, which
//     Queue.KeyContext marks), or to the shard as a whole when the context names none
//     (events sent by the broadcaster's goroutine, informer-less background work).
//
// [Meter.Snapshot] turns the counters into rates: each held partition's counters are
// sampled into exponentially weighted moving averages ([EWMA], half-life 5 minutes by
// default) that start at 0 when the shard acquires the partition, and reported with the
// bias correction that makes a newly acquired partition report its true rate from its
// first sample on, without any history carried over from its previous owner. A
// partition's load is its weighted requests/s plus ReconcileWeight × its reconciles/s.
// Rate-limiter wait is reported (per partition and shard-wide) but is not part of the
// load: a partition waits on a saturated shard and not on an idle one, so counting it
// would change a partition's load by moving it.
//
// The meter exports kshard_shard_load{kind}, kshard_controller_rate_limiter_wait_seconds_total{controller}
// and kshard_shard_partition_load{partition}, the last for at most the 20 partitions
// carrying at least 5 % of the shard's load ([Meter.RegisterMetrics]).
package loadmeter

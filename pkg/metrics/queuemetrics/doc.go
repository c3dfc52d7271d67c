// Package queuemetrics exports work-queue metrics of a kshard process to Prometheus.
//
// [Provider] implements client-go's workqueue.MetricsProvider, so the standard client-go
// queue metrics (depth, adds, queue and work latency, unfinished work, retries) of every
// controller queue are exported as kshard_workqueue_* series labelled with the queue
// name, which kshard sets to the controller name. What only the sharding layer knows of
// the queues (keys dropped because their partition is not acquired, stale keys of
// released partitions still inside client-go's queues, in-flight work) is the gate's own
// series, with the same name label: see gate.Gate.RegisterMetrics.
//
// Nothing is registered globally: the caller passes the prometheus.Registerer (and
// constant labels such as the shard identity), so tests and several shards in one process
// stay independent. There is no init function.
package queuemetrics

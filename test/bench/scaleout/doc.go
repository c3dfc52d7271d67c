// Package scaleout measures whether adding shards adds throughput, at
// kube-controller-manager's own client limits, on the real local control plane.
//
// BenchmarkScaleOut creates a burst of Deployments (KSHARD_BENCH_SCALEOUT_NAMESPACES
// namespaces, default 300, × KSHARD_BENCH_SCALEOUT_DEPLOYMENTS Deployments, default 2, ×
// KSHARD_BENCH_SCALEOUT_REPLICAS pause pods, default 3) and measures the time until every
// Deployment has completed its rollout, for
//
//   - upstream: a kube-controller-manager started for the run beside the cluster's own
//     (which runs every other controller), with --controllers=deployment,replicaset;
//   - kshard-N: a coordinator and N shards (KSHARD_BENCH_SCALEOUT_SHARDS, default 1,2,4)
//     running replicaset,deployment.
//
// (KSHARD_BENCH_SCALEOUT_UPSTREAM=0 leaves upstream out, for a look at kshard alone.)
//
// KSHARD_BENCH_PLACEMENT (default count) is the coordinators' --placement: a list such as
// count,load runs every shard count above one under each (kshard-N and kshard-N-load, one
// shard once), so the two placements are compared in one run. BenchmarkCapacity takes one.
// Both benchmarks create their namespaces before the shards start, so placement by load
// places them by namespace counts at the first assignment.
//
// Every controller process has kube-controller-manager's defaults: --kube-api-qps 20,
// --kube-api-burst 30 per controller client (events included, in both), 5 deployment and
// 5 replicaset workers. All runs use the same control plane, one after the other, and a
// repetition runs every configuration once (KSHARD_BENCH_REPS repetitions, default 3), so
// drift of the machine spreads over all of them. Beside each run it reports the CPU the
// control plane's processes used (in cores: CPU-seconds over the run's duration), so that
// a reader sees when the API server rather than the controllers' rate limits bound a
// run, and for kshard the share of the burst that the busiest shard owned: its inverse is
// the speedup an even split over the shards' rate limits would allow.
//
// BenchmarkScaleOutJobs is the same comparison for the job controller: a burst of
// Jobs (KSHARD_BENCH_JOBS_NAMESPACES namespaces, default 200, × KSHARD_BENCH_JOBS_PER_NAMESPACE
// Jobs, default 10, of KSHARD_BENCH_JOBS_COMPLETIONS completions at that parallelism,
// default 5; kwok completes each pod as soon as it runs) timed until every Job is Complete,
// for upstream (--controllers=job) and kshard with 1 and 3 shards by default, with 5 job
// workers each. The cluster's own kube-controller-manager runs without the job controller.
//
// BenchmarkCapacity draws the capacity curve: for 1, 2, 3 and 4 shards
// (KSHARD_BENCH_CAPACITY_SHARDS) with the same limits, the highest sustained rate of
// Deployment changes at which the deployment and replicaset controllers each hold a
// queue-wait p99 <= 1 s and a reconcile p99 <= 5 s (the shards' own histograms,
// kshard_workqueue_queue_duration_seconds and kshard_controller_reconcile_duration_seconds,
// summed over the shards, their increase over the step, p99 interpolated within a bucket
// as Prometheus's histogram_quantile does). KSHARD_BENCH_CAPACITY_NAMESPACES namespaces
// (default 400) hold one Deployment of 2 replicas each, filled once by a kshard with high
// limits. Each shard count then gets a ladder of offered rates (KSHARD_BENCH_CAPACITY_RATES,
// changes/s). Each step first scales every Deployment back to 2 replicas and waits until
// all have completed (outside the step's measurements), so that every step offers the same
// work; then for KSHARD_BENCH_CAPACITY_WINDOW_SECONDS (default 60) the benchmark patches
// Deployments picked at random, alternately a scale change (2 ↔ 3 replicas) and a rollout
// (a new pod template annotation), then waits until every Deployment has completed (at
// most 3 minutes) before it reads the histograms, so that the step's backlog counts. A
// step holds when both SLOs hold, it drained, and the client sent >= 95 % of the offered
// rate; the ladder stops at the first step that fails, and then halves the gap between
// the highest rate that held and the lowest that failed KSHARD_BENCH_CAPACITY_REFINE times
// (default 2). The table, a CSV and two plots
// (capacity.svg: sustained rate by shards with the linear ideal; capacity-latency.svg:
// queue-wait p99 by offered rate) are written to the artifacts folder.
//
// Run them with
//
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench 'ScaleOut$' -benchtime=1x -timeout 120m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench ScaleOutJobs -benchtime=1x -timeout 300m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench Capacity -benchtime=1x -timeout 180m -v
//
// (make build first; `make bench` runs all three). The summary table (median [min–max] per
// configuration) is logged and written to the artifacts folder as summary.txt.
package scaleout

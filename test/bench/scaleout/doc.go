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
// (a new pod template annotation), at Poisson arrival times (KSHARD_BENCH_CAPACITY_ARRIVALS
// =poisson, the default: the step's changes at uniform random times within its window, so
// that each of N shards sees Poisson arrivals as one shard does; =regular sends one every
// 1/rate s, as runs 1 to 4 did, which gives one shard a smoother stream than each of N
// gets), then waits until every Deployment has completed (at
// most 3 minutes) before it reads the histograms, so that the step's backlog counts. A
// step holds when both SLOs hold, it drained, and the client sent >= 95 % of the offered
// rate; the ladder stops at the first step that fails, and then halves the gap between
// the highest rate that held and the lowest that failed KSHARD_BENCH_CAPACITY_REFINE times
// (default 2). The table, a CSV and two plots
// (capacity.svg: sustained rate by shards with the linear ideal; capacity-latency.svg:
// queue-wait p99 by offered rate) are written to the artifacts folder.
//
// BenchmarkCapacitySkewed measures what one hot namespace costs the others at 4 shards
// (issue 31; docs/design-placement.md §6). KSHARD_BENCH_SKEW_NAMESPACES namespaces (400)
// of one Deployment of 2 replicas, plus one hot namespace of
// KSHARD_BENCH_SKEW_HOT_DEPLOYMENTS Deployments (100) of 2 replicas, are filled once. The
// changes are BenchmarkCapacity's (alternately a scale 2 ↔ 3 and a rollout, Deployments
// picked at random) at a fixed total rate KSHARD_BENCH_SKEW_RATE (3.25 changes/s, half the
// 4-shard capacity of BenchmarkCapacity's run 6, docs/performance.md), of which
// KSHARD_BENCH_SKEW_HOT_SHARE (0.25) go to the hot namespace's Deployments.
// Configurations (KSHARD_BENCH_SKEW_CONFIGS, default
// a,b,c), each on fresh shards (4 but for d) at BenchmarkCapacity's limits:
//
//   - a-without-hot: the hot namespace's changes are not sent (its Deployments exist);
//     the others get the same per-namespace rate, the rate × 0.75; --placement=load;
//   - b-hot-load: every change, --placement=load (the coordinator's defaults otherwise);
//   - c-hot-count: every change, --placement=count, for contrast;
//   - d-without-hot-one-shard-fewer (only when named): a's changes on 3 shards, what a
//     perfect isolation of the hot namespace leaves the others, so the best b can do.
//
// The load runs through a warm-up of KSHARD_BENCH_SKEW_WARMUP_SECONDS (300) and a measured
// window of KSHARD_BENCH_SKEW_WINDOW_SECONDS (120). Latency is client side, because the
// shards' queue histograms are per controller and not per namespace: per change, from the
// patch's response to the Deployment's status.observedGeneration reaching the patch's
// generation (one watch on the benchmark's Deployments), i.e. queue wait plus the
// deployment controller's first reconcile; a change not observed within 3 minutes counts
// as +Inf (reported as -1 in the benchmark metrics). Per configuration it reports p50, p99
// and max over the window's changes of the other namespaces and, apart, of the hot one;
// the changes sent; where the hot namespace's partition is (polled every 5 s through the
// warm-up from the leading coordinator's /assignments: its shard, and whether that shard
// holds any other partition with a namespace) and when it was first isolated after the
// shards started; the coordinator's balancer moves by reason and rounds by outcome
// (kshard_coordinator_balancer_moves_total, _rounds_total); the workload's namespaces per
// shard; each shard's client rate-limiter wait per second. In b-hot-load the hot partition
// must be isolated when the window starts: if not, the benchmark fails loudly (the figures
// are still written). The goal line compares b's other-namespace p99 with 1.2 × a's, and
// shows c's. Written to skew.txt and skew.csv.
//
// BenchmarkBalancerSteady measures what placement by load costs under a steady load: 4
// shards of the audit shard (bin/audit-shard, which records every reconcile of a probe
// ConfigMap in each namespace, every KSHARD_BENCH_STEADY_AUDIT_RESYNC_SECONDS, default 10)
// running deployment,replicaset at BenchmarkCapacity's limits, coordinators with
// --placement=load at their defaults, the same workload as BenchmarkCapacitySkewed (its
// _NAMESPACES, _HOT_DEPLOYMENTS and _HOT_SHARE) at KSHARD_BENCH_STEADY_RATE (2.5 changes/s):
// uniform over the other namespaces for KSHARD_BENCH_BALANCE_MINUTES (60), then with the
// hot namespace's share for KSHARD_BENCH_STEADY_SKEWED_MINUTES (as many). The leading
// coordinator's balancer series are sampled every minute (steady.csv). The first
// KSHARD_BENCH_STEADY_SETTLE_MINUTES (20: about 4 half-lives of the default 5 min
// --load-half-life) of each phase are its convergence; the load moves per hour after them
// are the figure (goal ≤ 3), with the rounds by outcome. After the run the audit logs must
// show no two shards reconciling one namespace at once (test/audit's Overlaps; goal 0),
// and the ownership gap's p99 over the moves after the cold start is reported from
// kshard_coordinator_ownership_gap_seconds. Written to steady.txt.
//
// KSHARD_BENCH_COORDINATOR_ARGS is added to every coordinator's flags in every benchmark of
// the package: a small run of the two above lowers the balancer's periods with it, e.g.
// "--balance-interval=20s --balance-warmup=20s --load-report-interval=5s
// --load-half-life=20s" with KSHARD_BENCH_SKEW_NAMESPACES=40,
// KSHARD_BENCH_SKEW_HOT_DEPLOYMENTS=10, a 60 s warm-up and a 30 s window (about 7 min), or
// 3 + 3 steady minutes converged after 1 (about 7 min). Such runs prove the harness, not
// the goals.
//
// Run them with
//
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench 'ScaleOut$' -benchtime=1x -timeout 120m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench ScaleOutJobs -benchtime=1x -timeout 300m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench 'Capacity$' -benchtime=1x -timeout 180m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench CapacitySkewed -benchtime=1x -timeout 90m -v
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench BalancerSteady -benchtime=1x -timeout 180m -v
//
// (make build first; `make bench` runs them all). The summary table (median [min–max] per
// configuration) is logged and written to the artifacts folder as summary.txt.
package scaleout

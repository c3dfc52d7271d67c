// Package scaleout measures whether adding shards adds throughput, at
// kube-controller-manager's own client limits (issue 11 §1), on the real local control
// plane.
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
// Run it with
//
//	KSHARD_BIN_DIR=bin go test ./test/bench/scaleout -run '^$' -bench ScaleOut -benchtime=1x -timeout 120m -v
//
// (make build first). The summary table (median [min–max] per configuration) is logged
// and written to the artifacts folder as summary.txt.
package scaleout

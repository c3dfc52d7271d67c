// Package namespacelife measures the controllers that give a namespace its life:
// serviceaccount, root-ca-cert-publisher and namespace, upstream
// kube-controller-manager against kshard with 1 and 3 shards, in one run on one control
// plane.
//
// BenchmarkNamespaceLife, for each configuration:
//
//  1. creates KSHARD_BENCH_NSLIFE_NAMESPACES namespaces (default 1,000) and times until
//     every one has its "default" ServiceAccount and its "kube-root-ca.crt" ConfigMap
//     (a watch records when each appears: the p50/p99/max latency after the namespace's
//     creation are reported beside the total);
//  2. fills KSHARD_BENCH_NSLIFE_DELETE of them (default 500) with objects of 6 kinds,
//     KSHARD_BENCH_NSLIFE_PER_KIND of each (default 3, 21 objects a namespace): ConfigMaps,
//     Secrets, Services, bare pods, a Deployment's objects (the Deployment, a ReplicaSet it
//     controls and KSHARD_BENCH_NSLIFE_PER_KIND pods that ReplicaSet controls, written with
//     their owner references as the controllers would: the benchmark runs no workload
//     controllers) and objects of a CustomResourceDefinition of its own
//     (widgets.nslife.kshard.io); then deletes those namespaces and times until all are
//     gone (p50/p99/max per namespace too).
//
// The configurations:
//
//   - upstream: a kube-controller-manager started for the run beside the cluster's own,
//     with --controllers=serviceaccount,root-ca-cert-publisher,namespace and the
//     cluster's CA as --root-ca-file;
//   - kshard-N (KSHARD_BENCH_NSLIFE_SHARDS, default 1,3): a coordinator and N shards
//     running the same three controllers.
//
// The cluster's own kube-controller-manager must run without those three (hack/cluster.sh
// switches off every controller the shard binary implements), so that the measured
// processes are the only ones doing that work; it keeps running the others (garbage
// collector, quota, …) and its figures are reported beside. Every measured controller
// process gets the same client limits per controller, kube-controller-manager's defaults
// --kube-api-qps 20 and --kube-api-burst 30 (KSHARD_BENCH_NSLIFE_QPS and
// KSHARD_BENCH_NSLIFE_BURST), and the controllers' default worker counts (upstream's, which
// the shards' descriptors copy). kube-controller-manager gives its namespace controller's
// client 20 times that QPS and 100 times that burst (400 and 3,000 at the defaults), for
// the many discovery and delete calls of a deletion; a kshard namespace controller equal
// to upstream does the same. For each run the benchmark reports both times and their
// ratios to upstream, the peak RSS and CPU-seconds of every controller process, and the
// CPU-seconds of kube-apiserver and etcd over the run beside them; the table is logged and
// written to the artifacts folder (summary.txt). KSHARD_BENCH_NSLIFE_UPSTREAM=0 leaves
// upstream out. Each phase waits at most KSHARD_BENCH_NSLIFE_TIMEOUT_SECONDS (default
// 1,800) and fails with what is missing.
//
// A kshard configuration needs a shard binary that implements the three controllers
// (`shard --list-controllers`): without them the configuration fails at once, naming the
// missing ones. KSHARD_BENCH_NSLIFE_PARTIAL=1 runs it anyway with those the shard knows,
// to see the harness run and time out with what was not done. Between configurations
// every namespace of the run is deleted by a kube-controller-manager started for the
// cleanup with the namespace controller (the run's controllers are stopped first).
//
// Run it small with
//
//	KSHARD_BENCH_NSLIFE_NAMESPACES=50 KSHARD_BENCH_NSLIFE_DELETE=25 KSHARD_BIN_DIR=bin \
//	  go test ./test/bench/namespacelife -run '^$' -bench . -benchtime=1x -timeout 60m -v
//
// (make build first; `make bench` runs it at the default size).
package namespacelife

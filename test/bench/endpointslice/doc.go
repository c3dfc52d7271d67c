// Package endpointslice measures the EndpointSlice controller, upstream
// kube-controller-manager against kshard with 1 and 3 shards, in one run on one control
// plane (issue 30).
//
// BenchmarkEndpointSlice first makes the objects, once for every configuration:
// KSHARD_BENCH_ES_NODES nodes (default 500; plain Node objects labelled
// kshard.io/bench-endpointslice-node and spread over four zones, without kwok's
// annotation so that nothing but the benchmark writes their pods' status; the benchmark
// keeps them Ready as kubelets do, a Ready condition and a Lease renewed every 20 s, or the
// cluster's node lifecycle controller would mark their pods not Ready and evict them),
// KSHARD_BENCH_ES_NAMESPACES namespaces (default 200) of KSHARD_BENCH_ES_SERVICES headless
// Services each (default 10), each selecting KSHARD_BENCH_ES_PODS bare pods (default 50:
// 100,000 pods in all) bound round-robin to the nodes (spec.nodeName, no scheduler) with a
// named container port. The benchmark writes every pod's status itself (Running, a pod IP
// of its own, Ready). Then a kube-controller-manager with exactly --controllers=endpointslice
// builds every Service's slices (the prime, not measured), so that every configuration
// starts on the same complete slices.
//
// Then, for each configuration, one after the other:
//
//   - upstream: a kube-controller-manager with exactly --controllers=endpointslice
//     (framework.StartKCM, no housekeeping controllers);
//   - kshard-N (KSHARD_BENCH_ES_SHARDS, default 1,3): a coordinator
//     (kube-controller-manager's leader-election timings) and N shards running
//     --controllers endpointslice.
//
// Every controller process gets kube-controller-manager's defaults: --kube-api-qps 20 and
// --kube-api-burst 30, --concurrent-service-endpoint-syncs 5, batch period 0. The cluster's
// own kube-controller-manager must not run the controller (hack/cluster.sh switches off
// every controller kshard implements).
//
// A configuration starts its controller and waits until its takeover is done: a probe
// Service's slice is written and the slices show every pod as the benchmark last set it
// (the slice writes of the takeover are counted: a controller that finds equal slices
// writes none). Then two timed phases, each flipping the Ready condition of random pods
// (pods/status patches, a token bucket, never a pod whose last flip is not yet seen) at a
// steady rate for KSHARD_BENCH_ES_PHASE_SECONDS (default 120):
//
//  1. saturation: KSHARD_BENCH_ES_SATURATION flips/s (default 100, above three
//     controllers' 3 × 20 writes/s);
//  2. latency: KSHARD_BENCH_ES_LATENCY flips/s (default 10, below one client's limit).
//
// The benchmark watches every managed EndpointSlice of its namespaces. Per phase and
// configuration it reports: the slice writes the watch saw per second until every flip
// was seen, and the endpointslices write requests the API server counted
// (apiserver_request_total, failed and no-op ones included); slice writes per flip (goal:
// kshard no more than upstream); p50, p99 and max from a flip to the first slice event
// that shows the pod with its new readiness (goal: kshard-1's p99 no worse than
// upstream's) and the flips never seen within KSHARD_BENCH_ES_DRAIN_SECONDS (default 300)
// after the phase; the busiest shard's share of the Services (by the coordinator's
// assignment of their namespaces) and the even-split ceiling 1/share (goal: kshard-3's
// writes/s in saturation over kshard-1's reaching it); the requests the busiest controller
// process sent and its rate-limiter wait; kube-apiserver's and etcd's cores, the machine's
// busy cores and load; and what bounded the phase (QPS when the busiest process sent at
// 85 % or more of 20/s, CPU when the cores were 85 % or more busy). For the whole
// configuration: CPU-seconds and peak RSS (VmHWM) of every controller process and the
// coordinator. summary.txt in the artifacts folder holds the tables (median [min–max]
// over KSHARD_BENCH_ES_REPS repetitions, default 1). KSHARD_BENCH_ES_UPSTREAM=0 leaves
// upstream out.
//
// The machine cost: 100,000 pods and 2,000+ slices in etcd and the API server; making them
// takes about 200,000 requests of the benchmark's own client. The sizes scale it down.
//
// Run it with
//
//	make build
//	KSHARD_BIN_DIR=bin go test ./test/bench/endpointslice -run '^$' -bench . -benchtime=1x -timeout 180m -v
package endpointslice

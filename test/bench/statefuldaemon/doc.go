// Package statefuldaemon measures the DaemonSet and StatefulSet controllers, upstream
// kube-controller-manager against kshard with 1 and 3 shards, in one run on one control
// plane (issue 29).
//
// BenchmarkStatefulDaemon first creates KSHARD_BENCH_SD_NODES kwok nodes (default 500,
// labelled kshard.io/bench-statefuldaemon-node; deleted, with their Leases, when it ends,
// and any an interrupted run left are deleted before) and waits until kwok reports them
// Ready. Then, for each configuration, one after the other:
//
//   - upstream: a kube-controller-manager started for the run beside the cluster's own,
//     with exactly --controllers=daemonset,statefulset (framework.StartKCM, no
//     housekeeping controllers);
//   - kshard-N (KSHARD_BENCH_SD_SHARDS, default 1,3): a coordinator (kube-controller-manager's
//     leader-election timings, framework.KShardOptions.KCMTimings) and N shards running
//     --controllers daemonset,statefulset.
//
// Every controller process gets kube-controller-manager's defaults: --kube-api-qps 20 and
// --kube-api-burst 30 per controller client (events included, in both), 2 daemonset and
// 5 statefulset workers. The cluster's own kube-controller-manager must run neither
// controller (hack/cluster.sh switches off every controller the shard implements). The
// measured processes run no serviceaccount controller: the benchmark creates each
// namespace's "default" ServiceAccount itself.
//
// A configuration's run creates its namespaces, starts its controllers and waits until
// they have written the status of a probe DaemonSet (on no node) and a probe StatefulSet
// (0 replicas), and, for kshard, until every shard's /readyz is 200. Then four timed phases:
//
//  1. DaemonSets created: KSHARD_BENCH_SD_DAEMONSETS DaemonSets (default 6), one a
//     namespace, of pause pods on every benchmark node (nodeSelector), RollingUpdate with
//     maxUnavailable KSHARD_BENCH_SD_MAX_UNAVAILABLE (default 10%) and maxSurge 0;
//  2. DaemonSets updated: every template's image changed at once (pause 3.10 to 3.9);
//  3. StatefulSets created: KSHARD_BENCH_SD_STATEFULSETS StatefulSets (default 200), one
//     a namespace, of KSHARD_BENCH_SD_STS_REPLICAS pause pods (default 5), no volume
//     claim templates, RollingUpdate (partition 0, maxUnavailable 1);
//  4. StatefulSets updated: every template's image changed at once.
//
// Each phase is timed from its first request until every object has rolled out, read
// from its status as `kubectl rollout status` does (generation observed; a DaemonSet on
// every node with an updated, ready and available pod and none misscheduled; a
// StatefulSet with every replica ready, available and updated and its update revision
// current), polled every 250 ms with consistent lists. The median of the objects' own
// times is reported beside it.
//
// The StatefulSets use OrderedReady (KSHARD_BENCH_SD_STS_POLICY=Parallel for the other):
// it is the default, what a set without podManagementPolicy runs, and its creation is a
// chain of one pod at a time, each waiting for the one before it to be Running and Ready.
// With 200 sets at once the chains overlap, so the controller's client budget, not the
// chain, sets the time; the rolling update replaces one pod at a time (maxUnavailable 1)
// under either policy.
//
// kwok makes the pods Running and Ready; kube-scheduler (QPS 500) binds them, the
// DaemonSet's pods pinned to their node by node affinity as upstream does. Every shard
// caches every node; DaemonSets, StatefulSets and their pods are worked by the owner of
// their namespace.
//
// For each phase the benchmark reports, besides the time: the ratio to upstream's time
// and, for kshard, the speedup over kshard-1 (both pairing the runs of one repetition);
// the busiest shard's share of the phase's objects (by the coordinator's assignment of
// their namespaces) and its inverse, the even-split ceiling: the speedup over one shard
// that an even split of the work over the shards' rate limits allows, as
// docs/performance.md states it for the earlier benchmarks; the requests the busiest
// controller process sent and the time its requests waited in the client rate limiters
// (its own rest_client metrics, a delta over the phase); the CPU the cluster's processes
// used (kube-apiserver, etcd, kube-scheduler + kwok, in cores); the machine's busy cores
// (/proc/stat) and load average; and what bounded it: QPS when the busiest process sent at
// 85 % or more of its client limit, CPU when the machine's cores were 85 % or more busy.
// For the whole run: CPU-seconds and peak RSS (VmHWM) of every controller process and of
// the coordinator. The tables (summary.txt in the artifacts folder) give the median and
// range over KSHARD_BENCH_SD_REPS repetitions (default 1; a repetition runs every
// configuration once). Between runs the run's namespaces are deleted (a
// kube-controller-manager with the namespace controller is started for that) and waited
// for. KSHARD_BENCH_SD_UPSTREAM=0 leaves upstream out; KSHARD_BENCH_SD_KINDS (default
// daemonsets,statefulsets) runs one kind only; each phase waits at most
// KSHARD_BENCH_SD_TIMEOUT_SECONDS (default 1,800) and fails naming what is not rolled out.
//
// Run it with
//
//	make build
//	KSHARD_BIN_DIR=bin go test ./test/bench/statefuldaemon -run '^$' -bench . -benchtime=1x -timeout 180m -v
//
// (`make bench` runs it at the default size: 41 minutes on a 2-core machine, each of
// upstream and kshard-1 about 15 minutes of phases, every phase bound by the client QPS)
// and small with KSHARD_BENCH_SD_NODES=50 KSHARD_BENCH_SD_DAEMONSETS=3
// KSHARD_BENCH_SD_STATEFULSETS=20.
package statefuldaemon

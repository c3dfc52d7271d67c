// Package largecluster measures kshard's ReplicaSet and Deployment controllers against
// upstream kube-controller-manager's on a cluster of the size kshard is meant for: 10,000
// namespaces, one Deployment of 5 replicas in each (10,000 Deployments, 10,000
// ReplicaSets, 50,000 pods on kwok nodes). Sizes are environment knobs, so a small smoke
// run is possible (below).
//
// One controller set runs at a time, on the same control plane, in this order:
//
//   - upstream: a kube-controller-manager started by the benchmark with only
//     --controllers=deployment,replicaset (framework.StartKCM) beside the cluster's own,
//     which runs every other controller (garbage collector, namespace, …) and never these two;
//   - kshard-1, kshard-2, kshard-4: a coordinator and 1, 2 or 4 shards running
//     --controllers replicaset,deployment.
//
// Every controller process gets kube-controller-manager's defaults: --kube-api-qps 20,
// --kube-api-burst 30 (per controller client in both) and 5 deployment and 5 replicaset
// workers. The coordinators run with the server-side fence off (its partition labels
// would add 10,000 Namespace writes to kshard's start).
//
// For each run it reports:
//
//   - start to Ready: from the first process's start until the controllers can work. For
//     upstream, until both controllers' workers have finished their first item
//     (workqueue_work_duration_seconds_count{name="deployment"} and {name="replicaset"}
//     above zero on its /metrics, polled every 250 ms): kube-controller-manager starts a
//     controller's workers only once its informers (Deployments, ReplicaSets, Pods) are
//     synced, and the first item of a full queue finishes within milliseconds. For kshard,
//     from the shards' start until every shard's /readyz is 200 (session welcomed, lease
//     valid, the caches of every partition it holds synced) and the shards together hold
//     all partitions (kshard_shard_acquired_partitions). The coordinator runs with its
//     defaults (session TTL 28 s, margin 2 s, membership debounce 3 s) and is started
//     first: a new leader grants nothing for TTL + margin (30 s), in case shards of an
//     earlier leader still hold partitions, and coordinators are long-lived while shards
//     are what restarts, so the shards start once that grace has passed. A cold start of
//     both takes the rest of the grace longer. The coordinator gets --expected-shards=N,
//     as the chart sets it, so it assigns the partitions at the N-th shard's hello rather
//     than after the membership debounce (until 2026-11-27 the 3 s debounce was
//     included). Each shard's own time to its first Ready with partitions is listed too.
//   - first change: right after Ready, one Deployment in a random namespace is scaled by
//     one; the time until its ReplicaSet's spec.replicas follows, and until the
//     Deployment's status.observedGeneration catches up (polled every 20 ms). After a
//     start every Deployment and ReplicaSet of the cluster is in the controllers' queues,
//     so this measures how long a change waits behind that backlog.
//   - queues empty: from Ready until the deployment and replicaset work queues of every
//     controller process are first empty (workqueue_depth), the start's backlog worked off.
//     The settle period and the churn begin then.
//   - RSS: peak (VmHWM, from the process's start to the end of the churn) and steady (mean
//     of VmRSS sampled every second during the churn), per controller process.
//   - CPU-seconds (utime+stime) per process during the start and during a steady churn:
//     after a settle period, KSHARD_BENCH_CHURN_RATE Deployment scale changes a second
//     (each between 5 and 6 replicas, in a random namespace) for KSHARD_BENCH_CHURN_SECONDS.
//     The API server's, etcd's, and the cluster's other processes' CPU-seconds, and the
//     machine's busy cores, are recorded over the same windows, to tell what bounded a run.
//   - bytes the API server sent: per controller process, the bytes that crossed its
//     connections, counted by a TCP proxy each process is pointed at
//     (framework.ByteProxy: TLS, HTTP framing, gzip where the client accepts it: the
//     shards' client-go clients accept gzip and the API server compresses their lists and
//     watch streams, kube-controller-manager's arrive uncompressed; kube-controller-manager's
//     delegated authentication and authorization clients bypass the proxy); and
//     for the whole API server, the deltas of its own metrics over the same windows:
//     apiserver_response_sizes (verb LIST) and apiserver_watch_events_sizes, by resource.
//     Those include every client of the cluster (scheduler, kwok, the cluster's
//     kube-controller-manager, the coordinator); only one controller set runs at a time, so
//     the differences between runs are the controllers'.
//   - the client rate limiter's summed wait per controller process (its own
//     rest_client_rate_limiter_duration_seconds), to tell a QPS-bound run.
//
// The summary table (summary.txt in the artifacts folder) shows every figure as the median
// over the repetitions with the range, "median [min–max]", and checks the goals:
// memory per shard <= 1.15 × upstream's / N + 25 MiB, start to Ready <= upstream's.
//
// # The cluster
//
// The benchmark runs on a control plane of its own (not the default one other tests use),
// started with its own folder and ports; 10 kwok nodes hold any number of pods (kwok gives
// each 1M pods of capacity):
//
//	export KSHARD_CLUSTER_DIR=$PWD/_output/cluster-large KSHARD_ETCD_PORT=25790 KSHARD_ETCD_PEER_PORT=25800 \
//	  KSHARD_APISERVER_PORT=28443 KSHARD_SCHEDULER_PORT=22259 KSHARD_KCM_PORT=22257 KSHARD_KWOK_PORT=22247
//	KSHARD_KEEP_DATA=1 hack/cluster.sh up
//
// and stopped, keeping its objects for the next run, with
//
//	KSHARD_KEEP_DATA=1 hack/cluster.sh down
//
// (same variables). The fixture (namespaces lc-00000…, labelled kshard.io/bench-large)
// is made once and reused: the benchmark creates what is missing, and when some
// Deployment is not Available it runs kshard itself (KSHARD_BENCH_POPULATE_SHARDS
// shards, default 2, at --kube-api-qps 1000 and 20 workers per controller) until every
// one is, so the ReplicaSets and pods are exactly what the controllers make. At 10,000 ×
// 5 that takes a while once (the API server, etcd, the scheduler and kwok share the
// machine); kube-apiserver holds a few GiB.
//
// # Running it
//
//	make build
//	KSHARD_KUBECONFIG=$KSHARD_CLUSTER_DIR/kubeconfig KSHARD_BIN_DIR=$PWD/bin \
//	  go test ./test/bench/largecluster -run '^$' -bench . -benchtime=1x -timeout 180m -v
//
// (or make bench-large, which starts and stops the cluster above). KSHARD_BENCH_REPETITIONS=n
// goes round every case n times (keep -benchtime=1x: a larger count runs each case once
// more for the benchmark's launch); choose the cases with KSHARD_BENCH_RUNS then, not with
// -bench: go test names a case's second run upstream#01, which a pattern such as
// 'LargeCluster/upstream$' leaves out. A smoke run: KSHARD_BENCH_NAMESPACES=200 KSHARD_BENCH_REPLICAS=5
// KSHARD_BENCH_CHURN_SECONDS=20 KSHARD_BENCH_SETTLE_SECONDS=5. Other knobs:
// KSHARD_BENCH_DEPLOYMENTS_PER_NS (1), KSHARD_BENCH_RUNS (upstream,kshard-1,kshard-2,kshard-4;
// a name that matches none, e.g. none, only makes the fixture),
// KSHARD_BENCH_CHURN_RATE (2 per second), KSHARD_BENCH_SEED (the random namespaces),
// KSHARD_BENCH_SHARD_ARGS (more flags for the measured shards, space-separated, e.g.
// --kube-api-content-type=application/json), KSHARD_BENCH_PROFILE_DIR (saves each controller process's CPU profile of the first 20 s
// of its start, its heap at Ready and after the settle period, a 30 s CPU profile from the
// middle of the churn, for go tool pprof, and follows each process's heap goal,
// go_memstats_next_gc_bytes, every second until the churn ends: the log gives its highest
// value and when it was seen, and heap-peak is the profile fetched when it last rose by
// 5 %, the live heap as the runtime last published it, one or two collections old).
//
// # The garbage collector and ResourceQuota
//
// KSHARD_BENCH_CONTROLLERS=garbagecollector,resourcequota measures those two controllers
// instead, with the same machinery, cluster, runs and figures, and these differences:
//
//   - both sides run --controllers garbage-collector-controller,resourcequota-controller
//     (kube-controller-manager 1.37's canonical names; the shard takes the same) with
//     kube-controller-manager's defaults, --concurrent-gc-syncs 20 and
//     --concurrent-resource-quota-syncs 5, and QPS 20, burst 30.
//   - the fixture adds, per namespace, KSHARD_BENCH_CONFIGMAPS_PER_NS ConfigMaps (3),
//     KSHARD_BENCH_SECRETS_PER_NS Secrets (3) and one ResourceQuota counting pods,
//     ConfigMaps, Secrets, Deployments and ReplicaSets (object counts only: the fixture's
//     pods request no CPU, and a requests.cpu quota would refuse them). The populating
//     shards run resourcequota too, until every quota's status shows its spec and the
//     namespace's pods, so no measured run starts by writing 10,000 statuses.
//   - start to Ready for upstream: the garbage collector has logged "Garbage collector: all resource monitors
//     have synced" (its graph is built from every resource's informer; it starts its
//     workers right after) and the ResourceQuota controller's resourcequota_primary queue
//     has finished its first item (its workers start once its informers and its monitors
//     of the counted resources are synced). For kshard as above.
//   - first change: a ConfigMap owner and one dependent are made in a random namespace and
//     the owner deleted; the time until the namespace's quota counts one ConfigMap fewer
//     (admission counts creations, only the controller counts deletions) and until the
//     garbage collector has deleted the dependent.
//   - queues empty: every work queue of the controller processes.
//   - deletion latency, after the settle period and before the churn: KSHARD_BENCH_DELETIONS
//     (20) Deployments in random namespaces are deleted at once, background propagation,
//     and for each the time until its last pod is gone is taken (pods listed every 100 ms);
//     median and max per run.
//   - the churn: each step (KSHARD_BENCH_CHURN_RATE a second) makes a ConfigMap owner with
//     two dependents in a random namespace and deletes the owners older than 10 s
//     (background), so the garbage collector deletes the dependents and the quotas count
//     up and down; every 10th step instead deletes a random namespace's Deployment and
//     creates it again, so the garbage collector deletes the old ReplicaSet and its pods.
//     "Caught up" is until every churn ConfigMap and every replaced Deployment's
//     ReplicaSets and pods are gone. No Deployment controller runs during the runs, so
//     after each run the fixture is restored (populating shards, not measured);
//     KSHARD_BENCH_RESTORE=0 restores it only when the benchmark starts, and later runs
//     delete and replace only Deployments earlier runs left alone (each run leaves about
//     deletions + churn steps / 10 of them without pods).
//   - the goals add: one shard's memory <= upstream's + 10 %, and the deletion latency
//     (median and max) no worse than upstream's.
//
// Run with -bench LargeCluster as above plus KSHARD_BENCH_CONTROLLERS=garbagecollector,resourcequota.
package largecluster

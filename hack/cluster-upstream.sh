#!/usr/bin/env bash
# A second local control plane whose kube-controller-manager runs every upstream
# controller (kshard's included), beside the default one and on other ports: the
# reference side of the differential tests and benchmarks. Same verbs as cluster.sh:
#   hack/cluster-upstream.sh up|down|status|env
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KSHARD_CLUSTER_DIR=${KSHARD_UPSTREAM_CLUSTER_DIR:-$root/_output/cluster-upstream}
export KSHARD_UPSTREAM_CONTROLLERS=1
# Its ports: these defaults, or KSHARD_UPSTREAM_<NAME>_PORT for a second pair of clusters
# beside the first (metrics-server's and the metrics adapter's follow kwok's, cluster.sh).
export KSHARD_ETCD_PORT=${KSHARD_UPSTREAM_ETCD_PORT:-24790} KSHARD_ETCD_PEER_PORT=${KSHARD_UPSTREAM_ETCD_PEER_PORT:-24800}
export KSHARD_APISERVER_PORT=${KSHARD_UPSTREAM_APISERVER_PORT:-27443} KSHARD_SCHEDULER_PORT=${KSHARD_UPSTREAM_SCHEDULER_PORT:-21259}
export KSHARD_KCM_PORT=${KSHARD_UPSTREAM_KCM_PORT:-21257} KSHARD_KWOK_PORT=${KSHARD_UPSTREAM_KWOK_PORT:-21247}
unset KSHARD_METRICS_SERVER_PORT KSHARD_METRICS_ADAPTER_PORT
[ -n "${KSHARD_UPSTREAM_METRICS_SERVER_PORT:-}" ] && export KSHARD_METRICS_SERVER_PORT=$KSHARD_UPSTREAM_METRICS_SERVER_PORT
[ -n "${KSHARD_UPSTREAM_METRICS_ADAPTER_PORT:-}" ] && export KSHARD_METRICS_ADAPTER_PORT=$KSHARD_UPSTREAM_METRICS_ADAPTER_PORT
exec "$root/hack/cluster.sh" "$@"

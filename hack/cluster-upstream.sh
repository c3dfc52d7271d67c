#!/usr/bin/env bash
# A second local control plane whose kube-controller-manager runs every upstream
# controller (kshard's included), beside the default one and on other ports: the
# reference side of the differential tests and benchmarks. Same verbs as cluster.sh:
#   hack/cluster-upstream.sh up|down|status|env
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KSHARD_CLUSTER_DIR=${KSHARD_UPSTREAM_CLUSTER_DIR:-$root/_output/cluster-upstream}
export KSHARD_UPSTREAM_CONTROLLERS=1
export KSHARD_ETCD_PORT=24790 KSHARD_ETCD_PEER_PORT=24800 KSHARD_APISERVER_PORT=27443
export KSHARD_SCHEDULER_PORT=21259 KSHARD_KCM_PORT=21257 KSHARD_KWOK_PORT=21247
exec "$root/hack/cluster.sh" "$@"

#!/usr/bin/env bash
# `make demo`: the local control plane plus a sample workload spread over many namespaces,
# then a summary of where to look. `make demo-down` stops everything it started.
#
# DEMO_NAMESPACES (default 20) and DEMO_DEPLOYMENTS (per namespace, default 2) size it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
namespaces=${DEMO_NAMESPACES:-20}
deployments=${DEMO_DEPLOYMENTS:-2}
replicas=${DEMO_REPLICAS:-2}
out=$root/_output/demo
kubeconfig=$(hack/cluster.sh env | sed 's/^KUBECONFIG=//')
kubectl() { "$(hack/tools.sh path kubectl)" --kubeconfig "$kubeconfig" "$@"; }
log() { printf '[demo] %s\n' "$*" >&2; }

workload() {
  local i j ns
  for ((i = 0; i < namespaces; i++)); do
    ns=$(printf 'demo-tenant-%03d' "$i")
    printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    kshard.io/demo: "true"\n' "$ns"
    for ((j = 0; j < deployments; j++)); do
      cat <<YAML
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-$j
  namespace: $ns
spec:
  replicas: $replicas
  selector:
    matchLabels: {app: web-$j}
  template:
    metadata:
      labels: {app: web-$j}
    spec:
      containers:
      - name: web
        image: registry.example/web:1.0
YAML
    done
  done
}

up() {
  mkdir -p "$out"
  hack/cluster.sh up
  workload >"$out/workload.yaml"
  local start=$SECONDS
  kubectl apply -f "$out/workload.yaml" >/dev/null
  log "applied $namespaces namespaces x $deployments Deployments x $replicas replicas ($out/workload.yaml)"
  local ns
  for ns in $(kubectl get ns -l kshard.io/demo=true -o name | sed 's|namespace/||'); do
    kubectl -n "$ns" wait deployment --all --for=condition=Available --timeout=180s >/dev/null
  done
  local running
  running=$(kubectl get pods -A -l 'app' --field-selector=status.phase=Running --no-headers 2>/dev/null | grep -c demo-tenant || true)
  log "all sample Deployments Available after $((SECONDS - start))s; $running demo pods Running on kwok nodes"
  cat <<INFO

kshard demo is up.
  kubeconfig:   export KUBECONFIG=$kubeconfig
  kubectl:      $(hack/tools.sh path kubectl) (v1.37.1, same as the control plane)
  try:          kubectl get deployments -A; kubectl -n demo-tenant-000 get pods -o wide
  logs:         $(dirname "$kubeconfig")/logs/   (one file per process)
  status:       make cluster-status
  stop:         make demo-down
INFO
}

down() {
  hack/cluster.sh down
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

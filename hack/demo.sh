#!/usr/bin/env bash
# `make demo`: the local control plane, two coordinators (one leads through a Lease) and
# three shards as local processes talking mutual TLS, a Prometheus scraping them, plus a
# sample workload spread over many namespaces, one Deployment of which is rolled out to a
# new image by kshard's own controllers; then a summary of where to look. `make demo-down`
# stops all of it.
#
# DEMO_NAMESPACES (default 20), DEMO_DEPLOYMENTS (per namespace, default 2),
# DEMO_REPLICAS (default 2) and DEMO_SHARDS (default 3) size it; DEMO_PROMETHEUS_PORT
# (default 29099) moves Prometheus.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
namespaces=${DEMO_NAMESPACES:-20}
deployments=${DEMO_DEPLOYMENTS:-2}
replicas=${DEMO_REPLICAS:-2}
shards=${DEMO_SHARDS:-3}
prom_port=${DEMO_PROMETHEUS_PORT:-29099}
out=$root/_output/demo
pki=$out/pki
logs=$out/logs
run=$out/run
kubeconfig=$(hack/cluster.sh env | sed 's/^KUBECONFIG=//')
kubectl() { "$(hack/tools.sh path kubectl)" --kubeconfig "$kubeconfig" "$@"; }
log() { printf '[demo] %s\n' "$*" >&2; }
die() { printf '[demo] error: %s\n' "$*" >&2; exit 1; }

coord_grpc() { echo $((29090 + $1)); }
coord_http() { echo $((28080 + $1)); }
shard_http() { echo $((28090 + $1)); }

# make_pki: a CA, a serving certificate for the coordinators and a client certificate for
# the shards, so the demo runs the session with mutual TLS as a cluster would.
make_pki() {
  [ -f "$pki/client.crt" ] && return 0
  mkdir -p "$pki"
  openssl req -x509 -new -newkey rsa:2048 -nodes -days 365 -subj "/CN=kshard-demo-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  local name ext
  for name in server client; do
    ext=$pki/$name.ext
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$ext"
    openssl req -new -newkey rsa:2048 -nodes -subj "/CN=kshard-demo-$name" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 365 -sha256 \
      -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
    rm -f "$pki/$name.csr" "$ext"
  done
}

# prometheus_config: a 1s scrape of every coordinator and shard. Shards keep the shard
# label their own series carry (honor_labels) and give it to their go_*/process_* series
# through the target label, as docs/observability.md asks of a ServiceMonitor.
prometheus_config() {
  local i
  cat <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kshard-coordinator
    static_configs:
      - targets: ['127.0.0.1:$(coord_http 0)', '127.0.0.1:$(coord_http 1)']
  - job_name: kshard-shard
    honor_labels: true
    static_configs:
YAML
  for ((i = 0; i < shards; i++)); do
    printf "      - targets: ['127.0.0.1:%s']\n        labels: {shard: shard-%s}\n" "$(shard_http "$i")" "$i"
  done
}

start_prometheus() {
  local bin dir=$out/prometheus
  bin=$(hack/tools.sh path prometheus)
  [ -x "$bin" ] || hack/tools.sh prometheus
  mkdir -p "$dir/data"
  prometheus_config >"$dir/prometheus.yml"
  start prometheus "$bin" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --storage.tsdb.retention.time=1d --web.listen-address="127.0.0.1:$prom_port"
  wait_ready prometheus "http://127.0.0.1:$prom_port/-/ready"
}

# kshard_controllers: the controllers the cluster's kube-controller-manager leaves to kshard
# (hack/cluster.sh records its --controllers; each "-name" is one kshard runs).
kshard_controllers() {
  local f
  f="$(dirname "$kubeconfig")/kcm-controllers"
  [ -f "$f" ] || return 0
  tr ',' '\n' <"$f" | sed -n 's/^-//p' | sort | paste -sd, -
}

# shard_controllers: the controllers shard-0 says it runs (its "controllers enabled" log line).
shard_controllers() {
  sed -n 's/.*"msg":"controllers enabled".*"controllers":\[\([^]]*\)\].*/\1/p' "$logs/shard-0.log" | tail -n 1 | tr -d '"'
}

# check_controllers: every controller kube-controller-manager leaves to kshard must run in
# the shards, or the sample workload would never become Available.
check_controllers() {
  local ours theirs c
  ours=$(kshard_controllers)
  theirs=$(shard_controllers)
  for c in ${ours//,/ }; do
    [[ ,$theirs, == *,$c,* ]] || die "kube-controller-manager leaves $c to kshard, but the shards run only [$theirs] (see $logs/shard-0.log)"
  done
  log "controllers run by kshard's shards: ${theirs:-none}; kube-controller-manager runs --controllers=$(cat "$(dirname "$kubeconfig")/kcm-controllers" 2>/dev/null || echo '?')"
}

# rollout: a new image for one sample Deployment, rolled out by the shard that owns its
# namespace; shows the ReplicaSets it made and that kshard's shard wrote them.
rollout() {
  local ns=demo-tenant-000 d=web-0 start=$SECONDS
  log "rolling out $ns/$d to image registry.example/web:1.1"
  kubectl -n "$ns" set image "deployment/$d" web=registry.example/web:1.1 >/dev/null
  kubectl -n "$ns" rollout status "deployment/$d" --timeout=180s
  log "rollout of $ns/$d finished in $((SECONDS - start))s; its ReplicaSets, with the field manager that wrote them:"
  kubectl -n "$ns" get rs -l app=web-0 \
    -o custom-columns='REPLICASET:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,DESIRED:.spec.replicas,READY:.status.readyReplicas,REVISION:.metadata.annotations.deployment\.kubernetes\.io/revision,WRITTEN BY:.metadata.managedFields[*].manager'
}

running() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

start() {
  local name=$1; shift
  if running "$name"; then
    log "$name already running (pid $(cat "$run/$name.pid"))"
    return 0
  fi
  setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$run/$name.pid"
  log "started $name (pid $!, log $logs/$name.log)"
}

wait_ready() {
  local name=$1 url=$2 deadline=$((SECONDS + 90))
  until curl -fsS "$url" >/dev/null 2>&1; do
    running "$name" || { tail -n 20 "$logs/$name.log" >&2; die "$name exited"; }
    [ $SECONDS -lt $deadline ] || die "$name not ready after 90s: $(curl -s "$url")"
    sleep 0.5
  done
}

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
  [ -x bin/coordinator ] && [ -x bin/shard ] || die "bin/coordinator and bin/shard missing: run 'make build'"
  mkdir -p "$logs" "$run"
  hack/cluster.sh up
  make_pki
  start_prometheus
  local i
  for i in 0 1; do
    start "coordinator-$i" bin/coordinator --kubeconfig "$kubeconfig" --id "coordinator-$i" \
      --grpc-bind-address "127.0.0.1:$(coord_grpc $i)" --advertise-address "127.0.0.1:$(coord_grpc $i)" \
      --http-bind-address "127.0.0.1:$(coord_http $i)" \
      --grpc-tls-cert-file "$pki/server.crt" --grpc-tls-private-key-file "$pki/server.key" --grpc-tls-client-ca-file "$pki/ca.crt" \
      --shard-auth none --shard-fence=false \
      --leader-elect-resource-namespace kube-system
  done
  for ((i = 0; i < shards; i++)); do
    start "shard-$i" bin/shard --kubeconfig "$kubeconfig" --shard-id "shard-$i" \
      --coordinator-address "127.0.0.1:$(coord_grpc 0),127.0.0.1:$(coord_grpc 1)" \
      --grpc-tls-ca-file "$pki/ca.crt" --grpc-tls-cert-file "$pki/client.crt" --grpc-tls-private-key-file "$pki/client.key" \
      --http-bind-address "127.0.0.1:$(shard_http $i)"
  done
  local leader=""
  local deadline=$((SECONDS + 90))
  until [ -n "$leader" ]; do
    for i in 0 1; do
      curl -fsS "http://127.0.0.1:$(coord_http $i)/readyz" >/dev/null 2>&1 && leader=$i
    done
    [ -n "$leader" ] || { [ $SECONDS -lt $deadline ] || die "no coordinator became leader"; sleep 0.5; }
  done
  for ((i = 0; i < shards; i++)); do wait_ready "shard-$i" "http://127.0.0.1:$(shard_http $i)/readyz"; done
  log "coordinator-$leader leads; $shards shards are Ready"
  check_controllers

  workload >"$out/workload.yaml"
  local start=$SECONDS ns
  kubectl apply -f "$out/workload.yaml" >/dev/null
  log "applied $namespaces namespaces x $deployments Deployments x $replicas replicas ($out/workload.yaml)"
  for ns in $(kubectl get ns -l kshard.io/demo=true -o name | sed 's|namespace/||'); do
    kubectl -n "$ns" wait deployment --all --for=condition=Available --timeout=180s >/dev/null
  done
  local pods
  pods=$(kubectl get pods -A --field-selector=status.phase=Running --no-headers 2>/dev/null | grep -c demo-tenant || true)
  log "all sample Deployments Available after $((SECONDS - start))s; $pods demo pods Running on kwok nodes"
  # A new leader grants nothing for session TTL + margin (shards of an earlier leader may
  # still be working); wait for the first assignment to settle before showing it.
  log "waiting for the coordinator's first assignment (a new leader waits one session TTL + margin, ~22s)"
  local deadline=$((SECONDS + 120))
  until curl -fsS "http://127.0.0.1:$(coord_http "$leader")/assignments" 2>/dev/null | grep -q '"converged": true'; do
    [ $SECONDS -lt $deadline ] || die "assignment did not converge within 120s"
    sleep 1
  done
  echo
  bin/coordinator assignments --server "http://127.0.0.1:$(coord_http "$leader")"
  echo
  bin/coordinator assignments --server "http://127.0.0.1:$(coord_http "$leader")" --namespace demo-tenant-000
  echo
  local ours note
  ours=$(kshard_controllers)
  if [[ ,$ours, == *,deployment,* ]]; then
    rollout
    note="kshard's shards run $ours (kube-controller-manager runs everything else): the
                 rollout above was done by the shard that owns demo-tenant-000."
  else
    note="the cluster's kube-controller-manager runs every controller (kshard runs: ${ours:-none});
                 the shards own and cache their namespaces."
  fi
  cat <<INFO

kshard demo is up.
  kubeconfig:    export KUBECONFIG=$kubeconfig
  kubectl:       $(hack/tools.sh path kubectl) (v1.37.1, same as the control plane)
  try:           kubectl get deployments -A; kubectl -n demo-tenant-000 get pods -o wide
  who owns what: bin/coordinator assignments --server http://127.0.0.1:$(coord_http "$leader") [--namespace NS]
  coordinators:  http://127.0.0.1:$(coord_http 0)/metrics  http://127.0.0.1:$(coord_http 1)/metrics  (only the leader is /readyz)
  shards:        $(for ((i = 0; i < shards; i++)); do printf 'http://127.0.0.1:%s/metrics  ' "$(shard_http $i)"; done)
  kshard logs:   $logs/
  cluster logs:  $(dirname "$kubeconfig")/logs/
  prometheus:    http://127.0.0.1:$prom_port (HTTP API, 1s scrapes; config $out/prometheus/prometheus.yml)
                 e.g. curl -s http://127.0.0.1:$prom_port/api/v1/query --data-urlencode 'query=sum by (shard) (kshard_shard_namespaces)'
  dashboards:    charts/kshard/dashboards/*.json: import into a Grafana with that Prometheus as data source (docs/observability.md)
  controllers:   $note
  stop:          make demo-down
INFO
}

# stop_all GLOB: SIGTERM every matching process at once, wait up to 60s, then SIGKILL.
stop_all() {
  local f pids=() deadline=$((SECONDS + 60))
  for f in $1; do
    [ -f "$f" ] || continue
    running "$(basename "$f" .pid)" && { kill "$(cat "$f")" 2>/dev/null || true; pids+=("$(cat "$f")"); }
    log "stopping $(basename "$f" .pid)"
  done
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -9 "$p" 2>/dev/null || true
  done
  for f in $1; do rm -f "$f"; done
}

down() {
  # Shards first: on SIGTERM each hands its partitions over while a coordinator runs.
  stop_all "$run/shard-*.pid"
  stop_all "$run/coordinator-*.pid"
  stop_all "$run/prometheus.pid"
  hack/cluster.sh down
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

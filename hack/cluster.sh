#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for kshard's tests and demo: etcd,
# kube-apiserver, kube-scheduler, kube-controller-manager (with the controllers kshard
# implements switched off), kwok with fake nodes whose pods turn Running/Ready and serve
# emulated kubelet resource metrics, metrics-server (metrics.k8s.io) and the tests' own
# custom and external metrics server (test/cmd/metrics-adapter), both aggregated.
#
#   hack/cluster.sh up       start what is not running yet (idempotent)
#   hack/cluster.sh down     stop the processes this script started, by pid
#   hack/cluster.sh status   one line per component
#   hack/cluster.sh env      print the variables tests use to reach the cluster
#
# Everything (certificates, kubeconfig, logs, pid files, etcd data) lives in one folder,
# KSHARD_CLUSTER_DIR (default: <repo>/_output/cluster). Ports are fixed per folder and
# can be moved with the variables below so two clusters can run side by side.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${KSHARD_CLUSTER_DIR:-$root/_output/cluster}
nodes=${KSHARD_NODES:-10}
etcd_port=${KSHARD_ETCD_PORT:-23790}
etcd_peer_port=${KSHARD_ETCD_PEER_PORT:-23800}
api_port=${KSHARD_APISERVER_PORT:-26443}
scheduler_port=${KSHARD_SCHEDULER_PORT:-20259}
kcm_port=${KSHARD_KCM_PORT:-20257}
kwok_port=${KSHARD_KWOK_PORT:-20247}
# metrics-server and the metrics adapter default to ports derived from kwok's, so that a
# cluster whose ports are moved (test-integration.sh's, the reference, the large one) gets
# its own pair without naming them.
metrics_server_port=${KSHARD_METRICS_SERVER_PORT:-$((kwok_port + 14))}
metrics_adapter_port=${KSHARD_METRICS_ADAPTER_PORT:-$((kwok_port + 16))}
# KSHARD_METRICS=0 runs neither (and registers no APIService): for clusters that need no
# metrics and should not pay for kwok computing them (the large benchmark cluster).
metrics=${KSHARD_METRICS:-1}
# KSHARD_METRICS_RESOLUTION is metrics-server's --metric-resolution (at least 10s).
metrics_resolution=${KSHARD_METRICS_RESOLUTION:-15s}
# KSHARD_FEATURE_GATES lets a test variant run the apiserver without ShardedListAndWatch.
feature_gates=${KSHARD_FEATURE_GATES:-ShardedListAndWatch=true}
# KSHARD_UPSTREAM_CONTROLLERS=1 runs kube-controller-manager with every controller, for
# differential tests that compare kshard against upstream.
upstream=${KSHARD_UPSTREAM_CONTROLLERS:-0}
# KSHARD_KCM_KEEPS (canonical names, comma-separated) leaves those of kshard's controllers
# on in kube-controller-manager: the helm e2e's cold start lets its replicaset-controller
# recreate kshard's own pods after every one was deleted, as an operator would
# (charts/README.md), with the EndpointSlice controller still kshard's alone.
keeps=",${KSHARD_KCM_KEEPS:-},"
# KSHARD_APISERVER_AUDIT=1 gives kube-apiserver an audit log of every write to
# EndpointSlices, pods and Services (logs/kube-apiserver-audit.log, JSON, Metadata level,
# nothing else logged): who wrote which slice when, and the pod and Service changes that
# led to it, for test/endpointstress. KSHARD_APISERVER_AUDIT=all logs every request
# (every verb and resource, Metadata level, so user agent, verb, resource, subresource and
# response code), for breaking a benchmark's API requests down by kind (issue 31;
# kube-apiserver rotates the log at 100 MB, to kube-apiserver-audit-<time>.log). Either
# takes effect when kube-apiserver starts (a running one is kept as it is).
audit=${KSHARD_APISERVER_AUDIT:-0}

tool() { "$root/hack/tools.sh" path "$1"; }
log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

pki=$dir/pki
logs=$dir/logs
run=$dir/run
kubeconfig=$dir/kubeconfig
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kwok)
[ "$metrics" = 1 ] && components+=(metrics-server metrics-adapter)
# Nodes with this label (and the annotation metrics.k8s.io/resource-metrics-path naming
# their path on kwok) are the ones metrics-server scrapes: apply_nodes's, and any a test
# creates with both; other nodes cost kwok and metrics-server nothing.
metrics_node_label=kshard.io/kwok-metrics

# shellcheck source=lib/process.sh
. "$root/hack/lib/process.sh"
# shellcheck source=lib/pki.sh
. "$root/hack/lib/pki.sh"

running() { proc_running "$1" "$1"; }

# start NAME ARGS...: launches the tool NAME detached, logging to logs/NAME.log.
start() {
  local name=$1; shift
  local bin; bin=$(tool "$name")
  [ -x "$bin" ] || die "$bin is missing: run 'make tools' (hack/tools.sh cluster)"
  proc_start "$name" "$name" "$bin" "$@"
}

# wait_for NAME CMD...: polls CMD until it succeeds, failing fast if NAME died.
wait_for() { local name=$1; shift; proc_wait "$name" "$name" "${KSHARD_START_TIMEOUT:-60}" "$@"; }

ca() {
  local name=$1 cn=$2
  [ -f "$pki/$name.crt" ] && return 0
  openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -sha256 -subj "/CN=$cn" \
    -keyout "$pki/$name.key" -out "$pki/$name.crt" 2>/dev/null
}

# signed CA NAME CN ORG [SANs]: NAME's key and certificate in the PKI folder, signed by CA.
signed() { pki_signed "$pki/$1" "$pki/$2" "${@:3}"; }

make_pki() {
  mkdir -p "$pki"
  command -v openssl >/dev/null || die "openssl is required (apt-get install openssl)"
  ca ca kshard-local-ca
  ca front-proxy-ca kshard-local-front-proxy-ca
  signed ca apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  signed ca admin kshard-admin system:masters
  signed ca kube-scheduler system:kube-scheduler ""
  signed ca kube-controller-manager system:kube-controller-manager ""
  signed ca kwok kwok-controller system:masters
  signed front-proxy-ca front-proxy-client front-proxy-client ""
  # The aggregator checks an APIService's serving certificate for <service>.<namespace>.svc.
  signed ca metrics-server metrics-server "" \
    "IP:127.0.0.1,DNS:localhost,DNS:metrics-server.kube-system.svc"
  signed ca metrics-adapter kshard-metrics-adapter "" \
    "IP:127.0.0.1,DNS:localhost,DNS:kshard-metrics-adapter.kube-system.svc"
  if [ ! -f "$pki/sa.key" ]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
}

# write_kubeconfig FILE USER: a kubeconfig that authenticates with USER's certificate.
write_kubeconfig() { pki_kubeconfig "$1" "https://127.0.0.1:$api_port" "$pki/ca.crt" "$2" "$pki/$2"; }

# kshard_controllers: the kube-controller-manager controllers kshard implements, by their
# canonical names, as the shard's controller descriptors list them (the first column of
# `shard --list-controllers`, whose lines are "canonical-name alias"; test-only controllers
# are not listed). kube-controller-manager runs with exactly these switched off, so the
# list grows as controllers land. Computed once per run (go run compiles).
kshard_controllers() {
  if [ -z "${kshard_controller_list+set}" ]; then
    kshard_controller_list=$(cd "$root" && go run ./cmd/shard --list-controllers) ||
      die "cannot list kshard's controllers (go run ./cmd/shard --list-controllers)"
    kshard_controller_list=$(awk '{ print $1 }' <<<"$kshard_controller_list")
  fi
  echo "$kshard_controller_list"
}

# kcm_controllers: kube-controller-manager's --controllers, "*,-cronjob-controller,…".
kcm_controllers() {
  local list='*' c
  if [ "$upstream" != 1 ]; then
    for c in $(kshard_controllers); do [[ $keeps == *",$c,"* ]] || list+=",-$c"; done
  fi
  echo "$list"
}

api_ready() {
  curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$api_port/readyz"
}

kubectl_() { "$(tool kubectl)" --kubeconfig "$kubeconfig" "$@"; }

# audit_args prints kube-apiserver's audit flags (none unless KSHARD_APISERVER_AUDIT is 1 or all),
# writing the policy first.
audit_args() {
  case "$audit" in
  1) audit_policy_writes ;;
  all) audit_policy_all ;;
  *) return 0 ;;
  esac
  echo "--audit-policy-file=$dir/audit-policy.yaml"
  echo "--audit-log-path=$logs/kube-apiserver-audit.log"
  echo "--audit-log-format=json"
}

# audit_policy_all writes a policy that logs every request at Metadata level.
audit_policy_all() {
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
POLICY
}

# audit_policy_writes writes the policy of KSHARD_APISERVER_AUDIT=1: the writes to
# EndpointSlices, pods and Services.
audit_policy_writes() {
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - group: discovery.k8s.io
    resources: [endpointslices]
  - group: ""
    resources: [pods, pods/status, services]
- level: None
POLICY
}

write_kwok_config() {
  cat >"$dir/kwok.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 4
  nodePlayStageParallelism: 4
  podPlayStageParallelism: 8
  podsOnNodeSyncParallelism: 4
  nodeLeaseDurationSeconds: 40
EOF
}

apply_nodes() {
  local i manifest=$dir/nodes.yaml
  : >"$manifest"
  for ((i = 0; i < nodes; i++)); do
    cat >>"$manifest" <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
    metrics.k8s.io/resource-metrics-path: /metrics/nodes/kwok-node-$i/metrics/resource
  labels:
    $metrics_node_label: "true"
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
EOF
  done
  [ "$nodes" -gt 0 ] && kubectl_ apply -f "$manifest" >/dev/null
  log "$nodes kwok nodes applied"
}

nodes_ready() {
  local want=$1 got
  got=$(kubectl_ get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true)
  [ "$got" -ge "$want" ]
}

# apply_metrics_apis registers metrics-server and the adapter with the aggregator: an
# ExternalName Service each (the aggregator dials https://<externalName>:<APIService port>,
# so loopback is reached with no ClusterIP routing and no Endpoints) and their APIServices.
apply_metrics_apis() {
  local ca_bundle manifest=$dir/metrics-apis.yaml api
  ca_bundle=$(base64 -w0 <"$pki/ca.crt")
  cat >"$manifest" <<EOF
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  type: ExternalName
  externalName: localhost
---
apiVersion: v1
kind: Service
metadata:
  name: kshard-metrics-adapter
  namespace: kube-system
spec:
  type: ExternalName
  externalName: localhost
EOF
  # group version service port versionPriority
  for api in "metrics.k8s.io v1beta1 metrics-server $metrics_server_port 100" \
    "custom.metrics.k8s.io v1beta2 kshard-metrics-adapter $metrics_adapter_port 200" \
    "custom.metrics.k8s.io v1beta1 kshard-metrics-adapter $metrics_adapter_port 100" \
    "external.metrics.k8s.io v1beta1 kshard-metrics-adapter $metrics_adapter_port 100"; do
    # shellcheck disable=SC2086
    set -- $api
    cat >>"$manifest" <<EOF
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: $2.$1
spec:
  group: $1
  version: $2
  service:
    name: $3
    namespace: kube-system
    port: $4
  caBundle: $ca_bundle
  groupPriorityMinimum: 100
  versionPriority: $5
EOF
  done
  kubectl_ apply -f "$manifest" >/dev/null
}

# metrics_apis_available: every APIService of apply_metrics_apis reports Available (an
# unavailable one would stall every namespace deletion on discovery).
metrics_apis_available() {
  local got
  got=$(kubectl_ get apiservices v1beta1.metrics.k8s.io v1beta2.custom.metrics.k8s.io \
    v1beta1.custom.metrics.k8s.io v1beta1.external.metrics.k8s.io \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Available")].status}{"\n"}{end}' | grep -c True || true)
  [ "$got" -eq 4 ]
}

# build_metrics_adapter: the tests' metrics adapter, built from this checkout into the
# cluster folder; a running one whose binary differs is restarted. The build goes to a
# file of its own that is kept, so that go build finds it up to date (0.5 s, not a 3 s
# link) when nothing changed.
build_metrics_adapter() {
  mkdir -p "$dir/bin"
  (cd "$root" && go build -trimpath -o "$dir/bin/metrics-adapter.next" ./test/cmd/metrics-adapter) ||
    die "cannot build the metrics adapter (go build ./test/cmd/metrics-adapter)"
  cmp -s "$dir/bin/metrics-adapter.next" "$dir/bin/metrics-adapter" && return 0
  if running metrics-adapter; then
    log "metrics-adapter's binary changed; restarting it"
    stop metrics-adapter
  fi
  cp "$dir/bin/metrics-adapter.next" "$dir/bin/metrics-adapter"
}

start_metrics() {
  # kwok serves HTTPS and HTTP on one port; kwok's nodes report no kubelet port, so the
  # kubelet port is kwok's (a real node's, hack/node.sh, is in its status).
  start metrics-server --kubeconfig="$kubeconfig" \
    --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$metrics_server_port" \
    --tls-cert-file="$pki/metrics-server.crt" --tls-private-key-file="$pki/metrics-server.key" \
    --kubelet-insecure-tls --kubelet-port="$kwok_port" --kubelet-use-node-status-port \
    --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
    --node-selector="$metrics_node_label=true" --metric-resolution="$metrics_resolution"
  proc_start metrics-adapter metrics-adapter "$dir/bin/metrics-adapter" --kubeconfig="$kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$metrics_adapter_port" \
    --tls-cert-file="$pki/metrics-adapter.crt" --tls-private-key-file="$pki/metrics-adapter.key"
}

up() {
  mkdir -p "$logs" "$run" "$dir/etcd"
  make_pki
  write_kubeconfig "$kubeconfig" admin
  write_kubeconfig "$dir/kube-scheduler.kubeconfig" kube-scheduler
  write_kubeconfig "$dir/kube-controller-manager.kubeconfig" kube-controller-manager
  write_kubeconfig "$dir/kwok.kubeconfig" kwok
  write_kwok_config
  [ "$metrics" = 1 ] && build_metrics_adapter

  start etcd --name=kshard --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="kshard=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync --quota-backend-bytes=$((8 * 1024 * 1024 * 1024)) --log-level=warn
  wait_for etcd curl -fsS "http://127.0.0.1:$etcd_port/health"

  start kube-apiserver --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-signing-key-file="$pki/sa.key" --service-account-key-file="$pki/sa.pub" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
    --feature-gates="$feature_gates" \
    --max-requests-inflight=2000 --max-mutating-requests-inflight=1000 \
    $(audit_args)
  wait_for kube-apiserver api_ready
  # metrics-server and the adapter need only the API server: started now, they are ready
  # by the time the nodes are.
  if [ "$metrics" = 1 ]; then
    apply_metrics_apis
    start_metrics
  fi

  start kube-scheduler --kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-scheduler.kubeconfig" --authorization-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$scheduler_port" --leader-elect=false \
    --kube-api-qps=500 --kube-api-burst=1000
  # Record the controllers this cluster's kube-controller-manager runs, so tests can tell
  # whether the cluster or kshard owns a controller (kept when it is already running).
  # A kube-controller-manager started before a kshard controller landed still runs that
  # controller too: two controllers would fight over the same objects. Restart it.
  kshard_controllers >/dev/null # once, in this shell: the $(…) below reuse it
  if running kube-controller-manager && [ "$(cat "$dir/kcm-controllers" 2>/dev/null)" != "$(kcm_controllers)" ]; then
    log "kube-controller-manager runs an outdated controller list; restarting it"
    stop kube-controller-manager
  fi
  running kube-controller-manager || kcm_controllers >"$dir/kcm-controllers"
  start kube-controller-manager --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-controller-manager.kubeconfig" --authorization-kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" --leader-elect=false \
    --controllers="$(kcm_controllers)" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --flex-volume-plugin-dir="$dir/flexvolume" \
    --kube-api-qps=500 --kube-api-burst=1000
  # kwok's shipped stages, and kshard's own (hack/kwok-stages), which replace a shipped one
  # of the same file name.
  local stages=() f
  for f in "$(tool kwok-stages)"/*.yaml; do
    [ -e "$root/hack/kwok-stages/$(basename "$f")" ] || stages+=(--config="$f")
  done
  for f in "$root"/hack/kwok-stages/*.yaml; do stages+=(--config="$f"); done
  # Emulated kubelet resource metrics per node, pods' usage from their annotations
  # kwok.x-k8s.io/usage-cpu and kwok.x-k8s.io/usage-memory (hack/tools.sh kwok-metrics).
  if [ "$metrics" = 1 ]; then
    for f in "$(tool kwok-metrics)"/*.yaml; do stages+=(--config="$f"); done
    # A kwok started before the metrics pipeline existed serves no resource metrics.
    if running kwok && ! grep -qa -- metrics-resource.yaml "/proc/$(cat "$run/kwok.pid")/cmdline"; then
      log "kwok runs without the resource metrics configuration; restarting it"
      stop kwok
    fi
  fi
  start kwok --kubeconfig="$dir/kwok.kubeconfig" --config="$dir/kwok.yaml" "${stages[@]}" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-ip=127.0.0.1 --cidr=10.244.0.0/16 --server-address="127.0.0.1:$kwok_port"

  # The healthz endpoints of scheduler and controller-manager are open to anyone.
  wait_for kube-scheduler curl -fsSk "https://127.0.0.1:$scheduler_port/healthz"
  wait_for kube-controller-manager curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
  apply_nodes
  wait_for kwok nodes_ready "$nodes"
  if [ "$metrics" = 1 ]; then
    wait_for metrics-server curl -fsSk "https://127.0.0.1:$metrics_server_port/livez"
    wait_for metrics-adapter curl -fsSk "https://127.0.0.1:$metrics_adapter_port/healthz"
    wait_for kube-apiserver metrics_apis_available
  fi
  log "control plane is up: export KUBECONFIG=$kubeconfig (logs in $logs)"
  log "kube-controller-manager runs --controllers=$(kcm_controllers)"
}

# stop NAME stops one component (by its pid file, if that pid still runs it).
stop() { proc_stop "$1" "$1" 5; }

down() {
  local i
  # A real node (hack/node.sh) goes first: its containers, mounts and network namespace.
  if [ -d "$dir/node" ]; then
    "$root/hack/node.sh" down || log "warning: hack/node.sh down failed; stopping the control plane anyway"
  fi
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    stop "${components[i]}"
  done
  if [ "${KSHARD_KEEP_DATA:-0}" != 1 ] && [ -d "$dir/etcd" ]; then
    rm -rf "$dir/etcd"
    log "removed etcd data (KSHARD_KEEP_DATA=1 keeps it)"
  fi
}

status() {
  local name rc=0
  for name in "${components[@]}"; do
    if running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(cat "$run/$name.pid")"
    else
      printf '%-24s stopped\n' "$name"
      rc=1
    fi
  done
  if running kube-apiserver && api_ready >/dev/null 2>&1; then
    printf '%-24s https://127.0.0.1:%s ready\n' "apiserver-endpoint" "$api_port"
    printf '%-24s %s\n' "kubeconfig" "$kubeconfig"
    printf '%-24s %s\n' "logs" "$logs"
  fi
  return $rc
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "KUBECONFIG=$kubeconfig" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac

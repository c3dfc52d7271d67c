#!/usr/bin/env bash
# `make demo`: the local control plane, two coordinators (one leads through a Lease) and
# three shards as local processes talking mutual TLS, a Prometheus scraping them, plus a
# sample workload spread over many namespaces, one Deployment of which is rolled out to a
# new image by kshard's own controllers; then a summary of where to look. `make demo-down`
# stops all of it. `make demo-scale SHARDS=n` (demo.sh scale n) scales the running demo's
# shards to n: new ones get a pod and tokens of their own like the first ones, removed ones
# hand their partitions over on SIGTERM and their pods are deleted (see scale below).
#
# Identity and the server-side fence run as in a chart install: the chart's
# ServiceAccounts, RBAC and fence policy (rendered from charts/kshard with helm, so they
# cannot drift) are applied in namespace kshard-system; each shard has a pod of its own
# name there (on a fake kwok node) and authenticates with two tokens bound to that pod,
# one for the API server (its kubeconfig) and one for the coordinator
# (--coordinator-token-file); the coordinators run as the chart's coordinator
# ServiceAccount (a 24h token of it in their kubeconfig: the fence's record guard lets only
# that identity change the owner record, and the chart's RBAC is all it has) with the
# identity and fence flags the chart's coordinator Deployment renders (--shard-auth=token,
# --shard-fence=true, ...).
#
# DEMO_NAMESPACES (default 20), DEMO_DEPLOYMENTS (per namespace, default 2),
# DEMO_REPLICAS (default 2) and DEMO_SHARDS (default 3) size it; DEMO_MAX_SHARDS (default
# 16) bounds `scale`; DEMO_PROMETHEUS_PORT (default 29099) moves Prometheus;
# DEMO_COORDINATOR_GRPC_PORT (29090), DEMO_COORDINATOR_HTTP_PORT (28080) and
# DEMO_SHARD_HTTP_PORT (28090) are the first ports of the coordinators and shards (one
# more per process); DEMO_BIN_DIR (default bin) holds the coordinator and shard binaries;
# DEMO_OUTPUT_DIR (default _output/demo) the PKI, credentials, logs and pid files;
# DEMO_SHARD_ARGS adds flags to every shard (e.g. --server-side-filtering). The
# control plane takes hack/cluster.sh's KSHARD_* variables.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
namespaces=${DEMO_NAMESPACES:-20}
deployments=${DEMO_DEPLOYMENTS:-2}
replicas=${DEMO_REPLICAS:-2}
shards=${DEMO_SHARDS:-3}
prom_port=${DEMO_PROMETHEUS_PORT:-29099}
coord_grpc_base=${DEMO_COORDINATOR_GRPC_PORT:-29090}
coord_http_base=${DEMO_COORDINATOR_HTTP_PORT:-28080}
shard_http_base=${DEMO_SHARD_HTTP_PORT:-28090}
bin=${DEMO_BIN_DIR:-$root/bin}
out=${DEMO_OUTPUT_DIR:-$root/_output/demo}
pki=$out/pki
logs=$out/logs
run=$out/run
chart=$out/chart       # what the demo renders from charts/kshard and applies
identity=$out/identity # the shards' kubeconfigs and coordinator tokens (pod-bound)
# The chart's release as the demo installs it: the fence and identity objects are named
# after it, the shards' pods and the coordinators' Lease live in its namespace.
release=kshard
system_ns=kshard-system
kubeconfig=$(hack/cluster.sh env | sed 's/^KUBECONFIG=//')
kubectl() { "$(hack/tools.sh path kubectl)" --kubeconfig "$kubeconfig" "$@"; }
log() { printf '[demo] %s\n' "$*" >&2; }
die() { printf '[demo] error: %s\n' "$*" >&2; exit 1; }

coord_grpc() { echo $((coord_grpc_base + $1)); }
coord_http() { echo $((coord_http_base + $1)); }
shard_http() { echo $((shard_http_base + $1)); }

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
# through the target label, as docs/observability.md asks of a ServiceMonitor. The shards
# are file_sd targets (shard_targets writes the file) so that `demo.sh scale` adds and
# removes them without restarting Prometheus.
prometheus_config() {
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
    file_sd_configs:
      - files: ['$out/prometheus/shards.json']
        refresh_interval: 1s
YAML
}

# shard_ids: the IDs of the shards whose process runs (pid file and live process), in
# index order.
shard_ids() {
  local f id
  for f in "$run"/shard-*.pid; do
    [ -f "$f" ] || continue
    id=$(basename "$f" .pid)
    running "$id" && echo "$id"
  done | sort -t- -k2,2n
}

# shard_targets: the running shards as Prometheus file_sd targets (Prometheus rereads the
# file within a second), each with its shard label.
shard_targets() {
  local dir=$out/prometheus id sep=""
  mkdir -p "$dir"
  {
    printf '['
    for id in $(shard_ids); do
      printf '%s\n  {"targets": ["127.0.0.1:%s"], "labels": {"shard": "%s"}}' "$sep" "$(shard_http "${id#shard-}")" "$id"
      sep=","
    done
    printf '\n]\n'
  } >"$dir/shards.json.tmp"
  mv "$dir/shards.json.tmp" "$dir/shards.json"
}

start_prometheus() {
  local bin dir=$out/prometheus
  bin=$(hack/tools.sh path prometheus)
  [ -x "$bin" ] || hack/tools.sh prometheus
  mkdir -p "$dir/data"
  prometheus_config >"$dir/prometheus.yml"
  shard_targets
  start prometheus "$bin" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --storage.tsdb.retention.time=1d --web.listen-address="127.0.0.1:$prom_port"
  wait_ready prometheus "http://127.0.0.1:$prom_port/-/ready"
}

# kshard_controllers: the controllers the cluster's kube-controller-manager leaves to kshard
# (hack/cluster.sh records its --controllers; each "-name" is one kshard runs), by the
# shards' names for them: a record names a controller by kube-controller-manager's
# canonical name or its alias, and `shard --list-controllers` ("canonical-name alias" per
# line) maps either to the shards' name, its last column. A name the shard does not list
# stays as it is.
kshard_controllers() {
  local f list
  f="$(dirname "$kubeconfig")/kcm-controllers"
  [ -f "$f" ] || return 0
  list=$("$bin/shard" --list-controllers)
  tr ',' '\n' <"$f" | sed -n 's/^-//p' | while read -r c; do
    awk -v c="$c" '$1 == c || $NF == c { print $NF; found = 1 } END { if (!found) print c }' <<<"$list"
  done | sort | paste -sd, -
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

# render FILE...: the chart's templates FILE... for the demo's release, with the chart's
# default values (the shard ClusterRole grants what controllers "*" needs, which is what
# the demo's shards run).
render() {
  local h args=() f
  h=$(hack/tools.sh path helm)
  [ -x "$h" ] || hack/tools.sh helm >&2
  for f in "$@"; do args+=(--show-only "templates/$f"); done
  "$h" template "$release" charts/kshard -n "$system_ns" "${args[@]}"
}

# install_chart: the chart's ServiceAccounts, RBAC and server-side fence (the
# ValidatingAdmissionPolicy and its binding) applied in $system_ns; and the identity and
# fence flags of the chart's coordinator Deployment, into $chart/coordinator-flags, which
# the coordinators are started with.
install_chart() {
  mkdir -p "$chart"
  render serviceaccounts.yaml rbac.yaml shard-fence.yaml >"$chart/identity.yaml"
  render coordinator-deployment.yaml >"$chart/coordinator-deployment.yaml"
  kubectl get namespace "$system_ns" >/dev/null 2>&1 || kubectl create namespace "$system_ns" >/dev/null
  kubectl apply -f "$chart/identity.yaml" >/dev/null
  log "applied the chart's ServiceAccounts, RBAC and shard fence in $system_ns ($chart/identity.yaml)"
  kubectl create --dry-run=client -f "$chart/coordinator-deployment.yaml" \
    -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}' |
    grep -E '^--(shard-|seize-after=)' >"$chart/coordinator-flags.tmp"
  mv "$chart/coordinator-flags.tmp" "$chart/coordinator-flags"
  grep -qx -- '--shard-auth=token' "$chart/coordinator-flags" || die "the chart's coordinator does not run --shard-auth=token: $(paste -sd' ' "$chart/coordinator-flags")"
  grep -qx -- '--shard-fence=true' "$chart/coordinator-flags" || die "the chart's coordinator does not run --shard-fence=true: $(paste -sd' ' "$chart/coordinator-flags")"
}

# coordinator_flag NAME: the value of --NAME in the chart's coordinator flags.
coordinator_flag() {
  local v
  v=$(sed -n "s|^--$1=||p" "$chart/coordinator-flags" | tail -n 1)
  [ -n "$v" ] || die "the chart's coordinator Deployment has no --$1 ($chart/coordinator-deployment.yaml)"
  echo "$v"
}
shard_sa() { coordinator_flag shard-service-account | cut -d/ -f2; }

# coordinator_identity: a kubeconfig for the coordinators, with a 24h token of the chart's
# coordinator ServiceAccount (the server and CA of the admin kubeconfig), as a coordinator
# pod would authenticate; and waits until the chart's RBAC lets that ServiceAccount keep
# the owner record.
coordinator_identity() {
  local sa server ca token user deadline=$((SECONDS + 60))
  sa=$(kubectl create --dry-run=client -f "$chart/coordinator-deployment.yaml" -o jsonpath='{.spec.template.spec.serviceAccountName}')
  [ -n "$sa" ] || die "the chart's coordinator Deployment names no ServiceAccount ($chart/coordinator-deployment.yaml)"
  user=system:serviceaccount:$system_ns:$sa
  # One verb of the fence's ClusterRole suffices: a role arrives with all its rules.
  until kubectl auth can-i patch namespaces --as "$user" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$user still may not patch namespaces after 60s"
    sleep 0.5
  done
  mkdir -p "$identity"
  server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  token=$(kubectl -n "$system_ns" create token "$sa" --duration 24h)
  write_file "$identity/coordinator.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: kshard-local
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: $sa
    user:
      token: $token
contexts:
  - name: $sa
    context: {cluster: kshard-local, user: $sa}
current-context: $sa
YAML
  log "coordinators authenticate as $user ($identity/coordinator.kubeconfig)"
}

# wait_shard_rbac: the RBAC authorizer sees new (Cluster)Roles and bindings through its
# informers, a moment after they are written; a shard started before would fail its
# --check-permissions. Each rule of the ClusterRoles bound to the shard ServiceAccount must
# be allowed to it (one verb per rule suffices: a role arrives with all its rules).
wait_shard_rbac() {
  local sa user roles rules group resource verb sub target deadline=$((SECONDS + 60)) missing
  sa=$(shard_sa)
  user=system:serviceaccount:$system_ns:$sa
  roles=$(kubectl get clusterrolebindings -l "app.kubernetes.io/instance=$release" \
    -o jsonpath="{range .items[?(@.subjects[0].name==\"$sa\")]}{.roleRef.name}{\"\\n\"}{end}")
  [ -n "$roles" ] || die "no ClusterRoleBinding of the chart binds ServiceAccount $system_ns/$sa"
  rules=$(for r in $roles; do
    kubectl get clusterrole "$r" -o jsonpath='{range .rules[*]}{.apiGroups[0]}{" "}{.resources[0]}{" "}{.verbs[0]}{"\n"}{end}'
  done | sed 's/^ /core /' | sort -u)
  while :; do
    missing=""
    while read -r group resource verb; do
      [ -n "$verb" ] || continue
      sub=""
      [[ $resource == */* ]] && { sub=${resource#*/}; resource=${resource%%/*}; }
      target=$resource
      [ "$group" = core ] || target=$resource.$group
      kubectl auth can-i "$verb" "$target" ${sub:+--subresource "$sub"} --as "$user" \
        --as-group system:serviceaccounts --as-group "system:serviceaccounts:$system_ns" --as-group system:authenticated \
        >/dev/null 2>&1 || { missing="$verb $target${sub:+/$sub}"; break; }
    done <<<"$rules"
    [ -z "$missing" ] && break
    [ $SECONDS -lt $deadline ] || die "$user still may not $missing after 60s"
    sleep 0.5
  done
  log "the shard ServiceAccount's permissions are in effect ($(echo "$roles" | paste -sd, -))"
}

# kwok_node I: one of the fake kwok nodes (hack/cluster.sh makes them), round robin.
kwok_node() {
  local nodes
  nodes=($(kubectl get nodes -o jsonpath='{range .items[?(@.metadata.annotations.kwok\.x-k8s\.io/node=="fake")]}{.metadata.name}{"\n"}{end}' | sort))
  [ ${#nodes[@]} -gt 0 ] || die "no node has the annotation kwok.x-k8s.io/node=fake (hack/cluster.sh makes them)"
  echo "${nodes[$(($1 % ${#nodes[@]}))]}"
}

# write_file PATH: stdin into PATH (mode 0600) in one rename, so that a process reading it
# never sees half a file.
write_file() {
  (umask 077 && cat >"$1.tmp") && mv "$1.tmp" "$1"
}

# shard_identity ID I: the shard's pod, as a shard pod of the chart has it: named after
# the shard ID, in $system_ns, run by the chart's shard ServiceAccount, on a fake kwok node,
# with no token mounted (the demo's process gets its tokens from files). A pod that exists
# is reused (a restarted shard keeps its identity; deleting the pod would revoke the tokens
# of a shard still running). Then two tokens bound to the pod (revoked when it is deleted),
# valid 24h: one for the API server, written into the shard's kubeconfig (server and CA of
# the admin kubeconfig), and one for the coordinator's --shard-token-audience, written to
# the shard's --coordinator-token-file.
shard_identity() {
  local id=$1 i=$2 sa audience deadline=$((SECONDS + 60)) uid node server ca token
  sa=$(shard_sa)
  audience=$(coordinator_flag shard-token-audience)
  # A pod being deleted (a `kubectl delete pod` a moment ago) is waited out.
  while [ -n "$(kubectl -n "$system_ns" get pod "$id" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ]; do
    [ $SECONDS -lt $deadline ] || die "pod $system_ns/$id is still being deleted after 60s"
    sleep 0.2
  done
  if ! uid=$(kubectl -n "$system_ns" get pod "$id" -o jsonpath='{.metadata.uid}' 2>/dev/null); then
    node=$(kwok_node "$i")
    kubectl create -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $id
  namespace: $system_ns
  labels:
    app.kubernetes.io/name: kshard
    app.kubernetes.io/instance: $release
    app.kubernetes.io/component: shard
spec:
  serviceAccountName: $sa
  automountServiceAccountToken: false
  nodeName: $node
  terminationGracePeriodSeconds: 0
  containers:
    - name: shard
      image: registry.k8s.io/pause:3.10
YAML
    uid=$(kubectl -n "$system_ns" get pod "$id" -o jsonpath='{.metadata.uid}')
    log "created pod $system_ns/$id on $node for shard $id"
  else
    log "reusing pod $system_ns/$id for shard $id"
  fi
  mkdir -p "$identity"
  server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  token=$(kubectl -n "$system_ns" create token "$sa" --bound-object-kind Pod --bound-object-name "$id" \
    --bound-object-uid "$uid" --duration 24h)
  write_file "$identity/$id.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: kshard-local
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: $id
    user:
      token: $token
contexts:
  - name: $id
    context: {cluster: kshard-local, user: $id}
current-context: $id
YAML
  kubectl -n "$system_ns" create token "$sa" --bound-object-kind Pod --bound-object-name "$id" \
    --bound-object-uid "$uid" --duration 24h --audience "$audience" | write_file "$identity/$id.coordinator-token"
}

# show_fence: a dry-run write as one shard (its own kubeconfig) into a namespace another
# shard owns: the API server must refuse it with the fence's message.
show_fence() {
  local ns=demo-tenant-000 label part owner other="" i out
  label=$(coordinator_flag shard-fence-partition-label)
  part=$(kubectl get ns "$ns" -o jsonpath="{.metadata.labels.${label//./\\.}}")
  [ -n "$part" ] || die "namespace $ns has no $label label: the coordinator does not keep the fence's owner record"
  # The owner Role (kshard-owner.<shard> in $system_ns) whose rule lists the partition.
  owner=$(kubectl -n "$system_ns" get roles -l kshard.io/owner-record \
    -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.rules[*].resourceNames}{"\n"}{end}' |
    grep -E "\"$part\"" | head -n 1 | cut -d' ' -f1)
  owner=${owner#kshard-owner.}
  [ -n "$owner" ] || die "no owner Role in $system_ns grants partition $part of namespace $ns"
  for ((i = 0; i < shards; i++)); do [ "shard-$i" = "$owner" ] || { other=shard-$i; break; }; done
  [ -n "$other" ] || return 0
  log "namespace $ns (partition $part, $label) is owned by $owner (Role kshard-owner.$owner in $system_ns); a dry-run write there as $other, with its own credentials:"
  if out=$("$(hack/tools.sh path kubectl)" --kubeconfig "$identity/$other.kubeconfig" -n "$ns" \
    annotate replicasets --all --overwrite --dry-run=server kshard.io/demo-fence=probe 2>&1); then
    die "the API server let $other write in $ns, owned by $owner: $out"
  fi
  [[ $out == *"kshard shard fence:"* ]] || die "$other's write in $ns was refused, but not by the shard fence: $out"
  printf '%s\n' "$out" | head -n 1 | sed 's/^/  /'
}

# alive PID: the process exists and is not a zombie (one killed but not yet reaped by its
# parent, which for the demo's detached processes is init).
alive() {
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}

running() { [ -f "$run/$1.pid" ] && alive "$(cat "$run/$1.pid")"; }

# start_shard I: shard-I with its pod identity (made unless the shard runs) and the flags
# every demo shard gets; `up` and `scale` start shards only through here.
start_shard() {
  local i=$1 id=shard-$1
  running "$id" || shard_identity "$id" "$i"
  start "$id" "$bin/shard" --kubeconfig "$identity/$id.kubeconfig" --shard-id "$id" \
    --coordinator-token-file "$identity/$id.coordinator-token" \
    --coordinator-address "127.0.0.1:$(coord_grpc 0),127.0.0.1:$(coord_grpc 1)" \
    --grpc-tls-ca-file "$pki/ca.crt" --grpc-tls-cert-file "$pki/client.crt" --grpc-tls-private-key-file "$pki/client.key" \
    --http-bind-address "127.0.0.1:$(shard_http "$i")" ${DEMO_SHARD_ARGS:-}
}

# leader_index: the index (0 or 1) of the coordinator that leads (the only one /readyz);
# fails when none does.
leader_index() {
  local i
  for i in 0 1; do
    curl -fsS "http://127.0.0.1:$(coord_http $i)/readyz" >/dev/null 2>&1 && { echo "$i"; return 0; }
  done
  return 1
}

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
  [ -x "$bin/coordinator" ] && [ -x "$bin/shard" ] || die "$bin/coordinator and $bin/shard missing: run 'make build'"
  mkdir -p "$logs" "$run"
  hack/cluster.sh up
  make_pki
  start_prometheus
  install_chart
  wait_shard_rbac
  coordinator_identity
  local i fence_flags
  mapfile -t fence_flags <"$chart/coordinator-flags"
  log "coordinators run the chart's identity and fence flags: ${fence_flags[*]}"
  for i in 0 1; do
    start "coordinator-$i" "$bin/coordinator" --kubeconfig "$identity/coordinator.kubeconfig" --id "coordinator-$i" \
      --grpc-bind-address "127.0.0.1:$(coord_grpc $i)" --advertise-address "127.0.0.1:$(coord_grpc $i)" \
      --http-bind-address "127.0.0.1:$(coord_http $i)" \
      --grpc-tls-cert-file "$pki/server.crt" --grpc-tls-private-key-file "$pki/server.key" --grpc-tls-client-ca-file "$pki/ca.crt" \
      "${fence_flags[@]}" \
      --leader-elect-resource-namespace "$system_ns"
  done
  for ((i = 0; i < shards; i++)); do start_shard "$i"; done
  shard_targets
  local leader=""
  local deadline=$((SECONDS + 90))
  until leader=$(leader_index); do
    [ $SECONDS -lt $deadline ] || die "no coordinator became leader"
    sleep 0.5
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
  "$bin/coordinator" assignments --server "http://127.0.0.1:$(coord_http "$leader")"
  echo
  "$bin/coordinator" assignments --server "http://127.0.0.1:$(coord_http "$leader")" --namespace demo-tenant-000
  echo
  show_fence
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
  who owns what: $bin/coordinator assignments --server http://127.0.0.1:$(coord_http "$leader") [--namespace NS]
  coordinators:  http://127.0.0.1:$(coord_http 0)/metrics  http://127.0.0.1:$(coord_http 1)/metrics  (only the leader is /readyz)
  identity:      namespace $system_ns: the chart's ServiceAccounts and RBAC, one pod per shard; each shard's
                 pod-bound tokens (24h) in $identity/ (kubeconfig, coordinator token)
  fence:         ValidatingAdmissionPolicy $(coordinator_flag shard-fence-policy): a shard may write only in
                 namespaces whose partition ($(coordinator_flag shard-fence-partition-label) label) its owner Role grants
                 (kubectl -n $system_ns get roles -l kshard.io/owner-record), e.g.
                 kubectl --kubeconfig $identity/shard-0.kubeconfig -n NS annotate rs --all --dry-run=server a=b
  shards:        $(for ((i = 0; i < shards; i++)); do printf 'http://127.0.0.1:%s/metrics  ' "$(shard_http $i)"; done)
  kshard logs:   $logs/
  cluster logs:  $(dirname "$kubeconfig")/logs/
  prometheus:    http://127.0.0.1:$prom_port (HTTP API, 1s scrapes; config $out/prometheus/prometheus.yml)
                 e.g. curl -s http://127.0.0.1:$prom_port/api/v1/query --data-urlencode 'query=sum by (shard) (kshard_shard_namespaces)'
  dashboards:    charts/kshard/dashboards/*.json: import into a Grafana with that Prometheus as data source (docs/observability.md)
  controllers:   $note
  scale:         make demo-scale SHARDS=n (graceful scale-in; scale-out waits until the new shards own partitions)
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
    while alive "$p" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -9 "$p" 2>/dev/null || true
  done
  for f in $1; do rm -f "$f"; done
}

# uninstall: what the demo added to the cluster: the workload, the shards' pods and
# $system_ns (with the owner Roles), the chart's cluster-scoped objects (RBAC, the fence
# policies) and the partition label the coordinators wrote on every Namespace, removed once
# the fence's record guard is gone. (hack/cluster.sh down wipes etcd anyway, unless
# KSHARD_KEEP_DATA=1.)
uninstall() {
  kubectl get --raw /readyz >/dev/null 2>&1 || { log "the API server is not answering: nothing to remove"; return 0; }
  local label=kshard.io/partition
  [ -f "$chart/coordinator-flags" ] && label=$(coordinator_flag shard-fence-partition-label)
  [ -f "$chart/identity.yaml" ] && kubectl delete -f "$chart/identity.yaml" --ignore-not-found --wait=true >/dev/null
  kubectl label namespace --all "$label-" >/dev/null || true
  kubectl delete namespace -l kshard.io/demo=true --ignore-not-found --wait=false >/dev/null
  kubectl delete namespace -l kshard.io/demo-probe=true --ignore-not-found --wait=false >/dev/null
  kubectl delete namespace "$system_ns" --ignore-not-found --wait=false >/dev/null
  rm -rf "$identity"
  log "removed the workload, $system_ns, the chart's RBAC and fence policies, and the $label labels"
}

down() {
  # Shards first: on SIGTERM each hands its partitions over while a coordinator runs.
  stop_all "$run/shard-*.pid"
  stop_all "$run/coordinator-*.pid"
  stop_all "$run/prometheus.pid"
  uninstall
  hack/cluster.sh down
}

# --- Scaling the shards (`make demo-scale SHARDS=n`) -----------------------------------

# assignment_check URL ID...: succeeds when the leader at URL reports a converged
# assignment in which every partition is owned, each shard ID... is connected, not
# leaving and owns at least one partition, and no other shard owns any; otherwise prints
# what is still missing and fails.
assignment_check() {
  local url=$1 table
  shift
  table=$("$bin/coordinator" assignments --server "$url" 2>&1) || { echo "GET $url/assignments: $table"; return 1; }
  awk -v want="$*" "$shard_rows"'
    NR == 1 {
      n = split($0, f, ", ")
      for (i = 1; i <= n; i++) {
        if (f[i] ~ / partitions$/) { sub(/ partitions$/, "", f[i]); total = f[i] + 0 }
        if (f[i] ~ /^converged=/) conv = (f[i] == "converged=true")
        if (f[i] ~ /^moves in flight /) { sub(/^moves in flight /, "", f[i]); moves = f[i] + 0 }
      }
      next
    }
    function shard_row() { id = col("SHARD"); parts[id] = col("PARTITIONS") + 0; conn[id] = col("CONNECTED"); leaving[id] = col("LEAVING"); owned += parts[id] }
    END {
      k = split(want, w, " ")
      for (i = 1; i <= k; i++) wanted[w[i]] = 1
      msg = ""
      if (!conv) msg = msg "; not converged (" moves " moves in flight)"
      if (owned < total) msg = msg "; " owned " of " total " partitions owned"
      for (i = 1; i <= k; i++) {
        id = w[i]
        if (!(id in parts)) msg = msg "; " id " is not a member yet"
        else if (conn[id] != "true") msg = msg "; " id " is not connected"
        else if (leaving[id] == "true") msg = msg "; " id " is leaving"
        else if (parts[id] == 0) msg = msg "; " id " owns no partition yet"
      }
      for (id in parts) if (!(id in wanted) && parts[id] > 0) msg = msg "; " id " still owns " parts[id] " partitions"
      if (msg != "") { print substr(msg, 3); exit 1 }
    }' <<<"$table"
}

# shard_rows is the awk that finds the shard table of `coordinator assignments`: its
# header (the line starting SHARD) gives each column's offset, for col(NAME) to read on
# the shard rows that follow it, up to the first empty line; on each row it calls
# shard_row(). By offset, not by field number: the columns differ with the placement and
# some headers have spaces.
shard_rows='
  function col(name,   v) { v = substr($0, pos[name]); sub(/^ +/, "", v); sub(/ .*/, "", v); return v }
  /^SHARD / {
    gsub(/‰/, "x") # one column wide to the table, three bytes to an awk that counts bytes
    split("SHARD PARTITIONS CONNECTED LEAVING", names, " ")
    for (i in names) pos[names[i]] = index($0, names[i])
    rows = 1
    next
  }
  rows && NF == 0 { rows = 0 }
  rows { shard_row() }
'

# now, since T0: the wall clock in seconds (microseconds), and the seconds since T0 (one
# decimal).
now() {
  local t=${EPOCHREALTIME:-}
  [ -n "$t" ] || t=$(date +%s) # bash < 5: whole seconds
  echo "${t/,/.}"
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# partitions_line URL: "shard-0=1366 shard-1=1365 ..." from the leader at URL.
partitions_line() {
  "$bin/coordinator" assignments --server "$1" 2>/dev/null |
    awk "$shard_rows"'function shard_row() { printf "%s%s=%s", sep, col("SHARD"), col("PARTITIONS"); sep = " " }'
}

# stop_shard ID: SIGTERM, then wait for the exit: the shard hands its partitions over
# first (--leave-timeout, 60s by default). After the chart's terminationGracePeriodSeconds
# (leaveTimeout + 30s = 90s) it is SIGKILLed, as the kubelet would.
stop_shard() {
  local id=$1 pid deadline=$((SECONDS + 90)) t0 lines
  pid=$(cat "$run/$id.pid")
  lines=$(wc -l <"$logs/$id.log")
  t0=$(now)
  kill "$pid" 2>/dev/null || true
  log "sent SIGTERM to $id (pid $pid): it hands its partitions over, then exits"
  while alive "$pid"; do
    if [ $SECONDS -ge $deadline ]; then
      log "warning: $id did not exit within 90s of SIGTERM; SIGKILL (the coordinator moves what it still holds after its session lapses; see $logs/$id.log)"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$run/$id.pid"
  # What the shard logged after the signal says whether the handover completed.
  if tail -n +"$((lines + 1))" "$logs/$id.log" | grep -q '"msg":"every partition was handed over"'; then
    log "$id handed every partition over and exited $(since "$t0")s after SIGTERM"
  else
    log "warning: $id exited $(since "$t0")s after SIGTERM without confirming the handover; its last log lines:"
    tail -n 5 "$logs/$id.log" >&2
  fi
}

# remove_shard_identity ID...: the shards' pods (which revokes their tokens) and their
# credentials.
remove_shard_identity() {
  local id
  kubectl -n "$system_ns" delete pod "$@" --ignore-not-found --wait=true --timeout=60s >/dev/null ||
    die "could not delete pods $* in $system_ns"
  for id in "$@"; do rm -f "$identity/$id.kubeconfig" "$identity/$id.coordinator-token"; done
  log "deleted the pods of $* in $system_ns (their tokens are revoked) and their credentials"
}

# owner_of URL NS: the shard that owns namespace NS, per the leader at URL ("(nobody" when
# nobody does yet).
owner_of() {
  local out
  out=$("$bin/coordinator" assignments --server "$1" --namespace "$2" 2>&1) || die "GET $1/assignments?namespace=$2: $out"
  sed -n 's/.*, owned by \([^ ]*\) .*/\1/p' <<<"$out"
}

# probe_reconcile URL ID...: that each shard ID... still works its namespaces: in one demo
# namespace it owns (per the leader at URL), Deployment web-0 is scaled one replica up and
# back, and both are waited for (the Deployment and ReplicaSet controllers of that shard).
# A shard that owns none of the demo namespaces is probed in a namespace of its own
# (probe_new_namespace).
probe_reconcile() {
  local url=$1 ns owner id r t0 probed=" "
  shift
  if [[ ,$(kshard_controllers), != *,deployment,* ]]; then
    log "kube-controller-manager runs the Deployment controller here; no reconcile probe of the shards"
    return 0
  fi
  for ns in $(kubectl get ns -l kshard.io/demo=true -o jsonpath='{.items[*].metadata.name}'); do
    owner=$(owner_of "$url" "$ns")
    [[ " $* " == *" $owner "* && $probed != *" $owner "* ]] || continue
    kubectl -n "$ns" get deployment web-0 >/dev/null 2>&1 || continue
    probed+="$owner "
    r=$(kubectl -n "$ns" get deployment web-0 -o jsonpath='{.spec.replicas}')
    t0=$(now)
    kubectl -n "$ns" scale deployment web-0 --replicas=$((r + 1)) >/dev/null
    kubectl -n "$ns" rollout status deployment web-0 --timeout=60s >/dev/null ||
      die "$owner did not scale $ns/web-0 to $((r + 1)) replicas within 60s (see $logs/$owner.log)"
    kubectl -n "$ns" scale deployment web-0 --replicas="$r" >/dev/null
    kubectl -n "$ns" rollout status deployment web-0 --timeout=60s >/dev/null ||
      die "$owner did not scale $ns/web-0 back to $r replicas within 60s (see $logs/$owner.log)"
    log "$owner reconciles: $ns/web-0 scaled $r -> $((r + 1)) -> $r (both Available) in $(since "$t0")s"
    [ "$(wc -w <<<"$probed")" -lt $# ] || break
  done
  for id in "$@"; do
    [[ $probed == *" $id "* ]] || probe_new_namespace "$url" "$id"
  done
}

# probe_new_namespace URL ID: a namespace named demo-probe-ID-K that the leader at URL maps
# to a partition ID owns, with a one-replica Deployment that must become Available; the
# namespace is deleted afterwards (`make demo-down` removes any left, by their label
# kshard.io/demo-probe).
probe_new_namespace() {
  local url=$1 id=$2 k ns="" owner t0
  for ((k = 0; k < 1000; k++)); do
    owner=$(owner_of "$url" "demo-probe-$id-$k")
    [ "$owner" = "$id" ] || continue
    # One left from an earlier probe (still terminating) is not reused.
    kubectl get namespace "demo-probe-$id-$k" >/dev/null 2>&1 || { ns=demo-probe-$id-$k; break; }
  done
  [ -n "$ns" ] || die "no namespace name demo-probe-$id-0..999 falls in a partition $id owns"
  t0=$(now)
  kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" kshard.io/demo-probe=true >/dev/null
  kubectl -n "$ns" create deployment web-0 --image=registry.example/web:1.0 --replicas=1 >/dev/null
  kubectl -n "$ns" rollout status deployment web-0 --timeout=60s >/dev/null ||
    die "$id did not make $ns/web-0 Available within 60s (see $logs/$id.log)"
  log "$id owns none of the demo namespaces; it made Deployment web-0 Available in a new namespace of its own, $ns, in $(since "$t0")s"
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

# scale N: run exactly shard-0 .. shard-(N-1). Shards beyond are stopped gracefully (all at
# once, as a Deployment scale-down does) and their pods deleted; missing ones are started
# with their own pods and tokens, like the first ones. Prints the assignment before and
# after, waits until it has converged over exactly those shards, and probes that each
# still reconciles.
scale() {
  local n=${1:-} max=${DEMO_MAX_SHARDS:-16} i id port p
  [[ $max =~ ^[1-9][0-9]{0,3}$ ]] || die "DEMO_MAX_SHARDS=$max: want a whole number from 1 to 9999"
  [ -n "$n" ] || die "usage: make demo-scale SHARDS=n (hack/demo.sh scale n): how many shards should run"
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "SHARDS=$n: want a whole number of shards, at least 1 (e.g. SHARDS=5)"
  [ "${#n}" -le 4 ] && [ "$n" -le "$max" ] ||
    die "SHARDS=$n: at most $max shards on one machine (each is a process with its own caches and API client; DEMO_MAX_SHARDS raises the bound)"
  for ((i = 0; i < n; i++)); do
    port=$(shard_http "$i")
    for p in "$(coord_http 0)" "$(coord_http 1)" "$(coord_grpc 0)" "$(coord_grpc 1)" "$prom_port"; do
      [ "$port" != "$p" ] || die "SHARDS=$n: shard-$i's HTTP port $port (DEMO_SHARD_HTTP_PORT + $i) is taken by a coordinator or Prometheus; move DEMO_SHARD_HTTP_PORT"
    done
  done
  [ -x "$bin/coordinator" ] && [ -x "$bin/shard" ] || die "$bin/coordinator and $bin/shard missing: run 'make demo'"
  running coordinator-0 || running coordinator-1 || die "no demo coordinator runs: start the demo with 'make demo'"
  [ -f "$chart/coordinator-flags" ] && [ -f "$pki/client.crt" ] || die "no demo state in $out: start the demo with 'make demo'"
  local leader url
  leader=$(leader_index) || die "no coordinator leads (neither 127.0.0.1:$(coord_http 0) nor :$(coord_http 1) is /readyz); see $logs/coordinator-*.log"
  url=http://127.0.0.1:$(coord_http "$leader")

  local current=() want=() stop=() add=() stale=() f
  mapfile -t current < <(shard_ids)
  # A shard beyond n whose process is gone (it crashed or was killed by hand) only leaves
  # its pid file and pod behind.
  for f in "$run"/shard-*.pid; do
    [ -f "$f" ] || continue
    id=$(basename "$f" .pid)
    running "$id" || [ "${id#shard-}" -lt "$n" ] || stale+=("$id")
  done
  for ((i = 0; i < n; i++)); do
    want+=("shard-$i")
    running "shard-$i" || add+=("$i")
  done
  for id in "${current[@]}"; do
    [ "${id#shard-}" -lt "$n" ] || stop+=("$id")
  done
  log "running shards: ${#current[@]} (${current[*]:-none}); scaling to $n: start ${#add[@]}, stop ${#stop[@]}"
  echo
  echo "Before (coordinator-$leader, $url/assignments):"
  "$bin/coordinator" assignments --server "$url"
  echo

  local t0
  t0=$(now)
  if [ ${#stale[@]} -gt 0 ]; then
    log "${stale[*]}: no longer running (stale pid files); removing the pods and credentials left behind"
    for id in "${stale[@]}"; do rm -f "$run/$id.pid"; done
    shard_targets
    remove_shard_identity "${stale[@]}"
  fi
  if [ ${#stop[@]} -gt 0 ]; then
    local pids=()
    for id in "${stop[@]}"; do
      stop_shard "$id" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    shard_targets
    log "${stop[*]} stopped $(since "$t0")s after the scale began"
    remove_shard_identity "${stop[@]}"
  fi
  if [ ${#add[@]} -gt 0 ]; then
    for i in "${add[@]}"; do start_shard "$i"; done
    shard_targets
    for i in "${add[@]}"; do wait_ready "shard-$i" "http://127.0.0.1:$(shard_http "$i")/readyz"; done
    log "$(printf 'shard-%s ' "${add[@]}")Ready (session welcomed, caches synced) $(since "$t0")s after the scale began"
  fi

  local deadline=$((SECONDS + 180)) why l
  until why=$(assignment_check "$url" "${want[@]}"); do
    if [ $SECONDS -ge $deadline ]; then
      "$bin/coordinator" assignments --server "$url" >&2 || true
      die "the assignment did not converge over ${want[*]} within 180s: $why"
    fi
    # A leader change while scaling: follow the new leader.
    l=$(leader_index) && { leader=$l; url=http://127.0.0.1:$(coord_http "$leader"); }
    sleep 0.5
  done
  log "assignment converged over $n shards $(since "$t0")s after the scale began: $(partitions_line "$url")"
  echo
  echo "After (coordinator-$leader, $url/assignments):"
  "$bin/coordinator" assignments --server "$url"
  echo
  probe_reconcile "$url" "${want[@]}"
  log "the demo runs $n shards; Prometheus scrapes them (DEMO_PROMETHEUS_PORT $prom_port); 'make demo-scale SHARDS=m' scales again"
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  scale) scale "${2:-}" ;;
  *) echo "usage: $0 up|down|scale N" >&2; exit 2 ;;
esac

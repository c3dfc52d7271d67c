#!/usr/bin/env bash
# One real node for the local control plane (hack/cluster.sh): a kubelet and kube-proxy
# (k8s.io/kubernetes, built by hack/tools.sh node), containerd, runc and the CNI plugins
# (Debian's packages, installed when missing), cluster DNS from CoreDNS (built from the Go
# module proxy) and a pause image built here. kwok's fake nodes keep the workloads; the
# real node is labelled and tainted kshard.io/real-node for kshard's own pods.
#
#   hack/node.sh up       start the node (the control plane must be up; idempotent)
#   hack/node.sh down     stop it and leave the machine as it was found: processes,
#                         containers, mounts, cgroups, the network namespace with its
#                         links and iptables rules, kernel settings the kubelet changed
#   hack/node.sh status   one line per component
#   hack/node.sh import TARBALL...   import image tarballs into the node's containerd
#   hack/node.sh logs POD-NAMESPACE [POD]   the node's container logs of a namespace's pods
#
# The network. Everything the node uses lives in the network namespace kshard-node,
# which this script creates and deletes: the node's address (10.246.0.2 on its loopback),
# the pod bridge (10.246.1.0/24), kube-proxy's rules for the Service range (10.0.0.0/24,
# the API server's --service-cluster-ip-range), CoreDNS (10.0.0.10). Nothing links that
# namespace to the host's network: the API server stays on the host's loopback, and a pair
# of socat relays joined by a Unix socket carries connections from <any address of the
# namespace>:<API port> to it. Pods reach it as https://10.0.0.1 (the kubernetes
# Service, whose endpoints this script points at 10.246.0.2), the kubelet, kube-proxy and
# anything else started in the namespace as https://127.0.0.1:<API port>, both names on
# the API server's certificate. The API server cannot reach the kubelet's port: `kubectl
# logs` and `exec` do not work on this node (use `hack/node.sh logs`).
#
# State lives in KSHARD_CLUSTER_DIR/node; one node per machine (the namespace's name and
# the cgroup root /kshard-node are fixed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${KSHARD_CLUSTER_DIR:-$root/_output/cluster}
api_port=${KSHARD_APISERVER_PORT:-26443}
node_dir=$dir/node
run=$node_dir/run
logs=$node_dir/logs
pki=$dir/pki
netns=kshard-node
node_name=kshard-node
node_ip=10.246.0.2
pod_cidr=10.246.1.0/24
pod_gateway=10.246.1.1
service_cidr=10.0.0.0/24
dns_ip=10.0.0.10
cgroup_root=kshard-node
label=kshard.io/real-node
pause_image=kshard.local/pause:1
coredns_image=kshard.local/coredns:1
components=(api-relay-host api-relay-node containerd kubelet kube-proxy)
# Paths outside the node's folder that the kubelet, containerd and CNI create whatever
# they are told (the device-plugin socket, the log symlinks, shim sockets, CNI's result
# cache, ip's /run/netns mount). up records which of them did not exist; down removes
# exactly those.
host_paths=(/var/lib/kubelet /var/log/containers /run/containerd /var/lib/cni /run/netns)
# The kernel settings the kubelet sets on start (setupKernelTunables); down restores them.
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

tool() { "$root/hack/tools.sh" path "$1"; }
log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] error: %s\n' "$*" >&2; exit 1; }
# in_netns runs a command in the node's network namespace only. Not `ip netns exec`, which
# also mounts a fresh /sys in a mount namespace of its own: that hides the host's cgroup
# mounts from the kubelet, and keeps containerd's mounts from the kubelet and from down.
netns_run=(nsenter "--net=/run/netns/$netns")
in_netns() { "${netns_run[@]}" "$@"; }
kubectl_() { "$(tool kubectl)" --kubeconfig "$dir/kubeconfig" "$@"; }
ctr_() { ctr --address "$run/containerd/containerd.sock" --namespace k8s.io "$@"; }

# shellcheck source=lib/process.sh
. "$root/hack/lib/process.sh"
# shellcheck source=lib/pki.sh
. "$root/hack/lib/pki.sh"

# match NAME: the word of NAME's command line that start recorded.
match() { cat "$run/$1.cmd" 2>/dev/null || echo "$1"; }
running() { proc_running "$1" "$(match "$1")"; }

# start NAME MATCH CMD...: runs CMD detached, logging to logs/NAME.log; MATCH is a word of
# its command line that tells the process apart from a recycled pid.
start() {
  local name=$1
  running "$name" || echo "$2" >"$run/$name.cmd"
  proc_start "$@"
}

# wait_for NAME SECONDS CMD...: polls CMD until it succeeds, failing fast if NAME died.
wait_for() { local name=$1 timeout=$2; shift 2; proc_wait "$name" "$(match "$name")" "$timeout" "$@"; }

stop() {
  proc_stop "$1" "$(match "$1")" 10
  rm -f "$run/$1.cmd"
}

# packages: Debian's containerd, runc, CNI plugins, iptables (kube-proxy), conntrack,
# socat and dig (the DNS check), installed when missing, without starting Debian's own containerd service.
packages() {
  local missing=() p
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v socat >/dev/null || missing+=(socat)
  command -v dig >/dev/null || missing+=(bind9-dnsutils)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root"
  log "installing ${missing[*]} (Debian's packages)"
  # policy-rc.d 101: the packages' services are not started (the node runs its own).
  local policy=/usr/sbin/policy-rc.d had_policy=0
  [ -e "$policy" ] && had_policy=1
  [ "$had_policy" = 1 ] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  [ "$had_policy" = 1 ] || rm -f "$policy"
  for p in containerd runc socat conntrack iptables dig; do command -v "$p" >/dev/null || die "$p still missing after apt-get install"; done
}

# ip_in CIDR ADDR: true when ADDR is inside CIDR (IPv4).
ip_to_int() { local IFS=.; read -r a b c d <<<"$1"; echo $(((a << 24) | (b << 16) | (c << 8) | d)); }
cidr_overlaps() {
  local a=${1%/*} al=${1#*/} b=${2%/*} bl=${2#*/} l
  l=$((al < bl ? al : bl))
  local mask=$(((0xffffffff << (32 - l)) & 0xffffffff))
  [ $(($(ip_to_int "$a") & mask)) -eq $(($(ip_to_int "$b") & mask)) ]
}

# check_subnets: the node's ranges must not overlap any the host itself uses.
check_subnets() {
  local used r ours
  used=$( { ip -4 -o addr show | awk '{ print $4 }'; ip -4 route show | awk '$1 != "default" { print $1 }'; } | grep / || true)
  for r in $used; do
    [[ $r == 127.* ]] && continue
    for ours in "$node_ip/32" "$pod_cidr" "$service_cidr"; do
      cidr_overlaps "$r" "$ours" && die "the host uses $r, which overlaps the node's $ours: move the host's network or the node's (hack/node.sh)"
    done
  done
  return 0
}

network() {
  if ! ip netns list | grep -qw "$netns"; then
    ip netns add "$netns"
    log "created network namespace $netns"
  fi
  in_netns ip link set lo up
  # The node's address lives on the namespace's loopback link (the kernel has no dummy
  # links here): local to the namespace, reachable from its pods through the bridge.
  in_netns ip addr replace "$node_ip/32" dev lo
  # No default route out of the namespace: every address it needs is in it. Service IPs
  # are DNATed by kube-proxy; this route only gives locally generated packets to them a
  # source address and a way before the DNAT.
  in_netns ip route replace "$service_cidr" dev lo src "$node_ip"
  in_netns sysctl -qw net.ipv4.ip_forward=1
  in_netns sysctl -qw net.bridge.bridge-nf-call-iptables=1
  in_netns sysctl -qw net.ipv4.conf.all.route_localnet=1
}

# certs NAME CN ORG: a client certificate of the node's component NAME.
certs() {
  mkdir -p "$node_dir/pki"
  pki_signed "$pki/ca" "$node_dir/pki/$1" "$2" "$3"
}

# kubeconfig USER: USER's kubeconfig for the API server's address inside the namespace.
kubeconfig() { pki_kubeconfig "$node_dir/$1.kubeconfig" "https://127.0.0.1:$api_port" "$pki/ca.crt" "$1" "$node_dir/pki/$1"; }

write_configs() {
  mkdir -p "$node_dir/cni" "$node_dir/containerd" "$node_dir/kubelet" "$node_dir/pod-logs" "$run/containerd"
  cat >"$node_dir/cni/10-kshard-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kshard-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$pod_gateway"}]],
               "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$node_dir/cni-ipam"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$node_dir/containerd/config.toml" <<EOF
version = 2
root = "$node_dir/containerd/root"
state = "$run/containerd/state"
[grpc]
  address = "$run/containerd/containerd.sock"
[ttrpc]
  address = "$run/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
  level = "${KSHARD_NODE_CONTAINERD_LOG_LEVEL:-info}"
[plugins."io.containerd.internal.v1.opt"]
  path = "$node_dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  enable_selinux = false
  # This machine's root lacks CAP_SYS_RESOURCE: no process may lower an oom_score_adj
  # below its own, and the kubelet asks -998 for every pod sandbox. Clamp to containerd's.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state folder, not /run/netns beside others'.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node_dir/cni"
EOF
  # An empty resolv.conf: a pod with dnsPolicy Default (CoreDNS) gets no upstream
  # nameserver, so nothing the node's pods ask leaves the machine.
  : >"$node_dir/resolv.conf"
  cat >"$node_dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host mounts cgroup v1 (KEP-5573: kubelet 1.35+ refuses it unless told).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
containerRuntimeEndpoint: unix://$run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: $node_dir/resolv.conf
podLogsDir: $node_dir/pod-logs
staticPodPath: $node_dir/manifests
failSwapOn: false
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
serializeImagePulls: false
# Images are imported, never pulled: the kubelet must not collect them, whatever the
# host's disk use, nor evict pods for a disk shared with everything else.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
registerWithTaints:
- {key: $label, value: "true", effect: NoSchedule}
EOF
  cat >"$node_dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $node_dir/kube-proxy.kubeconfig}
hostnameOverride: $node_name
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $pod_cidr
# The namespace's conntrack table is the kernel's: leave its global limits alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# cgroups: the kubelet's cgroup root, in every v1 hierarchy the kubelet uses.
cgroups() {
  local c
  for c in cpu cpuacct cpuset memory pids blkio devices freezer hugetlb systemd; do
    [ -d "/sys/fs/cgroup/$c" ] || continue
    mkdir -p "/sys/fs/cgroup/$c/$cgroup_root"
  done
  if [ -d /sys/fs/cgroup/cpuset/$cgroup_root ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$cgroup_root/cpuset.cpus
    cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$cgroup_root/cpuset.mems
  fi
}

save_sysctls() {
  [ -f "$node_dir/sysctl.orig" ] && return 0
  local s
  for s in "${kubelet_sysctls[@]}"; do
    if [ -e "/proc/sys/${s//.//}" ]; then echo "$s=$(sysctl -n "$s")"; fi
  done >"$node_dir/sysctl.orig"
}

# record_host_paths notes which of host_paths do not exist yet (once, before anything
# runs): down removes those.
record_host_paths() {
  [ -f "$node_dir/created-paths" ] && return 0
  local p
  for p in "${host_paths[@]}"; do
    if [ ! -e "$p" ]; then echo "$p"; fi
  done >"$node_dir/created-paths"
}

# images: the pause and CoreDNS images, built once into the tool cache.
images() {
  local d
  d=$(tool node-images)
  ctr_ images import "$d/pause.tar" >/dev/null
  ctr_ images import "$d/coredns.tar" >/dev/null
  log "imported $pause_image and $coredns_image"
}

api_relay_ready() { in_netns curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port/readyz"; }
node_ready() {
  [ "$(kubectl_ get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
# coredns_ready: CoreDNS answers for the kubernetes Service's name, asked at its own
# address. Through the kube-dns Service (kube-proxy's rules) it answers only once the
# Service has an EndpointSlice, which the EndpointSlice controller writes: kshard's, once
# installed (the local kube-controller-manager no longer runs it), so the helm e2e checks
# that path after it has installed kshard.
coredns_ready() {
  in_netns curl -fsS http://127.0.0.1:18181/ready >/dev/null &&
    [ "$(in_netns dig +short +time=1 +tries=1 -p 1053 "@$node_ip" kubernetes.default.svc.cluster.local)" = 10.0.0.1 ]
}

# service_endpoints: the kubernetes Service's EndpointSlice, at the relay in the namespace
# (the API server runs with --endpoint-reconciler-type=none, so nothing else writes it;
# kube-proxy and CoreDNS read EndpointSlices only).
service_endpoints() {
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: kshard-node.sh}
addressType: IPv4
endpoints:
- addresses: [$node_ip]
  conditions: {ready: true}
ports:
- {name: https, port: $api_port, protocol: TCP}
EOF
}

# coredns: cluster DNS as a static pod of the node (the Deployment controller is kshard's,
# which needs DNS first), on the node's network with a kubeconfig of its own, and the
# kube-dns Service in front of it. It runs as a non-root user without capabilities, so it
# listens on 1053; the Service maps 53 to it.
coredns() {
  mkdir -p "$node_dir/manifests" "$node_dir/coredns"
  cat >"$node_dir/coredns/Corefile" <<EOF
.:1053 {
    errors
    health :18080
    ready :18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig /etc/coredns/kubeconfig kshard-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loadbalance
    reload
}
EOF
  cp "$pki/ca.crt" "$node_dir/coredns/ca.crt"
  cp "$node_dir/pki/coredns.crt" "$node_dir/pki/coredns.key" "$node_dir/coredns/"
  pki_kubeconfig "$node_dir/coredns/kubeconfig" "https://127.0.0.1:$api_port" /etc/coredns/ca.crt coredns /etc/coredns/coredns
  # Readable by CoreDNS's user only: the key lists and watches Services cluster-wide.
  chown 65532:65532 "$node_dir/coredns/"*
  chmod 0600 "$node_dir/coredns/"*
  chmod 0644 "$node_dir/coredns/Corefile" "$node_dir/coredns/ca.crt"
  cat >"$node_dir/manifests/coredns.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  hostNetwork: true
  dnsPolicy: Default
  priorityClassName: system-node-critical
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: coredns
    image: $coredns_image
    imagePullPolicy: Never
    args: [-conf, /etc/coredns/Corefile]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
    readinessProbe: {httpGet: {host: 127.0.0.1, path: /ready, port: 18181}, periodSeconds: 2}
    livenessProbe: {httpGet: {host: 127.0.0.1, path: /health, port: 18080}, periodSeconds: 10}
    volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
  volumes: [{name: config, hostPath: {path: $node_dir/coredns, type: Directory}}]
EOF
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kshard-node:coredns"}
rules:
- {apiGroups: [""], resources: [services, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kshard-node:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kshard-node:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kshard-node:coredns"}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $dns_ip
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 1053}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 1053}
EOF
}

up() {
  [ -f "$dir/kubeconfig" ] && kubectl_ get --raw /readyz >/dev/null 2>&1 ||
    die "the control plane in $dir is not up: run hack/cluster.sh up (make cluster-up) first"
  [ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] ||
    die "the node supports cgroup v1 hosts only (this is what these machines mount); /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup)"
  packages
  "$root/hack/tools.sh" node
  check_subnets
  mkdir -p "$run" "$logs"
  record_host_paths
  network
  certs kubelet "system:node:$node_name" system:nodes
  certs kube-proxy system:kube-proxy ""
  certs coredns kshard-node:coredns ""
  kubeconfig kubelet
  kubeconfig kube-proxy
  write_configs
  cgroups

  local sock=$run/api.sock
  start api-relay-host "UNIX-LISTEN:$sock" socat "UNIX-LISTEN:$sock,fork,mode=600,unlink-early" "TCP:127.0.0.1:$api_port"
  start api-relay-node "TCP-LISTEN:$api_port" "${netns_run[@]}" socat "TCP-LISTEN:$api_port,fork,reuseaddr" "UNIX-CONNECT:$sock"
  wait_for api-relay-node 20 api_relay_ready

  start containerd "$node_dir/containerd/config.toml" "${netns_run[@]}" containerd --config "$node_dir/containerd/config.toml"
  wait_for containerd 30 ctr_ version
  images

  save_sysctls
  start kubelet "--hostname-override=$node_name" "${netns_run[@]}" "$(tool kubelet)" \
    --config="$node_dir/kubelet.yaml" --kubeconfig="$node_dir/kubelet.kubeconfig" \
    --root-dir="$node_dir/kubelet" --cert-dir="$node_dir/kubelet/pki" \
    --hostname-override="$node_name" --node-ip="$node_ip" \
    --node-labels="$label=true" --v="${KSHARD_NODE_VERBOSITY:-1}"
  wait_for kubelet 90 node_ready

  start kube-proxy "$node_dir/kube-proxy.yaml" "${netns_run[@]}" "$(tool kube-proxy)" --config="$node_dir/kube-proxy.yaml"
  service_endpoints
  coredns
  wait_for kubelet 120 coredns_ready
  log "node $node_name is Ready (label and taint $label; pods on $pod_cidr, network namespace $netns)"
}

# kill_cgroup_procs: kills every process left in the node's cgroups (containers whose
# shims went with containerd).
kill_cgroup_procs() {
  local f pids
  [ -d "/sys/fs/cgroup/pids/$cgroup_root" ] || [ -d "/sys/fs/cgroup/memory/$cgroup_root" ] || return 0
  for _ in 1 2 3; do
    pids=$( (find /sys/fs/cgroup/*/"$cgroup_root" -name cgroup.procs -exec cat {} + 2>/dev/null || true) | sort -u)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.5
  done
}

remove_cgroups() {
  local c
  for c in /sys/fs/cgroup/*/"$cgroup_root"; do
    [ -d "$c" ] || continue
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$c" ] && log "warning: cgroup $c could not be removed"
  done
  return 0
}

unmount_all() {
  local m
  # Deepest first; the node's mounts all live under its folder (kubelet volumes, container
  # root filesystems, sandbox network namespaces under the containerd state folder).
  for _ in 1 2 3; do
    m=$(awk -v d="$node_dir" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
    [ -n "$m" ] || break
    while read -r p; do umount -l "$p" 2>/dev/null || true; done <<<"$m"
  done
}

# drain_pods stops the node's pods the way the kubelet does, so that CNI releases their
# addresses and containerd and runc clean up after them: the static pod's manifest goes,
# the node is cordoned, its pods deleted; then it waits (at most 60s) for no task to run.
drain_pods() {
  running kubelet && running containerd || return 0
  rm -f "$node_dir/manifests/"*.yaml
  kubectl_ --request-timeout=10s cordon "$node_name" >/dev/null 2>&1 || true
  kubectl_ --request-timeout=10s delete pods --all-namespaces --field-selector "spec.nodeName=$node_name" \
    --grace-period=5 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 60))
  while [ -n "$(ctr_ tasks ls -q 2>/dev/null || true)" ] && [ $SECONDS -lt $deadline ]; do sleep 1; done
  if [ -n "$(ctr_ tasks ls -q 2>/dev/null || true)" ]; then
    log "warning: containers still running after 60s; killing them"
  else
    log "stopped the node's pods"
  fi
}

# remove_host_paths removes what up recorded as created by the node.
remove_host_paths() {
  [ -f "$node_dir/created-paths" ] || return 0
  local p
  while read -r p; do
    [ -n "$p" ] || continue
    if [ "$p" = /run/netns ]; then
      # ip makes /run/netns a mount point of its own on first use.
      while grep -q " /run/netns " /proc/self/mounts; do umount /run/netns 2>/dev/null || umount -l /run/netns || break; done
    fi
    rm -rf "$p"
  done <"$node_dir/created-paths"
  rm -f "$node_dir/created-paths"
}

down() {
  drain_pods
  kubectl_ --request-timeout=10s delete node "$node_name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  local i
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    stop "${components[i]}"
  done
  # containerd-shim processes outlive containerd by design; the node's are the ones whose
  # command line names its socket.
  pkill -9 -f "containerd-shim.*$run/containerd" 2>/dev/null || true
  kill_cgroup_procs
  unmount_all
  remove_cgroups
  if ip netns list 2>/dev/null | grep -qw "$netns"; then
    ip netns delete "$netns" || log "warning: could not delete network namespace $netns"
    log "deleted network namespace $netns (its links, addresses and iptables rules)"
  fi
  if [ -f "$node_dir/sysctl.orig" ]; then
    # shellcheck disable=SC2046
    sysctl -qw $(cat "$node_dir/sysctl.orig") >/dev/null || log "warning: could not restore $(cat "$node_dir/sysctl.orig")"
    rm -f "$node_dir/sysctl.orig"
    log "restored the kernel settings the kubelet changed"
  fi
  # The kubelet's symlinks to its container logs, and CNI's cached results of the node's
  # network (where those folders were there before the node).
  find /var/log/containers -maxdepth 1 -type l -lname "$node_dir/*" -delete 2>/dev/null || true
  rm -f /var/lib/cni/results/kshard-node-* 2>/dev/null || true
  remove_host_paths
  rm -rf "$node_dir/kubelet" "$node_dir/containerd" "$node_dir/pod-logs" "$node_dir/cni-ipam" "$node_dir/audit" "$run"
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
  return $rc
}

# import TARBALL...: image tarballs into the node's containerd.
import_images() {
  running containerd || die "the node is not up (hack/node.sh up)"
  local t
  for t in "$@"; do
    ctr_ images import "$t" >/dev/null
    log "imported $t"
  done
}

# pod_logs NAMESPACE [POD]: prints the current containers' logs of the node's pods.
pod_logs() {
  local ns=$1 pod=${2:-} d
  for d in "$node_dir/pod-logs/${ns}_${pod:-}"*; do
    [ -d "$d" ] || continue
    find "$d" -name '*.log' | sort | while read -r f; do
      printf '==> %s <==\n' "${f#"$node_dir/pod-logs/"}"
      tail -n "${KSHARD_NODE_LOG_LINES:-60}" "$f"
    done
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  import) shift; import_images "$@" ;;
  logs) shift; pod_logs "${1:?namespace}" "${2:-}" ;;
  *) echo "usage: $0 up|down|status|import TARBALL...|logs NAMESPACE [POD]" >&2; exit 2 ;;
esac

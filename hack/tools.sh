#!/usr/bin/env bash
# Builds the binaries kshard's tests and demo need, once, into a cache outside the
# repository keyed by version. A second run finds them and returns at once.
#
#   hack/tools.sh [kube|etcd|kwok|kwok-metrics|metrics-server|staticcheck|protoc-gen|helm|prometheus|node|cluster|all]   build what is missing
#   hack/tools.sh path <name>                          print a tool's cached path
#
# KSHARD_CACHE overrides the cache folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/kshard).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${KSHARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kshard}

KUBE_VERSION=v1.37.1
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
STATICCHECK_VERSION=v0.8.2
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
HELM_VERSION=v3.22.0
PROMETHEUS_VERSION=v0.315.0
COREDNS_VERSION=v1.15.0
METRICS_SERVER_VERSION=v0.8.0

kube_dir=$cache/kube-$KUBE_VERSION
etcd_dir=$cache/etcd-$ETCD_VERSION
kwok_dir=$cache/kwok-$KWOK_VERSION
kwok_metrics_dir=$cache/kwok-metrics-$KWOK_VERSION
metrics_server_dir=$cache/metrics-server-$METRICS_SERVER_VERSION
staticcheck_dir=$cache/staticcheck-$STATICCHECK_VERSION
protoc_gen_dir=$cache/protoc-gen-go-$PROTOC_GEN_GO_VERSION-grpc-$PROTOC_GEN_GO_GRPC_VERSION
helm_dir=$cache/helm-$HELM_VERSION
prometheus_dir=$cache/prometheus-$PROMETHEUS_VERSION
node_dir=$cache/node-$KUBE_VERSION-coredns-$COREDNS_VERSION

log() { printf '[tools] %s\n' "$*" >&2; }

# build_into DIR CMD...: runs CMD with $out set to a fresh temporary folder, then moves it
# to DIR, so an interrupted build never leaves a half-filled cache entry behind.
build_into() {
  local dir=$1; shift
  [ -f "$dir/.complete" ] && return 0
  mkdir -p "$(dirname "$dir")"
  local tmp; tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  local start=$SECONDS
  out=$tmp "$@"
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "built $(basename "$dir") in $((SECONDS - start))s"
}

build_kube() {
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $KUBE_VERSION (several minutes on a cold machine)"
  local v=$KUBE_VERSION minor
  minor=${v#v1.}; minor=${minor%%.*}
  local ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  (cd "$root/hack/tools/kube" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w$ld" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
}

build_etcd() {
  log "building etcd $ETCD_VERSION"
  (cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  log "building kwok $KWOK_VERSION"
  GOBIN=$out CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # The stage files kwok needs ship in its module; keep a copy next to the binary.
  local src
  src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$out/stages"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    cp "$src/kustomize/stage/$f" "$out/stages/$(basename "$f")"
  done
  chmod 0644 "$out"/stages/*.yaml
}

# build_kwok_metrics: kwok's emulated kubelet resource metrics (its Metric at
# /metrics/nodes/{nodeName}/metrics/resource) and its ClusterResourceUsage that takes a pod's
# CPU and memory from the annotations kwok.x-k8s.io/usage-cpu and kwok.x-k8s.io/usage-memory,
# as kwok's module ships them; cluster.sh passes both to kwok with --config. An entry of its
# own, so a kwok cache built before it needs no rebuild.
build_kwok_metrics() {
  log "copying kwok $KWOK_VERSION's resource metrics and usage configuration"
  local src
  src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp "$src/kustomize/metrics/resource/metrics-resource.yaml" "$src/kustomize/metrics/usage/usage-from-annotation.yaml" "$out/"
  chmod 0644 "$out"/*.yaml
}

build_metrics_server() {
  log "building metrics-server $METRICS_SERVER_VERSION"
  (cd "$root/hack/tools/metrics-server" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/metrics-server" \
    sigs.k8s.io/metrics-server/cmd/metrics-server)
}

build_staticcheck() {
  log "building staticcheck $STATICCHECK_VERSION"
  GOBIN=$out CGO_ENABLED=0 go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
}

build_protoc_gen() {
  log "building protoc-gen-go $PROTOC_GEN_GO_VERSION and protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION"
  GOBIN=$out CGO_ENABLED=0 go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  GOBIN=$out CGO_ENABLED=0 go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
}

build_helm() {
  log "building helm $HELM_VERSION"
  # The release build stamps the version and the Kubernetes minor of its client-go (v0.37 ->
  # 1.37): that is what `helm template` and `helm lint` assume when no cluster is asked.
  local pkg=helm.sh/helm/v3
  local ld="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
  ld+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=37"
  ld+=" -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=37"
  GOBIN=$out CGO_ENABLED=0 go install -trimpath -ldflags "$ld" "$pkg/cmd/helm@$HELM_VERSION"
}

build_prometheus() {
  log "building prometheus $PROMETHEUS_VERSION (a few minutes on a cold machine; no web UI assets, the HTTP API is complete)"
  local ld="-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v} -X github.com/prometheus/common/version.Branch=kshard-tools"
  (cd "$root/hack/tools/prometheus" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w $ld" -o "$out/prometheus" \
    github.com/prometheus/prometheus/cmd/prometheus)
}

# build_node: the real node's kubelet and kube-proxy (hack/node.sh), and its images, which
# no registry can serve here: pause (hack/tools/image/pause) and CoreDNS with the plugins
# cluster DNS needs (hack/tools/coredns), each a static binary on an empty base.
build_node() {
  log "building kubelet, kube-proxy $KUBE_VERSION and CoreDNS $COREDNS_VERSION (several minutes on a cold machine)"
  local v=$KUBE_VERSION minor ld=""
  minor=${v#v1.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  (cd "$root/hack/tools/kube" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w$ld" -o "$out/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  mkdir -p "$out/images" "$out/build"
  (cd "$root/hack/tools/coredns" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/build/coredns" .)
  (cd "$root/hack/tools/image" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/build/pause" ./pause)
  (cd "$root/hack/tools/image" &&
    go run -mod=readonly . single --binary "$out/build/pause" --tag kshard.local/pause:1 --user 65535 --output "$out/images/pause.tar" >/dev/null &&
    go run -mod=readonly . single --binary "$out/build/coredns" --tag kshard.local/coredns:1 --output "$out/images/coredns.tar" >/dev/null)
  rm -rf "$out/build"
}

tool_path() {
  case $1 in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo "$kube_dir/$1" ;;
    etcd) echo "$etcd_dir/etcd" ;;
    kwok) echo "$kwok_dir/kwok" ;;
    kwok-stages) echo "$kwok_dir/stages" ;;
    kwok-metrics) echo "$kwok_metrics_dir" ;;
    metrics-server) echo "$metrics_server_dir/metrics-server" ;;
    staticcheck) echo "$staticcheck_dir/staticcheck" ;;
    protoc-gen) echo "$protoc_gen_dir" ;;
    helm) echo "$helm_dir/helm" ;;
    prometheus) echo "$prometheus_dir/prometheus" ;;
    kubelet|kube-proxy) echo "$node_dir/$1" ;;
    node-images) echo "$node_dir/images" ;;
    *) echo "unknown tool $1" >&2; return 2 ;;
  esac
}

ensure() {
  case $1 in
    kube) build_into "$kube_dir" build_kube ;;
    etcd) build_into "$etcd_dir" build_etcd ;;
    kwok) build_into "$kwok_dir" build_kwok ;;
    kwok-metrics) build_into "$kwok_metrics_dir" build_kwok_metrics ;;
    metrics-server) build_into "$metrics_server_dir" build_metrics_server ;;
    staticcheck) build_into "$staticcheck_dir" build_staticcheck ;;
    protoc-gen) build_into "$protoc_gen_dir" build_protoc_gen ;;
    helm) build_into "$helm_dir" build_helm ;;
    prometheus) build_into "$prometheus_dir" build_prometheus ;;
    node) build_into "$node_dir" build_node ;;
    cluster) ensure etcd; ensure kwok; ensure kwok-metrics; ensure kube; ensure metrics-server ;;
    all) ensure cluster; ensure staticcheck; ensure protoc-gen; ensure helm; ensure prometheus; ensure node ;;
    *) echo "unknown target $1 (kube|etcd|kwok|kwok-metrics|metrics-server|staticcheck|protoc-gen|helm|prometheus|node|cluster|all)" >&2; return 2 ;;
  esac
}

case ${1:-all} in
  path) tool_path "${2:?tool name}" ;;
  *) for t in "${@:-all}"; do ensure "$t"; done ;;
esac

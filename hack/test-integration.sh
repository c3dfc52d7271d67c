#!/usr/bin/env bash
# Runs the integration tests in test/ against the local control plane. A control plane
# that is already up is reused and left running; one this script starts is stopped at the
# end (KSHARD_KEEP_CLUSTER=1 keeps it for debugging).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if [ "${KSHARD_SKIP_INTEGRATION:-0}" = 1 ]; then
  echo "integration tests skipped on purpose: KSHARD_SKIP_INTEGRATION=1" >&2
  exit 0
fi

# The control plane, plus helm and Prometheus for the chart and dashboard tests.
hack/tools.sh cluster helm prometheus
# Stage and package wall times go to the log, so that a run that got slower says where.
stage() { echo "[test-integration] $* (${SECONDS}s since the start)"; }

# KSHARD_INTEGRATION_PARALLEL control planes (default 2) run the test packages side by
# side, one package per control plane at a time: each package starts its own kshard, and
# two kshards on one control plane would both own every namespace. Most of a package's
# time is spent waiting (leases, TTLs, rollouts, minReadySeconds), not computing, so two
# share the machine's cores well. The first is hack/cluster.sh's default; control plane k
# lives in _output/cluster-k on ports of its own.
parallel=${KSHARD_INTEGRATION_PARALLEL:-2}
[[ $parallel =~ ^[1-4]$ ]] || { echo "KSHARD_INTEGRATION_PARALLEL must be 1-4, not '$parallel'" >&2; exit 2; }
# cluster_env K: the variables that select control plane K for hack/cluster.sh and the tests.
cluster_env() {
  local k=$1
  if [ "$k" = 1 ]; then
    echo "KSHARD_CLUSTER_DIR=${KSHARD_CLUSTER_DIR:-$root/_output/cluster}"
    return
  fi
  local o=$(((k - 1) * 100)) # clear of the default's, the upstream's and the large cluster's ports
  echo "KSHARD_CLUSTER_DIR=$root/_output/cluster-$k KSHARD_ETCD_PORT=$((23790 + o)) KSHARD_ETCD_PEER_PORT=$((23800 + o))" \
    "KSHARD_APISERVER_PORT=$((26443 + o)) KSHARD_SCHEDULER_PORT=$((20259 + o)) KSHARD_KCM_PORT=$((20257 + o)) KSHARD_KWOK_PORT=$((20247 + o))"
}
started=()
upstream_started=0
pids=()
work=$(mktemp -d)
# kill_tree PID: PID and every process below it (a worker's go test, its test binary and
# the coordinators and shards that one started).
kill_tree() {
  local c
  for c in $(pgrep -P "$1" || true); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
cleanup() {
  # Workers still running (an interrupt, a failure of the script itself) go first, so
  # that none keeps testing against a control plane that is being stopped.
  for pid in "${pids[@]}"; do kill_tree "$pid"; done
  rm -rf "$work"
  if [ "${KSHARD_KEEP_CLUSTER:-0}" != 1 ]; then
    if [ "$upstream_started" = 1 ]; then hack/cluster-upstream.sh down || true; fi
    for k in "${started[@]}"; do
      # shellcheck disable=SC2046
      env $(cluster_env "$k") hack/cluster.sh down || true
    done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for ((k = 1; k <= parallel; k++)); do
  # shellcheck disable=SC2046
  if ! env $(cluster_env $k) hack/cluster.sh status >/dev/null 2>&1; then
    started+=("$k") # before up: one that fails half-way is still stopped
    # shellcheck disable=SC2046
    env $(cluster_env $k) hack/cluster.sh up
  fi
done
# The differential tests (test/integration/differential, shardedrollout's reference run)
# also need the reference control plane with every upstream controller; same rule. Its
# kube-controller-manager runs every controller, so packages may share it.
if ! hack/cluster-upstream.sh status >/dev/null 2>&1; then
  upstream_started=1
  hack/cluster-upstream.sh up
fi

# Binaries the tests run as processes (coordinator, shards) are built once here.
stage "control planes up"
make --no-print-directory build
stage "binaries built"
export KSHARD_BIN_DIR=$root/bin
kubeconfig_of() {
  # shellcheck disable=SC2046
  env $(cluster_env "$1") hack/cluster.sh env | sed 's/^KUBECONFIG=//'
}
# Integration tests that read package internals carry the "integration" build tag.

# The packages, the longest first (measured on this 2-core machine) so that the last to
# start are short; the others follow in go list order.
slow=(integration/shardedrollout integration/chart integration/differential integration/sharding integration/batch chaos
  integration/namespacelife integration/contract integration/workloads integration/dashboards integration/namespace)
# test/e2e/... needs a real node (make helm-e2e runs it on a control plane of its own).
list=$(go list ./test/... | grep -v '/test/e2e/') # a package that fails to load fails the run
mapfile -t all <<<"$list"
[ "${#all[@]}" -gt 0 ] && [ -n "${all[0]}" ] || { echo "go list ./test/... found no package" >&2; exit 1; }
pkgs=()
for s in "${slow[@]}"; do
  for p in "${all[@]}"; do [[ $p == */test/"$s" ]] && pkgs+=("$p"); done
done
for p in "${all[@]}"; do
  [[ " ${pkgs[*]} " == *" $p "* ]] || pkgs+=("$p")
done
# The shard cache's own tests against the control plane: a job like the packages (an
# entry is go test's flags, if any, then one path; no path has a space).
pkgs+=("-tags integration -run Integration ./pkg/sharding/shardcache/")

echo 0 >"$work/next"
# worker K takes the next package until none is left, against control plane K. A
# package's output is printed whole when it ends, so two never interleave.
worker() {
  local k=$1 i pkg log kc rc start path jobflags
  kc=$(kubeconfig_of "$k")
  while :; do
    i=$(flock "$work/next" sh -c 'n=$(cat "$1"); echo $((n + 1)) >"$1"; echo "$n"' _ "$work/next")
    [ "$i" -lt "${#pkgs[@]}" ] || return 0
    pkg=${pkgs[$i]}
    log=$work/$i.log
    rc=0
    start=$SECONDS
    # An entry is a package path, after the job's own go test flags if it has some: those
    # go first, so that KSHARD_TEST_FLAGS still has the last word.
    path=${pkg##* } jobflags=""
    [[ $pkg != *" "* ]] || jobflags=${pkg% *}
    # shellcheck disable=SC2046,SC2086 # $jobflags is go test's flags
    env $(cluster_env "$k") KSHARD_KUBECONFIG="$kc" \
      go test -count=1 -timeout "${KSHARD_INTEGRATION_TIMEOUT:-40m}" $jobflags ${KSHARD_TEST_FLAGS:-} "$path" >"$log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || echo "$pkg" >>"$work/failed"
    printf '%5d s  %s\n' $((SECONDS - start)) "$pkg" >>"$work/walls"
    flock "$work/next.print" cat "$log"
  done
}
for ((k = 1; k <= parallel; k++)); do
  worker "$k" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || echo "worker $pid failed" >>"$work/failed"; done
pids=()
stage "packages done, on $parallel control planes; wall per package (build and test):"
if [ -s "$work/walls" ]; then sort -rn "$work/walls" | sed 's/^/  /'; fi
if [ -s "$work/failed" ]; then
  echo "integration packages that failed:" >&2
  sed 's/^/  /' "$work/failed" >&2
  exit 1
fi

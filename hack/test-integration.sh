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
started=0
if ! hack/cluster.sh status >/dev/null 2>&1; then
  hack/cluster.sh up
  started=1
fi
# The differential tests (test/integration/differential, shardedrollout's reference run)
# also need the reference control plane with every upstream controller; same rule.
upstream_started=0
if ! hack/cluster-upstream.sh status >/dev/null 2>&1; then
  hack/cluster-upstream.sh up
  upstream_started=1
fi
cleanup() {
  if [ "${KSHARD_KEEP_CLUSTER:-0}" != 1 ]; then
    if [ "$upstream_started" = 1 ]; then hack/cluster-upstream.sh down; fi
    if [ "$started" = 1 ]; then hack/cluster.sh down; fi
  fi
}
trap cleanup EXIT

# Binaries the tests run as processes (coordinator, shards) are built once here.
make --no-print-directory build
export KSHARD_BIN_DIR=$root/bin
# Integration tests that read package internals carry the "integration" build tag.
KSHARD_KUBECONFIG=$(hack/cluster.sh env | sed 's/^KUBECONFIG=//') \
  go test -count=1 -tags integration -run Integration ${KSHARD_TEST_FLAGS:-} ./pkg/sharding/shardcache/
# -p 1: packages share one control plane and the machine's cores.
go test -count=1 -p 1 -timeout "${KSHARD_INTEGRATION_TIMEOUT:-40m}" ${KSHARD_TEST_FLAGS:-} ./test/...

#!/usr/bin/env bash
# Fails when a go.mod/go.sum is not tidy or checked-in generated code is stale.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rc=0
# Every module: the product and each tools module under hack/tools.
for mod in . hack/tools/*/; do
  mod=${mod%/}
  [ -f "$root/$mod/go.mod" ] || continue
  if ! (cd "$root/$mod" && go mod tidy -diff >/tmp/kshard-tidy.diff 2>&1); then
    echo "verify: $mod/go.mod is not tidy (run 'go mod tidy' in $mod):" >&2
    cat /tmp/kshard-tidy.diff >&2
    rc=1
  fi
done
if [ -x "$root/hack/generate.sh" ]; then
  if ! "$root/hack/generate.sh" --check; then
    echo "verify: generated code is stale: run 'make generate' and commit the result" >&2
    rc=1
  fi
fi
[ $rc = 0 ] && echo "verify: ok"
exit $rc

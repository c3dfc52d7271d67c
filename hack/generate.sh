#!/usr/bin/env bash
# Regenerates the checked-in protobuf/gRPC code from proto/.
#   hack/generate.sh           write the generated files
#   hack/generate.sh --check   fail when the checked-in files differ from a fresh generation
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v protoc >/dev/null || { echo "protoc is missing: apt-get install protobuf-compiler" >&2; exit 1; }
"$root/hack/tools.sh" protoc-gen
plugins=$("$root/hack/tools.sh" path protoc-gen)

out=$root
if [ "${1:-}" = --check ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
cd "$root"
mapfile -t protos < <(find proto -name '*.proto' | sort)
PATH=$plugins:$PATH protoc -I proto -I /usr/include \
  --go_out="$out" --go_opt=module=github.com/kshard/kshard \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/kshard/kshard \
  "${protos[@]}"

if [ "${1:-}" = --check ]; then
  stale=0
  while IFS= read -r f; do
    rel=${f#"$out"/}
    if ! cmp -s "$f" "$root/$rel"; then
      echo "stale: $rel" >&2
      stale=1
    fi
  done < <(find "$out" -name '*.go')
  # A checked-in generated file with no .proto behind it is stale too.
  while IFS= read -r f; do
    [ -f "$out/$f" ] || { echo "orphaned: $f" >&2; stale=1; }
  done < <(cd "$root" && find proto -name '*.pb.go')
  exit $stale
fi

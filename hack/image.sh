#!/usr/bin/env bash
# `make image`: kshard's container image without a Docker engine. Builds both binaries
# static (CGO_ENABLED=0) for Linux, puts them in one layer on an empty base with
# go-containerregistry (hack/tools/image), and writes a tarball that `docker load -i` or
# `crane push` reads. The reference matches the Helm chart's defaults: image.repository
# kshard/kshard, tag = the chart's appVersion. Prints the tarball's path and the digest.
#
#   hack/image.sh [build|verify]
#
# KSHARD_IMAGE_REPOSITORY (default kshard/kshard), KSHARD_IMAGE_TAG (default the
# appVersion), KSHARD_IMAGE_OUT (default _output/image), GOARCH (default the host's) and
# KSHARD_IMAGE_SHARD_PACKAGE (default ./cmd/shard; a test's shard command with controllers
# of its own, e.g. ./test/cmd/audit-shard) change what is built.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kshard/Chart.yaml)
[ -n "$version" ] || { echo "image: no appVersion in charts/kshard/Chart.yaml" >&2; exit 1; }
repo=${KSHARD_IMAGE_REPOSITORY:-kshard/kshard}
out=${KSHARD_IMAGE_OUT:-$root/_output/image}
arch=${GOARCH:-$(go env GOARCH)}
image_tag=${KSHARD_IMAGE_TAG:-$version}
shard_pkg=${KSHARD_IMAGE_SHARD_PACKAGE:-./cmd/shard}
tag=$repo:$image_tag
tarball=$out/kshard-$image_tag-linux-$arch.tar
imagetool() { (cd "$root/hack/tools/image" && go run -mod=readonly . "$@"); }

case ${1:-build} in
  build)
    mkdir -p "$out/bin"
    build() {
      GOOS=linux GOARCH=$arch CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/kshard/kshard/pkg/version.Version=$version" -o "$@"
    }
    build "$out/bin/coordinator" ./cmd/coordinator
    build "$out/bin/shard" "$shard_pkg"
    imagetool build --coordinator "$out/bin/coordinator" --shard "$out/bin/shard" \
      --tag "$tag" --arch "$arch" --output "$tarball"
    ;;
  verify)
    imagetool verify --tarball "$tarball" --tag "$tag"
    ;;
  *) echo "usage: hack/image.sh [build|verify]" >&2; exit 2 ;;
esac

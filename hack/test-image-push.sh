#!/usr/bin/env bash
# Pushes the image layout with `make image-push` to a registry that crane
# serves in memory on loopback, and checks that the registry serves it under
# the layout's digest, both platforms included.
#
#   hack/test-image-push.sh dist/image
set -euo pipefail
layout=${1:?usage: hack/test-image-push.sh LAYOUT}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
crane=$work/crane
(cd "$root" && go build -modfile=hack/tools/go.mod -o "$crane" github.com/google/go-containerregistry/cmd/crane)

"$crane" registry serve --address 127.0.0.1:0 > "$work/registry.log" 2>&1 &
registry=$!
trap 'kill "$registry" 2>/dev/null; rm -rf "$work"' EXIT
port=
for _ in $(seq 50); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/registry.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "test-image-push: the registry did not start:"; cat "$work/registry.log"; exit 1; }

ref=127.0.0.1:$port/indexed-batch-job:test
make -C "$root" --no-print-directory image-push IMAGE_DIR="$layout" IMG="$ref"
want=$(grep -o 'sha256:[0-9a-f]*' "$layout/index.json")
got=$("$crane" digest "$ref")
[ "$got" = "$want" ] || { echo "test-image-push: the registry serves $got, the layout holds $want"; exit 1; }
for platform in linux/amd64 linux/arm64; do
  "$crane" config --platform "$platform" "$ref" | grep -q '"User":"65532:65532"' ||
    { echo "test-image-push: the pushed $platform image does not run as 65532:65532"; exit 1; }
done
echo "test-image-push: pushed $ref, served as $got with both platforms"

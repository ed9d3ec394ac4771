#!/usr/bin/env bash
# Checks what `make release` wrote: every artifact is there and matches
# SHA256SUMS, install.yaml and the chart run the release's image, the image
# layout carries the release's tag for both platforms, and kubectl-ibj is
# built for every platform krew installs it on.
#
#   HELM=bin/helm-v3.22.0/helm hack/check-release.sh dist/release ghcr.io/org/indexed-batch-job v0.1.0
set -euo pipefail
dir=${1:?usage: hack/check-release.sh DIR IMAGE_REPO VERSION} repo=${2:?} version=${3:?}
helm=${HELM:-helm}
fail() { echo "check-release: $*" >&2; exit 1; }

cd "$dir"
sha256sum --quiet -c SHA256SUMS || fail "SHA256SUMS does not match"
for f in install.yaml CHANGELOG.md "indexed-batch-job-${version#v}.tgz" "indexed-batch-job-image-$version.oci.tar" ibj.yaml; do
  [ -s "$f" ] || fail "missing $f"
  grep -q " $f\$" SHA256SUMS || fail "$f is not in SHA256SUMS"
done
for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64 windows_amd64; do
  archive=kubectl-ibj_${version}_$platform.tar.gz
  [ -s "$archive" ] || fail "missing $archive"
  tar -tzf "$archive" | grep -qx 'kubectl-ibj\(.exe\)\?' || fail "$archive holds no kubectl-ibj"
  grep -q "sha256: $(sha256sum "$archive" | cut -d' ' -f1)" ibj.yaml || fail "ibj.yaml lacks the sum of $archive"
done

images=$(grep -o 'image: .*' install.yaml | sort -u)
[ "$images" = "image: $repo:$version" ] || fail "install.yaml runs $images, want $repo:$version"
chart_images=$("$helm" template r "indexed-batch-job-${version#v}.tgz" | grep -o 'image: .*' | sort -u)
[ "$chart_images" = "image: \"$repo:$version\"" ] || fail "the chart runs $chart_images, want $repo:$version"
"$helm" show chart "indexed-batch-job-${version#v}.tgz" | grep -qx "appVersion: $version" || fail "the chart's appVersion is not $version"

layout=$(mktemp -d); trap 'rm -rf "$layout"' EXIT
tar -C "$layout" -xf "indexed-batch-job-image-$version.oci.tar"
grep -q "\"org.opencontainers.image.ref.name\": *\"$version\"" "$layout/index.json" || fail "the image layout is not tagged $version"
echo "check-release: $dir holds release $version ($(wc -l < SHA256SUMS) files, image $repo:$version)"

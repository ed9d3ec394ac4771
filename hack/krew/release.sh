#!/usr/bin/env bash
# Builds the release archives of kubectl-ibj that hack/krew/ibj.yaml names,
# into dist/krew/, and renders the manifest with their sha256 sums into
# dist/krew/ibj.yaml, for a release made without krew-release-bot.
#
#   hack/krew/release.sh v0.3.0
#
# Upload dist/krew/*.tar.gz to the GitHub release of that tag; then test the
# manifest with `kubectl krew install --manifest=dist/krew/ibj.yaml
# --archive=dist/krew/kubectl-ibj_v0.3.0_linux_amd64.tar.gz` and submit it to
# krew-index.
set -euo pipefail
tag=${1:?usage: hack/krew/release.sh vX.Y.Z}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/dist/krew
rm -rf "$out" && mkdir -p "$out"
manifest=$(cat "$root/hack/krew/ibj.yaml")
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64; do
  os=${platform%/*} arch=${platform#*/}
  bin=kubectl-ibj; [ "$os" = windows ] && bin=kubectl-ibj.exe
  work=$(mktemp -d)
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags="-s -w" -o "$work/$bin" ./cmd/kubectl-ibj)
  archive=kubectl-ibj_${tag}_${os}_${arch}.tar.gz
  tar -C "$work" -czf "$out/$archive" "$bin"
  rm -rf "$work"
  sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
  url="https://github.com/indexed-batch-job/indexed-batch-job/releases/download/$tag/$archive"
  # {{addURIAndSha "…/<archive>" .TagName }} -> uri and sha256 of this archive.
  manifest=$(printf '%s\n' "$manifest" | awk -v a="${os}_${arch}.tar.gz" -v url="$url" -v sha="$sha" '
    index($0, "addURIAndSha") && index($0, a) { match($0, /^ */); pad = substr($0, 1, RLENGTH)
      print pad "uri: " url; print pad "sha256: " sha; next } { print }')
  echo "built $archive ($sha)"
done
printf '%s\n' "$manifest" | sed -e "s/{{ .TagName }}/$tag/g" | grep -v '^#' > "$out/ibj.yaml"
echo "wrote $out/ibj.yaml"

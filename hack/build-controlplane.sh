#!/usr/bin/env bash
# Builds the pinned test control plane (etcd, kube-apiserver, kubectl and,
# on request, kube-controller-manager) from the Go module proxy into
# bin/k8s/<version>/, the directory envtest's KUBEBUILDER_ASSETS points at.
# A binary already there is kept: the first build takes minutes on 2 cores.
#
# usage: hack/build-controlplane.sh [etcd] [kube-apiserver] [kubectl] [kube-controller-manager]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=v1.36.3  # keep in step with hack/controlplane/go.mod
out="$root/bin/k8s/$k8s_version"
mkdir -p "$out"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(etcd kube-apiserver kubectl)

# Version stamps, so `kube-apiserver --version` and the /version endpoint
# tell the truth instead of v0.0.0-master.
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

for t in "${targets[@]}"; do
  if [ -x "$out/$t" ]; then
    continue
  fi
  start=$(date +%s)
  echo "building $t ($k8s_version) into $out; the first build takes a few minutes..." >&2
  case "$t" in
    etcd)
      (cd "$root/hack/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" .) ;;
    kube-apiserver|kubectl|kube-controller-manager)
      (cd "$root/hack/controlplane" && go build -trimpath -ldflags "$ldflags" -o "$out/$t.tmp" "./cmd/$t") ;;
    *) echo "unknown control plane binary: $t" >&2; exit 2 ;;
  esac
  mv "$out/$t.tmp" "$out/$t"
  echo "built $t in $(( $(date +%s) - start ))s" >&2
done

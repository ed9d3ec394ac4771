#!/usr/bin/env bash
# Builds the pinned test control plane (etcd, kube-apiserver, kubectl and,
# on request, kube-controller-manager) from the Go module proxy into
# bin/k8s/<version>/, the directory envtest's KUBEBUILDER_ASSETS points at.
# A binary already there is kept: the first build takes minutes on 2 cores.
#
# K8S_VERSION picks the Kubernetes version (default v1.36.3, the newest
# supported); the module that builds it is the hack/controlplane*/ whose
# go.mod requires that k8s.io/kubernetes: hack/controlplane for the newest,
# hack/controlplane-v1.<minor> for the older ones of the supported-versions
# matrix (make test-compat). etcd is the same for every version.
#
# usage: [K8S_VERSION=v1.X.Y] hack/build-controlplane.sh [etcd] [kube-apiserver] [kubectl] [kube-controller-manager]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=${K8S_VERSION:-v1.36.3}  # the default: keep in step with hack/controlplane/go.mod
module=
for mod in "$root"/hack/controlplane*/go.mod; do
  if grep -qE "^[[:space:]]*k8s.io/kubernetes $k8s_version\$" "$mod"; then
    module=$(dirname "$mod")
  fi
done
if [ -z "$module" ]; then
  echo "no hack/controlplane*/go.mod requires k8s.io/kubernetes $k8s_version" >&2
  exit 2
fi
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
      if [ ! -d "$module/cmd/$t" ]; then
        echo "$module does not build $t" >&2; exit 2
      fi
      (cd "$module" && go build -trimpath -ldflags "$ldflags" -o "$out/$t.tmp" "./cmd/$t") ;;
    *) echo "unknown control plane binary: $t" >&2; exit 2 ;;
  esac
  mv "$out/$t.tmp" "$out/$t"
  echo "built $t in $(( $(date +%s) - start ))s" >&2
done

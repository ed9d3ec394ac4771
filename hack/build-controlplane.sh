#!/usr/bin/env bash
# Builds the pinned test control plane (etcd, kube-apiserver, kubectl and,
# on request, kube-controller-manager, kube-scheduler and kubelet) from the Go module proxy into
# bin/k8s/<version>/, the directory envtest's KUBEBUILDER_ASSETS points at.
# A binary already there is kept: the first build takes minutes on 2 cores.
#
# K8S_VERSION picks the Kubernetes version (default v1.37.2, the newest
# supported); the module that builds it is the hack/controlplane*/ whose
# go.mod requires that k8s.io/kubernetes: hack/controlplane for the newest,
# hack/controlplane-v1.<minor> for the older ones of the supported-versions
# matrix (make test-compat), hack/controlplane-next for the next minor's
# pre-release (make test-full). Each module builds the etcd its Kubernetes
# version requires (go.etcd.io/etcd/server/v3 in k8s.io/kubernetes's
# go.mod), in the same go build as the Kubernetes binaries.
#
# kubelet, kube-scheduler and kube-proxy are built for the node cluster (make
# node-cluster), from the newest version's module only.
#
# usage: [K8S_VERSION=v1.X.Y] hack/build-controlplane.sh [etcd] [kube-apiserver] [kubectl] [kube-controller-manager] [kube-scheduler] [kubelet] [kube-proxy]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=${K8S_VERSION:-v1.37.2}  # the default: keep in step with hack/controlplane/go.mod
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

# What is missing. One go build makes every binary: they share most of
# their packages (etcd's gRPC, protobuf and OpenTelemetry ones with
# kube-apiserver), which one build compiles once.
k8s=()
for t in "${targets[@]}"; do
  [ -x "$out/$t" ] && continue
  case "$t" in
    etcd|kube-apiserver|kubectl|kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
      if [ ! -d "$module/cmd/$t" ]; then
        echo "$module does not build $t" >&2; exit 2
      fi
      k8s+=("$t") ;;
    *) echo "unknown control plane binary: $t" >&2; exit 2 ;;
  esac
done

[ ${#k8s[@]} -gt 0 ] || exit 0

# A module may need a newer Go than the installed one: the next minor's
# Kubernetes requires the Go that comes out with it. Such a module builds with
# the toolchain its go.mod names (its toolchain line, else its go line), which
# GOTOOLCHAIN makes the go command fetch from the module proxy, for this build
# only; every other module builds with the installed Go.
gotoolchain=
want=$(awk '$1 == "toolchain" { print $2; exit }' "$module/go.mod")
[ -n "$want" ] || want=go$(awk '$1 == "go" { print $2; exit }' "$module/go.mod")
if [[ $want =~ ^go[0-9]+\.[0-9]+$ ]]; then want+=.0; fi  # a go line "1.N" means go1.N.0
have=$(go env GOVERSION)
if [ "$(printf '%s\n' "${have#go}" "${want#go}" | sort -V | tail -n 1)" != "${have#go}" ]; then
  gotoolchain=$want
fi
start=$(date +%s)
echo "building ${k8s[*]} ($k8s_version${gotoolchain:+, with $gotoolchain}) into $out; the first build takes a few minutes..." >&2
tmp="$out/.build.tmp"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for t in "${k8s[@]}"; do pkgs+=("./cmd/$t"); done
(cd "$module" && if [ -n "$gotoolchain" ]; then export GOTOOLCHAIN=$gotoolchain; fi &&
  go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
for t in "${k8s[@]}"; do mv "$tmp/$t" "$out/$t"; done
echo "built ${k8s[*]} in $(( $(date +%s) - start ))s" >&2

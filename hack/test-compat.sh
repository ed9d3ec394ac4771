#!/usr/bin/env bash
# The supported-versions matrix (make test-compat). For each version of
# COMPAT_VERSIONS (the oldest supported and the newest; make test-full adds
# the next minor's pre-release): build its control plane once
# (hack/build-controlplane.sh), then run against it the CRD validation suite,
# the CRD's floor test and the e2e seed example with the operator binary.
# Then, for COMPAT_BELOW (one minor below the oldest supported; empty skips
# it), run the floor test alone: there the CRD must be refused, for the reason
# docs/versions.md gives. COMPAT_FULL=1 runs every integration suite and the
# whole e2e suite instead, at each version.
#
# usage: COMPAT_VERSIONS="v1.33.13 v1.37.2" COMPAT_BELOW=v1.32.13 [COMPAT_FULL=1] hack/test-compat.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
read -r -a versions <<<"${COMPAT_VERSIONS:?COMPAT_VERSIONS lists the Kubernetes versions to test}"
below=${COMPAT_BELOW:-}
integration=(./test/integration/validation ./test/integration/compat)
e2e=(-ginkgo.label-filter=seed -ginkgo.fail-on-empty)
what="CRD validation suite and floor test"
e2e_what="e2e seed example"
if [ -n "${COMPAT_FULL:-}" ]; then
  integration=(./test/integration/...)
  e2e=()
  what="every integration suite"
  e2e_what="whole e2e suite"
fi

step() { echo; echo "=== test-compat: $*"; }

for v in "${versions[@]}"; do
  step "$v: control plane"
  bins=(etcd kube-apiserver kubectl)
  minor=${v#v1.}; minor=${minor%%.*}
  # The whole e2e suite's gang specs run kube-scheduler from 1.37 on.
  if [ -n "${COMPAT_FULL:-}" ] && [ "$minor" -ge 37 ]; then bins+=(kube-scheduler); fi
  K8S_VERSION=$v hack/build-controlplane.sh "${bins[@]}"
  export KUBEBUILDER_ASSETS=$root/bin/k8s/$v IBJ_K8S_VERSION=$v

  step "$v: $what"
  go test -count=1 -timeout 40m -v "${integration[@]}"

  step "$v: $e2e_what (the operator binary on kwok)"
  # The suite builds the operator (and the plugin) itself; --fail-on-empty
  # keeps a renamed label from passing with no spec run.
  IBJ_E2E=1 go test -count=1 -timeout 30m -v ./test/e2e "${e2e[@]}" -ginkgo.v
done

if [ -n "$below" ]; then
  step "$below (below the supported range): the CRD must be refused"
  K8S_VERSION=$below hack/build-controlplane.sh etcd kube-apiserver
  KUBEBUILDER_ASSETS=$root/bin/k8s/$below IBJ_K8S_VERSION=$below \
    go test -count=1 -v -run TestCRDInstallsFromTheOldestSupportedMinorAndIsRefusedBelow ./test/integration/compat
fi
step "passed: ${versions[*]}${below:+; CRD refused at $below}"

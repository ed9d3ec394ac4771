#!/usr/bin/env bash
# `make demo NODE=real`: the seed's per-index example on real containers.
# It starts the cluster of `make node-cluster` (bin/node-cluster: etcd,
# kube-apiserver, kube-controller-manager and kube-scheduler, and NODES
# nodes, each a kubelet on a containerd of its own and runc and a
# kube-proxy, in a network namespace of its own; see
# test/harness/nodecluster), installs the operator as users do, with
# kubectl apply of an install.yaml naming its image (imported into
# containerd, as nothing is pulled here), runs the per-index sample with the
# worker image of test/nodeimages/worker in place of busybox, and shows the
# job live, the pods' exit codes as the kubelet reported them, an index's
# logs and `kubectl ibj indexes`. It needs root. Everything it started stops
# when it ends or on Ctrl-C; with KEEP=1 a demo that finished leaves the
# cluster running and says how to use and stop it.
#
# The Makefile builds and installs what it needs first; run alone, it
# expects bin/node-cluster, bin/kubectl-ibj, the binaries of make
# node-binaries and the images of make node-images.
#
# Environment: KEEP=1, NODES (default 2), DEMO_DIR (state and logs; default a new temp dir),
# DEMO_TIMEOUT (seconds the job may take; default 180), NODE_IMAGES
# (default dist/node-images), LOCALBIN, K8S_VERSION.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
k8s_version=${K8S_VERSION:-v1.37.2}
bin=${LOCALBIN:-$root/bin}
kubectl="${KUBEBUILDER_ASSETS:-$bin/k8s/$k8s_version}/kubectl"
images=${NODE_IMAGES:-$root/dist/node-images}
keep=${KEEP:-0}
nodes=${NODES:-2}
timeout=${DEMO_TIMEOUT:-180}
job=per-index

# shellcheck source=hack/demo/lib.sh
. "$root/hack/demo/lib.sh"

[ "$(id -u)" = 0 ] || die "the node cluster needs root (the kubelet, containerd, a network namespace)"
for f in "$bin/node-cluster" "$bin/kubectl-ibj" "$kubectl" "$images/install.yaml"; do
  [ -e "$f" ] || die "$f is missing: run \`make demo NODE=real\`, which builds it"
done

created_dir=0
if [ -z "${DEMO_DIR:-}" ]; then
  DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ibj-node-demo.XXXXXX")
  created_dir=1
fi
dir=$DEMO_DIR
mkdir -p "$dir"
export KUBECONFIG="$dir/kubeconfig"
export PATH="$bin:$PATH" # kubectl ibj

cluster_pid= watch_pid= aborted=0 started=$(date +%s)

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  [ -z "$watch_pid" ] || kill "$watch_pid" 2>/dev/null || true
  if [ "$keep" = 1 ] && [ "$aborted" = 0 ] && [ "$status" = 0 ]; then
    say "KEEP=1: the cluster keeps running"
    cat <<EOF
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  export PATH=$bin:\$PATH        # the kubectl plugin, bin/kubectl-ibj
  kubectl get ibj,pods -o wide
  kubectl ibj indexes $job
  kubectl -n indexed-batch-job-system logs deployment/indexed-batch-job-controller-manager
Logs: $dir/*.log (the control plane), $dir/ibj-node-*/*.log (each node's), $dir/cluster.out
Stop everything (containers, mounts and the network namespace go with it) with:
  kill $cluster_pid
EOF
    exit 0
  fi
  # shellcheck disable=SC2086 # the pid if set, unquoted
  stop_all "$status" "the cluster" $cluster_pid
}
trap cleanup EXIT
trap 'aborted=1; exit 130' INT TERM

say "Starting a cluster of $nodes nodes on real containers (state and logs in $dir)"
start_cluster 300 "$bin/node-cluster" --dir "$dir" --root "$root" --images "$images" --nodes "$nodes"
"$kubectl" get nodes -o wide

say "Installing the operator: kubectl apply --server-side -f $images/install.yaml"
"$kubectl" apply --server-side -f "$images/install.yaml" | sed 's/^/  /'
"$kubectl" -n indexed-batch-job-system rollout status deployment/indexed-batch-job-controller-manager --timeout=180s
"$kubectl" -n indexed-batch-job-system get pods -o wide

manifest="$dir/$job.yaml"
cat >"$manifest" <<EOF
# The per-index sample (config/samples/batch_v1alpha1_indexedbatchjob.yaml)
# on real containers: the worker image exits 1 for indexes 1 and 2 and 0 for
# the others, after 2s.
apiVersion: batch.indexedjob.dev/v1alpha1
kind: IndexedBatchJob
metadata:
  name: $job
spec:
  completions: 8
  parallelism: 2
  backoffLimitPerIndex: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: example
        image: ibj.local/worker:v1
        args: ["--duration=2s", "--fail-indexes=1,2", "--exit-code=1"]
EOF
say "Applying $manifest"
cat "$manifest"
# The webhook answers once the operator has issued its certificate.
deadline=$(( $(date +%s) + 120 ))
until out=$("$kubectl" apply -f "$manifest" 2>&1); do
  [ "$(date +%s)" -lt "$deadline" ] || die "the admission webhook did not answer within 120s: $out"
  sleep 1
done
echo "$out"

say "Watching it (kubectl get ibj -o wide -w)"
watch_job "$job" "$timeout"

say "Finished: $phase after $(elapsed)"
echo "\$ kubectl get pods -l batch.indexedjob.dev/job-name=$job   (as the kubelet reported them)"
"$kubectl" get pods -l "batch.indexedjob.dev/job-name=$job" \
  -o custom-columns='NAME:.metadata.name,INDEX:.metadata.labels.batch\.indexedjob\.dev/completion-index,PHASE:.status.phase,EXIT-CODE:.status.containerStatuses[0].state.terminated.exitCode,NODE:.spec.nodeName,IP:.status.podIP'
echo
echo "\$ kubectl logs $job-1-1"
"$kubectl" logs "$job-1-1"
echo
echo "\$ kubectl ibj indexes $job"
kubectl-ibj indexes "$job"

say "Final status"
"$kubectl" get ibj "$job" -o yaml | sed -n '/^status:/,$p'

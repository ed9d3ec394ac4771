#!/usr/bin/env bash
# `make demo-multikueue`: one IndexedBatchJob through Kueue's MultiKueue, on
# three throwaway clusters on loopback (bin/multikueue-cluster, see
# test/harness/multikueue): a manager cluster and two workers, each with
# fake nodes (kwok), kube-controller-manager's garbage collector, Kueue's
# released manager and the operator (bin/manager). It creates
# config/samples/kueue/multikueue/train-remote.yaml on the manager and
# shows `kubectl get ibj` on the manager beside the worker's as the job
# runs there, then the final status of both. Everything stops when it ends
# or on Ctrl-C; with KEEP=1 a demo that finished leaves the clusters
# running and says how to use and stop them. Needs root (Kueue's manager
# runs chrooted, as its image would).
#
# Environment: KEEP=1, DEMO_DIR (state and logs; default a new temp dir),
# DEMO_TIMEOUT (seconds the job may take; default 180), K8S_VERSION,
# LOCALBIN (default bin/), KUEUE_MANAGER (Kueue's manager binary),
# KUBEBUILDER_ASSETS (the control plane; default bin/k8s/<version>).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
k8s_version=${K8S_VERSION:-v1.37.2}
bin=${LOCALBIN:-$root/bin}
kubectl="${KUBEBUILDER_ASSETS:-$bin/k8s/$k8s_version}/kubectl"
kueue_manager=${KUEUE_MANAGER:-$bin/kueue-$(go list -m -f '{{.Version}}' sigs.k8s.io/kueue)/kueue}
sample=config/samples/kueue/multikueue/train-remote.yaml
job=train-remote
ns=team-a
keep=${KEEP:-0}
timeout=${DEMO_TIMEOUT:-180}

# shellcheck source=hack/demo/lib.sh
. "$root/hack/demo/lib.sh"

for f in "$bin/multikueue-cluster" "$bin/manager" "$kubectl" "$kueue_manager"; do
  [ -x "$f" ] || die "$f is missing: run \`make demo-multikueue\`, which builds it"
done
[ "$(id -u)" = 0 ] || die "Kueue's manager runs chrooted, as its image would: run as root"

created_dir=0
if [ -z "${DEMO_DIR:-}" ]; then
  DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ibj-multikueue-demo.XXXXXX")
  created_dir=1
fi
dir=$DEMO_DIR
mkdir -p "$dir"
cluster_pid= watch_pid= aborted=0 started=$(date +%s)

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ "$keep" = 1 ] && [ "$aborted" = 0 ] && [ "$status" = 0 ]; then
    say "KEEP=1: the clusters keep running"
    cat <<EOT
  alias kubectl=$kubectl
  kubectl --kubeconfig $dir/manager/kubeconfig -n $ns get ibj,workloads
  kubectl --kubeconfig $dir/worker-1/kubeconfig -n $ns get ibj,workloads,pods
  kubectl --kubeconfig $dir/manager/kubeconfig get multikueueclusters,admissionchecks
Logs: $dir/<cluster>/{manager.log,kueue.log,kube-apiserver.log}
Stop everything with:
  kill $cluster_pid && rm -rf $dir
EOT
    exit 0
  fi
  # shellcheck disable=SC2086 # the pid if set, unquoted
  stop_all "$status" "the clusters" $cluster_pid
}
trap cleanup EXIT
trap 'aborted=1; exit 130' INT TERM

say "Starting a manager cluster and two workers, each with Kueue and the operator (state and logs in $dir)"
start_cluster 600 "$bin/multikueue-cluster" --dir "$dir" --root "$root" --kueue "$kueue_manager" --operator "$bin/manager" --namespace "$ns"
mgr=("$kubectl" --kubeconfig "$dir/manager/kubeconfig")
echo "\$ kubectl get multikueueclusters,admissionchecks   # on the manager"
"${mgr[@]}" get multikueueclusters,admissionchecks

say "Creating $sample on the manager"
"${mgr[@]}" apply -f "$sample"
echo "\$ kubectl get ibj $job -n $ns -o jsonpath='{.spec.managedBy}'   # set by the manager's admission webhook"
"${mgr[@]}" get ibj "$job" -n "$ns" -o jsonpath='{.spec.managedBy}'; echo

say "Watching the job on the manager and on the worker MultiKueue dispatched it to"
deadline=$(( $(date +%s) + timeout ))
worker= last= worker_status=
columns=NAME:.metadata.name,STATUS:.status.phase,ACTIVE:.status.active,COMPLETED:.status.completedIndexes,FAILED-INDEXES:.status.failedIndexes,MANAGED-BY:.spec.managedBy
while :; do
  if [ -z "$worker" ]; then
    for w in worker-1 worker-2; do
      if "$kubectl" --kubeconfig "$dir/$w/kubeconfig" get ibj "$job" -n "$ns" >/dev/null 2>&1; then worker=$w; fi
    done
  fi
  # An assignment from a failed command substitution fails, and set -e
  # would end the demo: each read that may fail ends in `|| true`. The
  # worker's copy goes once the job finished (MultiKueue deletes it), often
  # before the manager's copy shows the end: its read then fails, and the
  # row says NotFound.
  now="manager:  $("${mgr[@]}" get ibj "$job" -n "$ns" --no-headers -o custom-columns="$columns" 2>&1 || true)"
  if [ -n "$worker" ]; then
    now+=$'\n'"$worker: $("$kubectl" --kubeconfig "$dir/$worker/kubeconfig" get ibj "$job" -n "$ns" --no-headers -o custom-columns="$columns" 2>&1 || true)"
    # Keep the last status of the worker's copy.
    if status=$("$kubectl" --kubeconfig "$dir/$worker/kubeconfig" get ibj "$job" -n "$ns" -o jsonpath='{.status}' 2>/dev/null) && [ -n "$status" ]; then
      worker_status=$status
    fi
  fi
  if [ "$now" != "$last" ]; then
    printf '%s  ---- %s\n%s\n' "$bold" "$(elapsed)$reset" "$now"
    last=$now
  fi
  phase=$("${mgr[@]}" get ibj "$job" -n "$ns" -o jsonpath='{.status.phase}' 2>/dev/null || true)
  case "$phase" in Complete|Failed) break ;; esac
  [ "$(date +%s)" -lt "$deadline" ] || die "the job did not finish within ${timeout}s; see $dir"
  sleep 0.5
done

say "Finished after $(elapsed)"
[ -n "$worker" ] || die "no worker had a copy of the job; see $dir"
echo "\$ kubectl get ibj -n $ns -o wide   # on the manager"
"${mgr[@]}" get ibj -n "$ns" -o wide
echo "\$ kubectl get pods -n $ns   # on the manager: none, the job ran on $worker"
"${mgr[@]}" get pods -n "$ns"
echo "\$ kubectl get ibj,pods -n $ns   # on $worker: MultiKueue deleted its copy once the job finished, and its pods went with it"
"$kubectl" --kubeconfig "$dir/$worker/kubeconfig" get ibj,pods -n "$ns"
echo
echo "The manager's .status, and the last .status of $worker's copy the demo saw:"
manager_status=$("${mgr[@]}" get ibj "$job" -n "$ns" -o jsonpath='{.status}')
echo "  manager:  $manager_status"
echo "  $worker: $worker_status"
if [ "$manager_status" = "$worker_status" ]; then
  echo "  the same: MultiKueue mirrored the worker's whole status"
else
  echo "  they differ: the demo's polls (every 0.5s) missed the worker's last status before its copy went"
fi

# The demo is a test: it passes only when the manager's copy ended as the
# sample must (six indexes of 3s, none failing) and ran on a worker.
got=$("${mgr[@]}" get ibj "$job" -n "$ns" -o go-template='{{range .status.conditions}}{{if and (eq .status "True") (or (eq .type "Failed") (eq .type "Complete"))}}{{.type}}/{{.reason}}{{end}}{{end}}: completedIndexes "{{.status.completedIndexes}}", failedIndexes "{{or .status.failedIndexes ""}}", succeeded {{.status.succeeded}}, failed {{.status.failed}}')
want='Complete/CompletionsReached: completedIndexes "0-5", failedIndexes "", succeeded 6, failed 0'
echo "  manager: $got"
[ "$got" = "$want" ] || die "the manager's copy ended with $got, not $want"
[ -z "$("${mgr[@]}" get pods -n "$ns" -l "batch.indexedjob.dev/job-name=$job" -o name)" ] || die "pods of the job ran on the manager"
echo "  as expected: Complete on the manager, run on $worker"

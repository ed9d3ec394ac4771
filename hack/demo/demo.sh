#!/usr/bin/env bash
# `make demo`: the seed's per-index example, end to end, on a throwaway
# cluster on loopback. It starts etcd, kube-apiserver, two fake nodes whose
# pods the test harness's pod simulator runs as their annotations say (the
# same annotations kwok's stages read in the e2e suite) and a binder
# (bin/kwok-cluster --kubelets podsim, see test/harness/kwokcluster), then the operator
# binary (bin/manager) serving its admission webhook, shows a copy of
# config/samples/batch_v1alpha1_indexedbatchjob.yaml with an invalid pod
# template refused, applies the sample, shows the job live and prints its
# final status, its failure record by node (kubectl ibj nodes), and, once
# every pod of it is deleted, why its indexes failed (kubectl ibj
# describe); then does the same with
# config/samples/batch_v1alpha1_indexedbatchjob_restart.yaml, a group of pods
# restarted together once (status.restarts 1, the RESTARTS column of
# kubectl get ibj -o wide); then with hack/demo/retry_in_place.yaml, a
# retry InPlace rule: the failing index keeps its one pod, its container
# restarted in place by its restart rules, until its failures go over
# backoffLimitPerIndex (the demo dies if the index gets a second pod or its
# pod fails at the first exit). Everything it started stops
# when it ends or on Ctrl-C; with KEEP=1 a demo that finished leaves the
# cluster and the operator running and says how to use and stop them.
#
# The Makefile builds the binaries first (`make demo`); run alone, the script
# expects bin/kwok-cluster, bin/manager and the control
# plane in bin/k8s/<version>.
#
# With DEMO_KUEUE=1 (`make demo-kueue`) it shows the Kueue integration instead:
# it installs Kueue's CRDs from the Go module cache (the version go.mod pins)
# before the operator starts, runs Kueue itself (bin/kueue-demo, Kueue's
# controllers and scheduler in one process: test/harness/cmd/kueue-demo),
# creates the queues of config/samples/kueue/queues.yaml and the jobs of
# config/samples/kueue/train-a.yaml and train-b.yaml, one after the other,
# and shows the first admitted, the second suspended and waiting for quota
# until the first gives some back, then both finishing.
#
# With DEMO_GANG=1 (`make demo GANG=1`) the cluster serves Kubernetes 1.37's
# Workload API and places pods with the real kube-scheduler on kwok's nodes
# (bin/kwok-cluster --kubelets kwok --workload-api), and the job is
# config/samples/batch_v1alpha1_indexedbatchjob_gang.yaml: its PodGroup and
# Workload, and its pods bound four at once.
#
# Environment: KEEP=1, DEMO_KUEUE=1, DEMO_GANG=1, DEMO_DIR (state and logs; default a new temp dir),
# DEMO_TIMEOUT (seconds the job may take; default 180), K8S_VERSION, LOCALBIN
# (where the binaries are; default bin/), KUBEBUILDER_ASSETS (the control
# plane; default bin/k8s/<version>).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
k8s_version=${K8S_VERSION:-v1.37.2}
bin=${LOCALBIN:-$root/bin}
kubectl="${KUBEBUILDER_ASSETS:-$bin/k8s/$k8s_version}/kubectl"
sample=config/samples/batch_v1alpha1_indexedbatchjob.yaml
job=per-index
# The second job of the plain demo (not with DEMO_GANG=1 or DEMO_KUEUE=1).
restart_sample=config/samples/batch_v1alpha1_indexedbatchjob_restart.yaml
restart_job=restart-group
restart_ran=0
# The third: a retry InPlace rule (plain demo only).
in_place_sample=hack/demo/retry_in_place.yaml
in_place_job=retry-in-place
in_place_ran=0
keep=${KEEP:-0}
kueue=${DEMO_KUEUE:-0}
gang=${DEMO_GANG:-0}
cluster_args=(--kubelets podsim)
if [ "$gang" = 1 ]; then
  # The gang sample on a cluster that serves the Workload API, its pods
  # placed by the real kube-scheduler on kwok's nodes.
  sample=config/samples/batch_v1alpha1_indexedbatchjob_gang.yaml
  job=train
  cluster_args=(--kubelets kwok --workload-api)
fi
timeout=${DEMO_TIMEOUT:-180}

# shellcheck source=hack/demo/lib.sh
. "$root/hack/demo/lib.sh"

need=("$bin/kwok-cluster" "$bin/manager" "$kubectl")
if [ "$kueue" = 1 ]; then need+=("$bin/kueue-demo"); fi
for f in "${need[@]}"; do
  [ -x "$f" ] || die "$f is missing: run \`make demo\` (or \`make demo-kueue\`), which builds it"
done

created_dir=0
if [ -z "${DEMO_DIR:-}" ]; then
  DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ibj-demo.XXXXXX")
  created_dir=1
fi
dir=$DEMO_DIR
mkdir -p "$dir"
export KUBECONFIG="$dir/kubeconfig"

cluster_pid= manager_pid= kueue_pid= watch_pid= aborted=0 started=$(date +%s)

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  [ -z "$watch_pid" ] || kill "$watch_pid" 2>/dev/null || true
  if [ "$keep" = 1 ] && [ "$aborted" = 0 ] && [ "$status" = 0 ]; then
    say "KEEP=1: the cluster and the operator keep running"
    cat <<EOF
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  kubectl get ibj,pods -o wide
  kubectl describe ibj $job
  export PATH=$bin:\$PATH        # the kubectl plugin, bin/kubectl-ibj
  kubectl ibj indexes $job --failed
  kubectl ibj rerun $job --failed
  kubectl delete ibj $job && kubectl apply -f $sample
EOF
    if [ "$restart_ran" = 1 ]; then
      cat <<EOF
  kubectl get ibj -o wide             # the RESTARTS column
  kubectl ibj indexes $restart_job     # each index's generation (restart-attempt)
  kubectl ibj describe $restart_job
  kubectl delete ibj $restart_job && kubectl apply -f $restart_sample
                                      # the restart sample again: index 2 exits 3,
                                      # every pod restarts together, once
EOF
    fi
    if [ "$in_place_ran" = 1 ]; then
      cat <<EOF
  kubectl ibj indexes $in_place_job    # IN-PLACE: each index's restarts in place
  kubectl delete ibj $in_place_job && kubectl apply -f $in_place_sample
  kubectl get pods -l batch.indexedjob.dev/job-name=$in_place_job -w
                                      # the retry InPlace job again: index 1
                                      # keeps one pod, its RESTARTS growing
EOF
    fi
    cat <<EOF
  sed 's/name: per-index/name: refused/; s/- name: example/- name: Example_1/' $sample | kubectl apply -f -
                                      # an invalid pod template: refused by the
                                      # admission webhook, the field named
  kubectl apply -k config/samples     # all the samples; pod templates script
                                      # the fake kubelet with the annotations
                                      # in hack/kwok/stages/pods.yaml
Logs: $dir/manager.log (operator), $dir/cluster.out, $dir/binder-reaper.log, $dir/kube-apiserver.log
Stop everything with:
  kill $manager_pid $kueue_pid $cluster_pid && rm -rf $dir
EOF
    exit 0
  fi
  # shellcheck disable=SC2086 # the pids that are set, unquoted
  stop_all "$status" "the operator and the cluster" $manager_pid $kueue_pid $cluster_pid
}
trap cleanup EXIT
trap 'aborted=1; exit 130' INT TERM

say "Starting a throwaway cluster on loopback (state and logs in $dir)"
start_cluster 120 "$bin/kwok-cluster" --dir "$dir" --root "$root" "${cluster_args[@]}"
detach=()
if [ "$keep" = 1 ] && command -v setsid >/dev/null; then detach=(setsid); fi
"$kubectl" get nodes

if [ "$kueue" = 1 ]; then
  kueue_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  say "Installing Kueue's CRDs ($(go list -m -f '{{.Path}} {{.Version}}' sigs.k8s.io/kueue), from the Go module cache)"
  "$kubectl" apply --server-side -f "$kueue_dir/config/components/crd/bases" >/dev/null
  "$kubectl" wait --for condition=established --timeout=60s -f "$kueue_dir/config/components/crd/bases"
  say "Starting Kueue (bin/kueue-demo, log in $dir/kueue.log), with"
  echo "  integrations.externalFrameworks: [IndexedBatchJob.v1alpha1.batch.indexedjob.dev]"
  ${detach[@]+"${detach[@]}"} "$bin/kueue-demo" >"$dir/kueue.log" 2>&1 &
  kueue_pid=$!
fi

# A port for the health probe: the first of a range nothing listens on.
probe_port=
for port in $(seq 18081 18181); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then probe_port=$port; break; fi
done
[ -n "$probe_port" ] || die "no free port for the operator's health probe"

say "Starting the operator (bin/manager, log in $dir/manager.log)"
# A 1s pod failure backoff (10s by default) keeps the retries of the demo short.
# The admission webhook, as the manifests run it: the cluster calls it at
# https://localhost:<port>, and kwok-cluster wrote the flags that serve it there.
mapfile -t webhook_args <"$dir/webhook-args"
manager_args=(--metrics-bind-address=0 "--health-probe-bind-address=127.0.0.1:$probe_port"
  --pod-failure-backoff=1s --pod-failure-backoff-max=10s "${webhook_args[@]}")
echo "  bin/manager ${manager_args[*]}"
${detach[@]+"${detach[@]}"} "$bin/manager" "${manager_args[@]}" >"$dir/manager.log" 2>&1 &
manager_pid=$!
readyz() (
  exec 3<>"/dev/tcp/127.0.0.1/$probe_port" || exit 1
  printf 'GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  read -r line <&3 || true
  [[ $line == *" 200 "* ]]
)
deadline=$(( $(date +%s) + 60 ))
until readyz 2>/dev/null; do
  kill -0 "$manager_pid" 2>/dev/null || { tail -20 "$dir/manager.log" >&2; manager_pid=; die "the operator exited"; }
  [ "$(date +%s)" -lt "$deadline" ] || die "the operator was not ready within 60s; see $dir/manager.log"
  sleep 0.2
done
echo "  ready (pid $manager_pid)"

if [ "$kueue" = 1 ]; then
  until grep -q "Kueue's API is served" "$dir/manager.log"; do
    kill -0 "$manager_pid" 2>/dev/null || die "the operator exited; see $dir/manager.log"
    sleep 0.2
  done
  grep -o "Kueue's API is served.*queued by Kueue" "$dir/manager.log" | head -1 | sed 's/^/  operator: /'

  say "Creating the queues: config/samples/kueue/queues.yaml (quota: 4 cpus)"
  "$kubectl" apply -f config/samples/kueue/queues.yaml
  say "Creating a job for the queue, 3 pods of 1 cpu at a time: config/samples/kueue/train-a.yaml"
  "$kubectl" apply -f config/samples/kueue/train-a.yaml
  echo "\$ kubectl get ibj train-a -o custom-columns=NAME:.metadata.name,SUSPEND:.spec.suspend"
  "$kubectl" get ibj train-a -o custom-columns=NAME:.metadata.name,SUSPEND:.spec.suspend
  echo "  (created suspended by the admission webhook: it runs once Kueue admits it)"
  until [ "$("$kubectl" get ibj train-a -o jsonpath='{.spec.suspend}')" = false ]; do sleep 0.2; done
  echo "  admitted by Kueue and resumed"
  say "Creating a second one, which the remaining quota (1 cpu) cannot hold: config/samples/kueue/train-b.yaml"
  "$kubectl" apply -f config/samples/kueue/train-b.yaml

  say "Watching the jobs and their Workloads"
  echo "  job: NAME SUSPEND PHASE COMPLETED-INDEXES ACTIVE    workload: NAME ADMITTED RECLAIMABLE-PODS"
  deadline=$(( $(date +%s) + timeout ))
  last=
  while :; do
    now=$("$kubectl" get ibj train-a train-b --no-headers -o custom-columns=NAME:.metadata.name,SUSPEND:.spec.suspend,STATUS:.status.phase,COMPLETED:.status.completedIndexes,ACTIVE:.status.active 2>&1;
          "$kubectl" get workloads --no-headers -o custom-columns=WORKLOAD:.metadata.name,ADMITTED:.status.conditions[?\(@.type==\"Admitted\"\)].status,RECLAIMABLE-PODS:.status.reclaimablePods[0].count 2>&1)
    if [ "$now" != "$last" ]; then
      printf '%s  ---- %s\n%s\n' "$bold" "$(elapsed)$reset" "$now"
      last=$now
    fi
    done_a=$("$kubectl" get ibj train-a -o jsonpath='{.status.phase}' || true)
    done_b=$("$kubectl" get ibj train-b -o jsonpath='{.status.phase}' || true)
    if [[ $done_a =~ ^(Complete|Failed)$ && $done_b =~ ^(Complete|Failed)$ ]]; then break; fi
    [ "$(date +%s)" -lt "$deadline" ] || die "the jobs did not finish within ${timeout}s; see $dir/manager.log and $dir/kueue.log"
    sleep 0.5
  done

  say "Finished after $(elapsed)"
  echo "\$ kubectl get ibj"
  "$kubectl" get ibj
  echo
  echo "\$ kubectl get workloads"
  "$kubectl" get workloads
  echo
  echo "\$ kubectl describe ibj train-b   (events)"
  "$kubectl" describe ibj train-b | sed -n '/^Events:/,$p'
  [ "$done_a/$done_b" = Complete/Complete ] || die "the jobs ended $done_a and $done_b, not both Complete"
  exit 0
fi

if [ "$gang" = 0 ]; then
  say "Applying a copy of it whose pod template the Pod API refuses (a container named Example_1)"
  echo "\$ sed 's/name: per-index/name: refused/; s/- name: example/- name: Example_1/' $sample | kubectl apply -f -"
  if sed 's/name: per-index/name: refused/; s/- name: example/- name: Example_1/' "$sample" | "$kubectl" apply -f - 2>&1; then
    die "the admission webhook admitted an invalid pod template; see $dir/manager.log"
  fi
fi

say "Applying $sample"
sed -n '1,/^apiVersion/{/^#/p}' "$sample"
"$kubectl" apply -f "$sample"

say "Watching it (kubectl get ibj -o wide -w)"
watch_job "$job" "$timeout"

say "Finished: $phase after $(elapsed)"
echo "\$ kubectl get ibj"
"$kubectl" get ibj
echo
echo "\$ kubectl get pods -l batch.indexedjob.dev/job-name=$job"
"$kubectl" get pods -l "batch.indexedjob.dev/job-name=$job"
echo
echo "\$ kubectl describe ibj $job   (events)"
"$kubectl" describe ibj "$job" | sed -n '/^Events:/,$p'
if [ "$gang" = 1 ]; then
  echo
  echo "\$ kubectl get podgroups.scheduling.k8s.io,workloads.scheduling.k8s.io"
  "$kubectl" get podgroups.scheduling.k8s.io,workloads.scheduling.k8s.io
  echo
  echo "\$ kubectl ibj describe $job"
  "$bin/kubectl-ibj" describe "$job"
fi

# final_status JOB WANT [TEMPLATE]: prints the job's final status and dies
# unless its summary (the go-template below, then TEMPLATE) is WANT: the demo
# is a test, it passes only on the status each sample must end with.
final_status() {
  local job=$1 want=$2 got
  say "Final status"
  "$kubectl" get ibj "$job" -o yaml | sed -n '/^status:/,$p'
  got=$("$kubectl" get ibj "$job" -o go-template='{{range .status.conditions}}{{if and (eq .status "True") (or (eq .type "Failed") (eq .type "Complete"))}}{{.type}}/{{.reason}}{{end}}{{end}}: completedIndexes "{{.status.completedIndexes}}", failedIndexes "{{or .status.failedIndexes ""}}", succeeded {{.status.succeeded}}, failed {{.status.failed}}'"${3:-}")
  echo "$got"
  [ "$got" = "$want" ] || die "the job ended with $got, not $want"
  echo "  as expected"
}

if [ "$gang" = 1 ]; then
  final_status "$job" 'Complete/CompletionsReached: completedIndexes "0-7", failedIndexes "", succeeded 8, failed 0'
  exit 0
fi
# Indexes 1 and 2 fail twice each (backoffLimitPerIndex: 1).
final_status "$job" 'Failed/FailedIndexes: completedIndexes "0,3-7", failedIndexes "1,2", succeeded 6, failed 4'

# The failure record: which node each failure was on, and why; it outlives
# the pods (the demo dies unless both say so).
say "The failure record, by node (kubectl ibj nodes)"
echo "\$ kubectl ibj nodes $job"
out=$("$bin/kubectl-ibj" nodes "$job")
echo "$out"
echo "$out" | grep -q "^Job $job: 4 failed attempts of 2 indexes recorded" ||
  die "kubectl ibj nodes does not show the 4 failed attempts of indexes 1 and 2"
say "Every pod of $job deleted, the record still says why indexes 1 and 2 failed"
echo "\$ kubectl delete pods -l batch.indexedjob.dev/job-name=$job"
"$kubectl" delete pods -l "batch.indexedjob.dev/job-name=$job" --wait=true >/dev/null
"$kubectl" get pods -l "batch.indexedjob.dev/job-name=$job"
echo "\$ kubectl ibj describe $job"
out=$("$bin/kubectl-ibj" describe "$job")
echo "$out"
for ix in 1 2; do
  echo "$out" | grep -Eq "^  $ix +[^ ]+ +exit code 1 of example " ||
    die "kubectl ibj describe does not name index $ix's node and exit code once its pods are gone"
done

say "Applying $restart_sample"
sed -n '1,/^apiVersion/{/^#/p}' "$restart_sample"
"$kubectl" apply -f "$restart_sample"
restart_ran=1

say "Watching it (kubectl get ibj -o wide -w)"
watch_job "$restart_job" "$timeout"

say "Finished: $phase after $(elapsed)"
echo "\$ kubectl get ibj -o wide"
"$kubectl" get ibj -o wide
echo
echo "\$ kubectl get pods -l batch.indexedjob.dev/job-name=$restart_job -L batch.indexedjob.dev/restart-attempt"
"$kubectl" get pods -l "batch.indexedjob.dev/job-name=$restart_job" -L batch.indexedjob.dev/restart-attempt
echo
echo "\$ kubectl ibj indexes $restart_job"
"$bin/kubectl-ibj" indexes "$restart_job"
echo
echo "\$ kubectl describe ibj $restart_job   (events)"
"$kubectl" describe ibj "$restart_job" | sed -n '/^Events:/,$p'
# Index 2 exits 3 in generation 0 only: one restart, then every index
# succeeds; neither that exit nor the ends of the pods the restart stopped
# count as failed.
final_status "$restart_job" 'Complete/CompletionsReached: completedIndexes "0-3", failedIndexes "", succeeded 4, failed 0, restarts 1' ', restarts {{or .status.restarts 0}}'

say "Applying $in_place_sample"
sed -n '1,/^apiVersion/{/^#/p}' "$in_place_sample"
"$kubectl" apply -f "$in_place_sample"
in_place_ran=1

# restarted_in_place JOB INDEX TIMEOUT: waits until the index's one pod has
# restarted its container in place, and dies if the index gets a second pod
# or its pod fails: the simulated nodes must restart a container on an exit
# its restart rules match, as a kubelet does, not fail its pod.
restarted_in_place() {
  local job=$1 index=$2 deadline out pods name pod_phase restarts
  deadline=$(( $(date +%s) + $3 ))
  while :; do
    out=$("$kubectl" get pods -l "batch.indexedjob.dev/job-name=$job,batch.indexedjob.dev/completion-index=$index" \
      -o go-template='{{range .items}}{{.metadata.name}} {{.status.phase}}{{range .status.containerStatuses}} {{.restartCount}}{{end}}{{"\n"}}{{end}}')
    mapfile -t pods < <(sed '/^$/d' <<<"$out")
    [ "${#pods[@]}" -le 1 ] || die "index $index of $job got a second pod, not a restart in place: ${pods[*]}"
    if [ "${#pods[@]}" = 1 ]; then
      read -r name pod_phase restarts <<<"${pods[0]}"
      [ "$pod_phase" != Failed ] || die "pod $name of $job failed at its container's first exit: not restarted in place by its restart rules"
      if [ "${restarts:-0}" -ge 1 ]; then
        echo "  pod $name: container restarted in place ($restarts), phase $pod_phase"
        return
      fi
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "index $index of $job was not restarted in place within ${3}s; see $dir"
    sleep 0.2
  done
}

say "Waiting for index 1's container to exit 75 and restart in place"
restarted_in_place "$in_place_job" 1 "$timeout"
echo "\$ kubectl get pods -l batch.indexedjob.dev/job-name=$in_place_job"
"$kubectl" get pods -l "batch.indexedjob.dev/job-name=$in_place_job"

say "Watching it (kubectl get ibj -o wide -w)"
watch_job "$in_place_job" "$timeout"

say "Finished: $phase after $(elapsed)"
echo "\$ kubectl ibj indexes $in_place_job"
"$bin/kubectl-ibj" indexes "$in_place_job"
echo
echo "\$ kubectl describe ibj $in_place_job   (events)"
"$kubectl" describe ibj "$in_place_job" | sed -n '/^Events:/,$p'
# Index 1 exits 75 on each run: three restarts in place, each a failure, the
# third over backoffLimitPerIndex 2; stopping its pod adds none.
final_status "$in_place_job" 'Failed/FailedIndexes: completedIndexes "0,2,3", failedIndexes "1", succeeded 3, failed 3'

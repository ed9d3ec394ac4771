#!/usr/bin/env bash
# The two test tiers beyond `make test`:
#
#   hack/ci.sh ci     what CI runs (.ci/run, `make test-ci`): every suite, the
#                     e2e fleet and chaos specs at CI sizes, the newest
#                     Kubernetes only. It must fit an hour on a new machine
#                     and half of one with warm caches (docs/bench/ci.md).
#   hack/ci.sh full   everything at full size (`make test-full`): the e2e
#                     specs at the sizes docs/guarantees.md states, every
#                     client budget of the tenant lease spec, and the
#                     supported-versions checks at both ends, one minor below
#                     and the next minor.
#
# After make verify, every binary is built once, side by side (`make
# ci-binaries`). Then three lanes run side by side: `make test` and the
# e2e suite's general, gang, scheduling, Kueue and differential specs in
# one; the node, MultiKueue, image and release suites and their demos, whose
# time goes mostly to waiting on kubelets, timeouts and backoffs, then `make
# lint`, in the second; the e2e suite's fleet, chaos, bad-node and
# admission-chain specs, a second e2e process, then the kwok demos, in the
# third. Last, the tenant specs run alone, since they hold a canary job's
# time under attack to its time alone on the same machine.
#
# Each step's wall time goes to the table printed at the end and to
# $CI_LOGS/times.tsv; a lane's output goes to $CI_LOGS/<lane>.log and is
# printed whole when the lane ends, so the lanes' lines do not mix.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tier=${1:-ci}
case "$tier" in ci|full) ;; *) echo "usage: hack/ci.sh ci|full" >&2; exit 2 ;; esac
logs=${CI_LOGS:-$root/bin/ci-logs}
rm -rf "$logs" && mkdir -p "$logs"
times=$logs/times.tsv
: >"$times"
started=$(date +%s)

# The e2e sizes. CI's hold each property with fewer jobs, indexes and kills
# (every kill still lands mid-run: the specs fail otherwise); the full tier
# leaves the specs' defaults.
if [ "$tier" = ci ]; then
  export IBJ_FLEET_JOBS=${IBJ_FLEET_JOBS:-300} IBJ_FLEET_KILLS=${IBJ_FLEET_KILLS:-8} \
    IBJ_SOAK_JOBS=${IBJ_SOAK_JOBS:-600} IBJ_OUTAGE_INDEXES=${IBJ_OUTAGE_INDEXES:-600} \
    IBJ_OUTAGE_SECONDS=${IBJ_OUTAGE_SECONDS:-20} IBJ_CHAOS_INDEXES=${IBJ_CHAOS_INDEXES:-600} \
    IBJ_CHAOS_KILLS=${IBJ_CHAOS_KILLS:-6} IBJ_DIFF_RUNS=${IBJ_DIFF_RUNS:-10} \
    IBJ_TENANT_QPS=${IBJ_TENANT_QPS:-20} IBJ_BAD_NODE_INDEXES=${IBJ_BAD_NODE_INDEXES:-300}
fi

# step NAME CMD...: runs CMD and records its wall time under NAME.
step() {
  local name=$1 s rc=0
  shift
  echo
  echo "=== ci: $name ($(date -u +%H:%M:%S))"
  s=$(date +%s)
  "$@" || rc=$?
  printf '%s\t%d\t%s\n' "$name" "$(($(date +%s) - s))" "$([ $rc = 0 ] && echo passed || echo "FAILED ($rc)")" >>"$times"
  echo "=== ci: $name: $([ $rc = 0 ] && echo passed || echo "FAILED ($rc)") in $(($(date +%s) - s))s"
  return $rc
}

# lane NAME FUNCTION: runs FUNCTION in the background, its output to
# $logs/NAME.log; wait_lanes waits for every lane and prints each log.
lanes=()
lane() {
  local name=$1 fn=$2
  ( set +e; "$fn"; ) >"$logs/$name.log" 2>&1 &
  lanes+=("$name:$!")
  echo "=== ci: lane $name started (pid $!, log $logs/$name.log)"
}
wait_lanes() {
  local failed=0 entry name pid
  for entry in "${lanes[@]}"; do
    name=${entry%%:*} pid=${entry#*:}
    if wait "$pid"; then
      echo "=== ci: lane $name passed"
    else
      echo "=== ci: lane $name FAILED"
      failed=1
    fi
  done
  for entry in "${lanes[@]}"; do
    name=${entry%%:*}
    echo
    echo "=================== lane $name ==================="
    cat "$logs/$name.log"
  done
  lanes=()
  return $failed
}

# A lane runs its steps one after the other, each whatever the last gave,
# and fails if any failed.
run_steps() {
  local failed=0
  while [ $# -gt 0 ]; do
    local name=$1 cmd=$2
    shift 2
    step "$name" bash -c "$cmd" || failed=1
  done
  return $failed
}

summary() {
  local rc=$1
  echo
  echo "=== ci ($tier): every step, in seconds"
  column -t -s $'\t' "$times" || cat "$times"
  echo "=== ci ($tier): $([ "$rc" = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - started))s"
}
trap 'summary $?' EXIT

# Specs labelled quarantine failed once and wait for their fix
# (docs/bench/ci.md says why); the full tier still runs them.
quarantine=
[ "$tier" = ci ] && quarantine=' && !quarantine'

# The lanes are balanced by their last measured times (docs/bench/ci.md).
# Each e2e process starts its own kwok clusters, on ports and in directories
# of their own, so two run side by side; both find their binaries built.
e2e_main='!tenant && !fleet && !chaos && !bad-node && !admission-chain'
e2e_heavy='fleet || chaos || bad-node || admission-chain'

main_lane() {
  # The README's test command; its failing stops the lane: the e2e suite
  # would only repeat it.
  step "make test" make test || return
  run_steps \
    "make test-e2e (all but tenant, fleet, chaos, bad-node, admission-chain)" \
    "make test-e2e E2E_LABELS='$e2e_main$quarantine'"
}

# Lint last: by then the e2e lane has ended, and it computes where the
# first steps of the lanes would have shared the two cores three ways.
cluster_lane() {
  run_steps \
    "make test-node" "make test-node" \
    "make demo NODE=real" "make demo NODE=real" \
    "make test-multikueue" "make test-multikueue" \
    "make demo-multikueue" "make demo-multikueue" \
    "make test-image" "make test-image" \
    "make test-release" "make test-release" \
    "make lint" "make lint"
}

# The specs that hold the most jobs, indexes and kills, beside make test:
# they wait on pod run times, backoffs and restarts while it compiles. Then
# the kwok demos.
e2e_lane() {
  run_steps \
    "make test-e2e (fleet, chaos, bad-node, admission-chain)" \
    "make test-e2e E2E_LABELS='($e2e_heavy)$quarantine'" \
    "make demo" "make demo" \
    "make demo-kueue" "make demo-kueue" \
    "make demo GANG=1" "make demo GANG=1"
}

step "make node-prereqs" make node-prereqs
# Generated files must be committed as generated. Once they are, nothing
# regenerates them: the lanes would rewrite the files the other lane reads.
step "make verify" make verify
export SKIP_CODEGEN=1
step "make ci-binaries" make ci-binaries

lane main main_lane
lane clusters cluster_lane
lane e2e e2e_lane
wait_lanes

step "make test-e2e (tenant)" make test-e2e E2E_LABELS="tenant$quarantine"

if [ "$tier" = full ]; then
  # The supported-versions matrix at both ends, the refusal one minor
  # below, and the next minor.
  step "make test-compat" make test-compat COMPAT_VERSIONS='$(COMPAT_OLDEST) $(K8S_VERSION) $(COMPAT_NEXT)'
fi

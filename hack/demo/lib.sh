# Shared by the demo scripts (demo.sh, node-demo.sh, multikueue-demo.sh): sourced, not run.
# They set dir, keep, started and kubectl before calling these.

if [ -t 1 ]; then bold=$'\033[1m'; reset=$'\033[0m'; else bold=; reset=; fi
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$reset"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - started ))s"; }

# start_cluster TIMEOUT COMMAND...: starts the cluster command in the
# background (in a session of its own with KEEP=1, so that it outlives the
# demo), its output in $dir/cluster.out, and prints that output until the
# command creates $dir/ready. Sets cluster_pid.
start_cluster() {
  local timeout=$1 printed=0 lines deadline detach=()
  shift
  if [ "$keep" = 1 ] && command -v setsid >/dev/null; then detach=(setsid); fi
  # Created here: the loop below may read it before the command in the
  # background has opened it (under set -e a failed read ends the demo).
  : >"$dir/cluster.out"
  ${detach[@]+"${detach[@]}"} "$@" >>"$dir/cluster.out" 2>&1 &
  cluster_pid=$!
  deadline=$(( $(date +%s) + timeout ))
  until [ -f "$dir/ready" ]; do
    lines=$(wc -l <"$dir/cluster.out")
    if [ "$lines" -gt "$printed" ]; then sed -n "$((printed + 1)),${lines}p" "$dir/cluster.out"; printed=$lines; fi
    kill -0 "$cluster_pid" 2>/dev/null || { cat "$dir/cluster.out" >&2; cluster_pid=; die "the cluster did not start"; }
    [ "$(date +%s)" -lt "$deadline" ] || die "the cluster did not start within ${timeout}s; see $dir"
    sleep 0.2
  done
  sed -n "$((printed + 1)),\$p" "$dir/cluster.out"
}

# watch_job JOB TIMEOUT: shows kubectl get ibj JOB -o wide -w until the job
# is Complete or Failed, and sets phase to which.
watch_job() {
  local job=$1 timeout=$2 deadline
  # The watch prints a row for every status change, also of fields it does
  # not show (ready, for one); awk drops the repeated rows.
  "$kubectl" get ibj "$job" -o wide -w > >(awk '$0 != prev { print; fflush(); prev = $0 }') &
  watch_pid=$!
  deadline=$(( $(date +%s) + timeout ))
  while :; do
    phase=$("$kubectl" get ibj "$job" -o jsonpath='{.status.phase}')
    case "$phase" in Complete|Failed) break ;; esac
    [ "$(date +%s)" -lt "$deadline" ] || die "the job did not finish within ${timeout}s; see $dir"
    sleep 1
  done
  sleep 1 # let the watch print the last change
  kill "$watch_pid" 2>/dev/null || true
  wait "$watch_pid" 2>/dev/null || true
  watch_pid=
}

# stop_all STATUS WHAT PID...: the end of a demo that did not keep its
# cluster: stops the processes (the cluster command stops its own
# children), says "Stopping WHAT", removes $dir when the demo made it and
# succeeded or was interrupted (else says where its logs are), and exits
# with STATUS. Uses created_dir and aborted.
stop_all() {
  local status=$1 what=$2 pid
  shift 2
  if [ -n "$*" ]; then
    say "Stopping $what"
    for pid in "$@"; do
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done
    echo "  stopped"
  fi
  if [ "$created_dir" = 1 ] && { [ "$status" = 0 ] || [ "$aborted" = 1 ]; }; then
    rm -rf "$dir"
  else
    echo "logs kept in $dir"
  fi
  exit "$status"
}

# shellcheck shell=bash
# Sourced by the actor's job tests (actor_job_test.sh, actor_restart_test.sh,
# actor_daemon_restart_test.sh) after they set NAME (the log prefix) and,
# optionally, LOGS (files whose tails a failure prints; default the task
# logs). Sets BIN, SRC, work (the scratch dir, the working directory) and
# state (a daemon state dir), and defines:
#   fail MESSAGE   prints it and the logs' tails, exits 1;
#   on_exit CMD    runs CMD (a string) at exit, before the scratch dirs go;
#   make_base      trains the base model (two sft steps: noise, the checks are
#                  on mechanics) into runs/grpo-model, where examples/grpo.json
#                  looks for it;
#   run_job SPEC NAME [SECONDS]  `tandem run SPEC` into runs/NAME.{out,err},
#                  up to SECONDS (240); fails unless it exits 0. The caller
#                  sets run_pid= and stops a run left running at exit;
#   wait_line LOG PATTERN  waits (120 s) for a line of LOG matching the
#                  regex PATTERN while the run $run_pid lives;
#   worker_pid LOG ROLE RANK  prints the pid of a worker of the job that
#                  `tandem run` named in LOG (its stderr), as tandemd's
#                  residency API knows it (its control connection's peer).
set -euo pipefail
BIN=${TANDEM_BIN_DIR:?}
SRC=${TANDEM_SOURCE_DIR:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/$NAME-XXXXXX")
state=$(mktemp -d "${TMPDIR:-/tmp}/tandem-$NAME-XXXXXX")
_on_exit=()
on_exit() { _on_exit+=("$1"); }
_cleanup() {
  local c
  for c in "${_on_exit[@]}"; do eval "$c" || true; done
  rm -rf "$work" "$state"
}
trap _cleanup EXIT
fail() {
  echo "[$NAME] FAIL: $*" >&2
  local f
  for f in ${LOGS:-} "$work"/runs/grpo/tasks/*.err; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
  done
  exit 1
}
make_base() {
  mkdir -p "$work/runs"
  "$BIN/tandem-worker" sft --preset tiny --max-steps 2 --eval-problems 2 --eval-max-new-tokens 4 --threads 1 \
    --out "$work/runs/grpo-model" --log "$work/runs/grpo-model.log" >/dev/null || fail "sft (the base model)"
}
run_job() {
  "$BIN/tandem" run "$1" --state-dir "$state" --gpus 0,1 >"runs/$2.out" 2>"runs/$2.err" &
  run_pid=$!
  timeout "${3:-240}" tail --pid="$run_pid" -f /dev/null || fail "$2: the job did not end in ${3:-240} s"
  local rc=0
  wait "$run_pid" || rc=$?
  run_pid=
  ((rc == 0)) || fail "$2: tandem run exited $rc"
}
wait_line() {
  for _ in $(seq 1200); do
    grep -qE "$2" "$1" && return 0
    kill -0 "$run_pid" 2>/dev/null || fail "the run ended before a line /$2/ in $1: $(tail -3 "$1")"
    sleep 0.1
  done
  fail "no line /$2/ in $1 within 120 s"
}
worker_pid() {
  local job
  job=$(sed -n 's/^\[run\] job \([^ ]*\)  run dir.*/\1/p' "$1" | head -1)
  curl -sS --unix-socket "$state/tandemd.sock" "http://localhost/v1/jobs/$job/residency" |
    jq -r --arg r "$2" --argjson k "$3" '.groups[].workers[] | select(.role == $r and .rank == $k) | .pid // empty'
}
cd "$work"

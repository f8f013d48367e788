# shellcheck shell=bash
# Sourced by the Slurm shell tests after tests/services/lib.sh: one tandemd on
# $SCRATCH/state, driven through the real CLI.
#
#   start_daemon ARGS...  starts tandemd with ARGS (and the test's log level),
#                         sets DPID, and returns once the daemon answers on
#                         its socket. A socket file alone proves nothing: a
#                         daemon killed with -9 leaves its socket behind.
#   T ARGS...             the tandem CLI against that daemon.
#   job_state ID, wait_end ID [SECONDS], fail MESSAGE (with the log's tail).
BIN=${TANDEM_BIN_DIR:?}
state=$SCRATCH/state

fail() { echo "FAIL: $*" >&2; echo "--- tandemd log" >&2; tail -40 "$SCRATCH/tandemd.log" >&2 || true; exit 1; }
T() { "$BIN/tandem" --socket "$state/tandemd.sock" "$@"; }
job_state() { T status "$1" --json | jq -r .state; }

start_daemon() {
  # The service tests' Redis settings (TANDEM_REDIS_URL) would turn on the redis backend.
  env -u TANDEM_REDIS_URL "$BIN/tandemd" --state-dir "$state" --log-level debug "$@" >>"$SCRATCH/tandemd.log" 2>&1 &
  DPID=$!
  CLEANUPS+=("kill -9 $DPID 2>/dev/null")
  local deadline=$((SECONDS + 20))
  until T status >/dev/null 2>&1; do
    kill -0 "$DPID" 2>/dev/null || fail "tandemd $DPID exited while starting"
    ((SECONDS < deadline)) || fail "timed out after 20s waiting for tandemd $DPID to answer"
    sleep 0.2
  done
}

wait_end() {
  wait_for "${2:-60}" "job $1 to end" bash -c \
    "[[ \$('$BIN/tandem' --socket '$state/tandemd.sock' status $1 --json | jq -r .state) =~ ^(succeeded|failed|cancelled)$ ]]"
}

# shellcheck shell=bash
# Shared helpers for the test-service scripts in scripts/services/ (sourced,
# not run: scripts/test.sh only runs scripts/services/*.sh, not this folder).
# Every service keeps all of its state under $TANDEM_SERVICES_DIR/<service>
# and tracks each process it starts by a pidfile; nothing here looks a process
# up by name. See docs/testing.md, "Test services".

TANDEM_SERVICES_DIR=${TANDEM_SERVICES_DIR:-/tmp/tandem-services}

svc_log() { echo "[$SVC_NAME] $*"; }
svc_err() { echo "[$SVC_NAME] error: $*" >&2; }

# svc_pid PIDFILE EXE: prints the pid recorded in PIDFILE if that process is
# alive and runs EXE (guards against a stale pidfile whose pid was reused).
# Returns 1 otherwise.
svc_pid() {
  local pidfile=$1 exe=$2 pid
  [[ -s "$pidfile" ]] || return 1
  pid=$(tr -dc '0-9' <"$pidfile")
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A zombie still answers kill -0; treat it as gone.
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]] || return 1
  if [[ -n "$exe" ]]; then
    local real
    real=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    real=${real% (deleted)}
    [[ "$(readlink -f "$real")" == "$(readlink -f "$exe")" ]] || return 1
  fi
  echo "$pid"
}

# svc_wait SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s until it
# succeeds; returns 1 after SECONDS.
svc_wait() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  while ! "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      svc_err "timed out after ${limit}s waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

# svc_stop_pid PIDFILE EXE NAME [SECONDS]: SIGTERM the recorded process, wait
# for it to exit, SIGKILL after SECONDS (default 15). Removes the pidfile.
svc_stop_pid() {
  local pidfile=$1 exe=$2 name=$3 limit=${4:-15} pid
  if ! pid=$(svc_pid "$pidfile" "$exe"); then
    rm -f "$pidfile"
    return 0
  fi
  svc_log "stopping $name pid=$pid"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + limit))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      svc_log "$name pid=$pid ignored SIGTERM for ${limit}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  rm -f "$pidfile"
}

# svc_port_busy PORT: true if something listens on 127.0.0.1/any at TCP PORT.
svc_port_busy() {
  ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# svc_tail_logs FILE...: prints the end of each log (for failure reports).
svc_tail_logs() {
  local f
  for f in "$@"; do
    [[ -e "$f" ]] || continue
    echo "----- last lines of $f -----" >&2
    grep -v pmix "$f" | tail -n 40 >&2  # (pmix: harmless plugin-load noise)
  done
}

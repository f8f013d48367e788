# shellcheck shell=bash
# Shared by the service smoke tests (sourced). Loads the connection info that
# scripts/services/*.sh wrote, makes a scratch directory, and gives small
# assertion helpers. Exit 77 means "skipped" to ctest (SKIP_RETURN_CODE);
# with TANDEM_SERVICES_REQUIRED=1 (set by scripts/test.sh) a missing service
# is a failure instead.
set -euo pipefail

TANDEM_SERVICES_DIR=${TANDEM_SERVICES_DIR:-/tmp/tandem-services}

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# need_service NAME VAR: loads $TANDEM_SERVICES_DIR/NAME.env unless VAR is set.
need_service() {
  local name=$1 var=$2 env=$TANDEM_SERVICES_DIR/$1.env
  if [[ -z "${!var:-}" && -f "$env" ]]; then
    set -a; . "$env"; set +a
  fi
  if [[ -z "${!var:-}" ]]; then
    local msg="service '$name' is not running ($env missing); start it with scripts/services/$name.sh start"
    [[ "${TANDEM_SERVICES_REQUIRED:-0}" == 1 ]] && fail "$msg"
    echo "SKIP: $msg"
    exit 77
  fi
}

# A scratch directory as cwd (Slurm writes slurm-N.out into the cwd), removed on exit.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/tandem-svc-test.XXXXXX")
chmod 0755 "$SCRATCH"
cd "$SCRATCH"
CLEANUPS=()
run_cleanups() {
  local c
  for c in "${CLEANUPS[@]}"; do eval "$c" || true; done
  rm -rf "$SCRATCH"
}
trap run_cleanups EXIT

# wait_for SECONDS DESCRIPTION COMMAND...: polls until COMMAND succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

#!/usr/bin/env bash
# Checks the handoff protocol model (handoff.pml; docs/handoff.md "Model
# status") with spin, exhaustively (no bitstate hashing; -DCOLLAPSE only
# compresses stored states, losslessly):
#   1. safety, on_fault=restart: assertions (capacity by ledger and in
#      reality, H1/H2, H4, H6-H10, H12-H14) and invalid end states (deadlock)
#   2. safety, on_fault=fail (-DON_FAULT_FAIL)
#   3. non-progress cycles, on_fault=restart (-DNP, pan -l)
# With --mutant NAME it instead checks the model built with -DMUTANT_NAME
# (see handoff.pml's header) and succeeds only if spin finds a violation
# (an assertion or an invalid end state).
# Usage:
#   model/check.sh [WORKDIR]                   (ctest handoff_spin_model)
#   model/check.sh --mutant NAME [WORKDIR]     one mutant
#   model/check.sh --mutants [WORKDIR]         every mutant (ctest handoff_spin_model_mutants)
# A failing run leaves handoff.pml.trail in WORKDIR; replay it there with
#   spin -t -p [-DON_FAULT_FAIL|-DMUTANT_NAME] handoff.pml
# SPIN_DEFINES (e.g. "-DMAXCRASH=2" or "-DCYCLES=2") widens the model's bounds
# for a deeper, slower run than CI's.
# Fails when spin or cc is missing: scripts/setup.sh --test installs spin.
set -euo pipefail
mutants="H4 H8 H10 RETRY T11"
if [[ "${1:-}" == "--mutants" ]]; then
  for m in $mutants; do "$0" --mutant "$m" "${2:-$(mktemp -d)}/$m" || exit 1; done
  echo "handoff model: every mutant caught"
  exit 0
fi
mutant=""
if [[ "${1:-}" == "--mutant" ]]; then
  mutant="${2:?--mutant needs a name ($mutants)}"
  shift 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
command -v spin >/dev/null || { echo "spin is not installed: run scripts/setup.sh --test" >&2; exit 1; }
command -v cc >/dev/null || { echo "no C compiler (cc) for spin's pan.c" >&2; exit 1; }
cp "$here/handoff.pml" .
depth=100000

# run NAME SPIN_FLAGS CC_FLAGS PAN_FLAGS: one verification; its output in NAME.out
run() {
  local name="$1" spin_flags="$2" cc_flags="$3" pan_flags="$4"
  local t0 t1
  t0=$(date +%s.%N)
  rm -f handoff.pml.trail
  # shellcheck disable=SC2086
  spin ${SPIN_DEFINES:-} $spin_flags -a handoff.pml > "$name.spin.out"
  # -w: gcc's -Wstringop-overflow false positives on pan's array indexing
  # shellcheck disable=SC2086
  cc -w -O2 $cc_flags -o "pan_$name" pan.c
  # shellcheck disable=SC2086
  "./pan_$name" -m$depth $pan_flags > "$name.out" 2>&1 || true
  t1=$(date +%s.%N)
  local stored reached
  stored=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$name.out")
  reached=$(sed -n 's/.*depth reached \([0-9]*\),.*/\1/p' "$name.out")
  printf '%-24s states stored %-10s depth %-6s %5.1f s (spin+cc+pan)\n' "$name" "${stored:-?}" "${reached:-?}" \
    "$(awk "BEGIN { print $t1 - $t0 }")"
}

# violated NAME: did spin report an error in NAME.out?
violated() { ! grep -q "errors: 0" "$1.out"; }

if [[ -n "$mutant" ]]; then
  # -O0: a mutant stops at its first violation; compiling is the slow part
  run "mutant_$mutant" "-DMUTANT_$mutant" "-O0 -DSAFETY -DCOLLAPSE" ""
  if violated "mutant_$mutant"; then
    grep -E "^pan:1:" "mutant_$mutant.out" | head -1
    echo "mutant $mutant: caught (as it must be)"
    exit 0
  fi
  cat "mutant_$mutant.out"
  echo "mutant $mutant: NOT caught: the model no longer checks what it claims" >&2
  exit 1
fi

status=0
check() {
  local name="$1"
  if violated "$name"; then
    cat "$name.out"
    echo "$name: spin found a violation (trail: $work/handoff.pml.trail)" >&2
    status=1
  elif grep -q "max search depth too small" "$name.out"; then
    echo "$name: search depth $depth too small" >&2
    status=1
  elif grep -q "Search not completed" "$name.out"; then
    cat "$name.out"
    echo "$name: pan did not complete a full search" >&2
    status=1
  fi
}
run safety_restart "" "-DSAFETY -DCOLLAPSE" ""
check safety_restart
[[ $status -ne 0 ]] && exit 1
run safety_fail "-DON_FAULT_FAIL" "-DSAFETY -DCOLLAPSE" ""
check safety_fail
[[ $status -ne 0 ]] && exit 1
# one cycle: a non-progress cycle would be within one phase's stage loop
run nonprogress_restart "-DCYCLES=1" "-DNP -DCOLLAPSE" "-l"
check nonprogress_restart
[[ $status -ne 0 ]] && exit 1
echo "handoff model: ok"

#!/usr/bin/env bash
# Checks the handoff protocol model (handoff.pml) with spin: safety asserts
# (capacity, H4, H8, H9/H10) and invalid end states (deadlock). Usage:
#   model/check.sh WORKDIR      (the ctest handoff_spin_model)
# Fails when spin is missing: scripts/setup.sh --test installs it.
set -euo pipefail
model="$(cd "$(dirname "$0")" && pwd)/handoff.pml"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
command -v spin >/dev/null || { echo "spin is not installed: run scripts/setup.sh --test" >&2; exit 1; }
spin -a "$model"
cc -O2 -DSAFETY -DNOREDUCE -o pan pan.c
./pan -m200000 -n > pan.out 2>&1 || true
cat pan.out
grep -q "errors: 0" pan.out || { echo "spin found a violation (trail: $work/handoff.pml.trail)" >&2; exit 1; }
if grep -q "max search depth too small" pan.out; then echo "search depth too small" >&2; exit 1; fi
echo "handoff model: ok"

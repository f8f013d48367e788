#!/bin/bash
# bench/handoff/cpu_per_transition.sh: the CPU that the daemon and every
# worker together spend per handoff transition, and the context switches
# (docs/benchmarks.md "Handoff control overhead"). Wall-clock figures of
# control_bench swing 2x on a shared VM; this one does not: perf stat over
# control_bench at N workers with 40 cycles minus 10 cycles, divided by the
# 90 transitions between, so start-up and the baselines cancel out.
#   bench/handoff/cpu_per_transition.sh [BENCH] [N]   (default build-rel/bin/control_bench 8)
set -euo pipefail
bench=${1:-build-rel/bin/control_bench}
n=${2:-8}
run() { perf stat -x, -e task-clock,context-switches -- "$bench" --min "$n" --max "$n" --cycles "$1" 2>&1 >/dev/null |
          awk -F, '/task-clock|context-switches/ {print $1}' | tr '\n' ' '; }
read -r a_ms a_cs <<<"$(run 10)"
read -r b_ms b_cs <<<"$(run 40)"
awk -v a1="$a_ms" -v a2="$a_cs" -v b1="$b_ms" -v b2="$b_cs" -v n="$n" \
  'BEGIN { printf "%d workers, per transition: cpu %.0f us, context switches %.1f\n", n, (b1-a1)/90*1000, (b2-a2)/90 }'

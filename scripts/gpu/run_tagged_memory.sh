#!/usr/bin/env bash
# Tagged device memory on a GPU machine (issue #3 parts 4, 5 and 9), in one
# call: standalone CMake build (bench/handoff/standalone: worker runtime with
# the CUDA backend, tandem-worker, tagged-memory tests, tagged_memory_bench;
# Release, sm_90a), the tests (CPU and GPU) with ctest, a few local cycles of
# `tandem-worker probe --backend cuda`, then the offload/restore benchmark.
# Everything lands under $OUT (default /tmp/tandem-gpu-out): gpu.txt,
# build.log, tests.log, probe.json, probe.log, bench.log, bench.json.
# Usage: scripts/gpu/run_tagged_memory.sh [build] [test] [probe] [bench]   (default: all)
#   TANDEM_GTEST_SOURCE_DIR     GoogleTest sources when GTest is not installed
#   TANDEM_THIRD_PARTY_INCLUDE  nlohmann/ CLI/ fmt/ spdlog/ headers when not installed
#   TANDEM_BENCH_ARGS           benchmark arguments (default: --sizes 1,4,16,32 --reps 3 --sweep-gib 4)
#   TANDEM_PROBE_TAGS           probe tags (default: weights=2GiB:backup kv_cache=2GiB cuda_graph=64MiB:backup)
#   TANDEM_GPU_DEADLINE_S       seconds for the whole script (default 560); stages share what is left
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-gpumem-build}
mkdir -p "$OUT"
STAGES=${*:-build test probe bench}
START=$(date +%s)
DEADLINE=$((START + ${TANDEM_GPU_DEADLINE_S:-560}))
status=0
# Seconds left for a stage: at most $1, never past the deadline.
left() { local l=$((DEADLINE - $(date +%s))); ((l > $1)) && l=$1; ((l < 5)) && l=5; echo $l; }

echo "[gpu] $(date -u +%FT%TZ) stages: $STAGES"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total,memory.used --format=csv
  for t in cmake ninja nvcc g++; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
  g++ --version | head -1; nvcc --version | tail -2; cmake --version | head -1
  for d in boost nlohmann CLI fmt spdlog gtest; do printf '/usr/include/%s: %s\n' $d "$([[ -d /usr/include/$d ]] && echo yes || echo no)"; done
  free -g | head -2; nproc
} >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

if [[ " $STAGES " == *" build "* ]]; then
  GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
  timeout "$(left 300)" cmake -S bench/handoff/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DTANDEM_GTEST_SOURCE_DIR="${TANDEM_GTEST_SOURCE_DIR:-}" \
    -DTANDEM_THIRD_PARTY_INCLUDE="${TANDEM_THIRD_PARTY_INCLUDE:-}" >"$OUT/build.log" 2>&1 &&
    timeout "$(left 300)" cmake --build "$BUILD" -j"$(nproc)" >>"$OUT/build.log" 2>&1
  rc=$?
  echo "[gpu] build rc=$rc ($(( $(date +%s) - START )) s)"
  if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
fi

if [[ " $STAGES " == *" test "* ]]; then
  (cd "$BUILD" && timeout "$(left 240)" ctest --output-on-failure -j1 --timeout 300) >"$OUT/tests.log" 2>&1
  rc=$?
  grep -E "^\[  (FAILED|     OK) |tests passed|Failed|\*\*\*|Expected|Which is|error" "$OUT/tests.log" | head -60
  echo "[gpu] tests rc=$rc ($(( $(date +%s) - START )) s)"
  [[ $rc -ne 0 ]] && status=1
fi

if [[ " $STAGES " == *" probe "* ]]; then
  args=()
  for t in ${TANDEM_PROBE_TAGS:-weights=2GiB:backup kv_cache=2GiB cuda_graph=64MiB:backup}; do args+=(--tag "$t"); done
  t0=$(date +%s.%N)
  TANDEM_LOG_LEVEL=debug timeout "$(left 120)" "$BUILD/bin/tandem-worker" probe --backend cuda --cycles 3 "${args[@]}" \
    >"$OUT/probe.json" 2>"$OUT/probe.log"
  rc=$?
  echo "[gpu] probe rc=$rc in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s: $(cat "$OUT/probe.json")"
  [[ $rc -ne 0 ]] && { tail -5 "$OUT/probe.log"; status=1; }
fi

if [[ " $STAGES " == *" bench "* ]]; then
  timeout "$(left 400)" "$BUILD/bin/tagged_memory_bench" ${TANDEM_BENCH_ARGS:---sizes 1,4,16,32 --reps 3 --sweep-gib 4} \
    --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
  rc=$?
  cat "$OUT/bench.log"
  echo "[gpu] bench rc=$rc ($(( $(date +%s) - START )) s)"
  [[ $rc -ne 0 ]] && status=1
fi
exit $status

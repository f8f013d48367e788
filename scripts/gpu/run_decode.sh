#!/usr/bin/env bash
# The decode step against an earlier commit's, in one device call (issue #14,
# "Performance"; docs/benchmarks.md "The rollout engine, decode"): builds
# tandem-generate from this tree and from .gpu-deps/base.tar (a `git archive`
# of the earlier commit: `git archive -o .gpu-deps/base.tar REV`), both
# standalone (workers/standalone, Release, sm_90a), the GPU tests of the decode
# path from this tree, then engine_bench.py with TANDEM_ENGINE_BASE (both
# binaries, transformers, the bandwidth limit; graphs only) and optionally
# engine_profile.py. Logs under $OUT: build.log, base_build.log, tests.txt and
# each test's log, bench.md, profile.log.
# Usage: scripts/gpu/run_decode.sh [tests] [bench] [profile]   (default: tests bench)
#   TANDEM_ENGINE_BATCHES, TANDEM_PROFILE_BATCHES, TANDEM_ENGINE_MODEL as run_engine.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-engine-build}
BASE=${TANDEM_GPU_BASE_DIR:-/tmp/tandem-engine-base}
WORK=${TANDEM_GPU_WORK_DIR:-/tmp/tandem-engine-work}
steps=${*:-tests bench}
mkdir -p "$OUT" "$WORK"
. scripts/gpu/lib.sh
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
configure() {  # SOURCE BUILD LOG
  cmake -S "$1/workers/standalone" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
    -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$3" 2>&1
}
tests="decode_glue_test model_paged_decode_test fused_gpu_test paged_attention_op_test"
configure "$ROOT" "$BUILD" "$OUT/build.log" && cmake --build "$BUILD" -j16 --target tandem-generate $tests >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
bin() { find "$1" -name "$2" -type f -perm -u+x | head -1; }
base_tool=
if [[ -f .gpu-deps/base.tar && " $steps " == *" bench "* ]]; then
  mkdir -p "$BASE/src" && tar xf .gpu-deps/base.tar -C "$BASE/src" &&
    configure "$BASE/src" "$BASE/build" "$OUT/base_build.log" &&
    cmake --build "$BASE/build" -j16 --target tandem-generate >>"$OUT/base_build.log" 2>&1 &&
    base_tool=$(bin "$BASE/build" tandem-generate)
  echo "[gpu] base build: ${base_tool:-failed} ($(( $(date +%s) - start )) s)"
fi
status=0
if [[ " $steps " == *" tests "* ]]; then
  for t in $tests; do
    timeout 180 "$(bin "$BUILD" $t)" >"$OUT/$t.log" 2>&1
    rc=$?
    echo "[gpu] $t rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E "Failure|^\[  FAILED" "$OUT/$t.log" | head -8
    echo "$t rc=$rc" >>"$OUT/tests.txt"
    [[ $rc -ne 0 ]] && status=1
  done
fi
left() { echo $(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) )); }
if [[ " $steps " == *" bench "* ]]; then
  TANDEM_ENGINE_EAGER=0 TANDEM_ENGINE_BASE=$base_tool timeout "$(left)" python3 scripts/gpu/engine_bench.py \
    "$(bin "$BUILD" tandem-generate)" "$WORK" ${TANDEM_ENGINE_BATCHES:-1 64} 2>&1 | tee "$OUT/bench.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if [[ " $steps " == *" profile "* ]] && (( $(left) > 60 )); then
  OUT=$OUT timeout "$(left)" python3 scripts/gpu/engine_profile.py "$(bin "$BUILD" tandem-generate)" "$WORK" \
    ${TANDEM_PROFILE_BATCHES:-1} >"$OUT/profile.log" 2>&1
  grep -E "profiled|GPU busy" "$OUT/profile.log"
fi
exit $status

#!/usr/bin/env bash
# Weight exchange on the GPU machine (issue #15 item 1, cuda-ipc), one
# device call: the standalone build (workers/standalone: kernels with the
# reduced CUDA instance set, ops, model, runtime, weights; Release, sm_90a,
# the machine's LibTorch) of the weights tests, the fault peer and the
# benchmark; then weights_core_test (torch-free: framing, fd passing, URIs,
# offers, the server), weights_transport_test (the shared suite over shm,
# file and cuda-ipc on cuda:0, and the fault tests with real processes), and
# weights_ipc_bench. Logs under $OUT: gpu.txt, build.log, core.log,
# transport.log, bench.md.
# Needs .gpu-deps/ carried (scripts/gpu/stage_deps.sh, run here first).
# Usage: scripts/gpu/run_weights.sh [test] [bench]   (default: both)
#   TANDEM_WEIGHTS_BENCH_ARGS  benchmark arguments (default: --models 0.5b,3b --reps 5)
#   TANDEM_GPU_DEADLINE_S      seconds for the whole script (default 570)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-weights-build}
mkdir -p "$OUT"
steps=${*:-test bench}
START=$(date +%s)
DEADLINE=$((START + ${TANDEM_GPU_DEADLINE_S:-570}))
left() { local l=$((DEADLINE - $(date +%s))); ((l > $1)) && l=$1; ((l < 5)) && l=5; echo $l; }
status=0

echo "[gpu] $(date -u +%FT%TZ) weights: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
targets="weights_core_test weights_transport_test weights_peer weights_ipc_bench"
timeout "$(left 420)" cmake -S workers/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DTANDEM_CUDA_CI_SUBSET=ON \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$OUT/build.log" 2>&1 &&
  timeout "$(left 420)" cmake --build "$BUILD" -j"$(nproc)" --target $targets >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - START )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; fi
export TANDEM_BIN_DIR="$BUILD/bin"
tests=$BUILD/tests

if [[ " $steps " == *" test "* ]]; then
  for t in weights_core_test weights_transport_test; do
    log=$OUT/${t%_test}.log; log=${log/weights_/}
    timeout "$(left 240)" "$tests/$t" --gtest_color=no >"$log" 2>&1
    rc=$?
    grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]|\[weights\]|Failure|Expected|Which is|error" "$log" | head -60
    echo "[gpu] $t rc=$rc ($(( $(date +%s) - START )) s)"
    [[ $rc -ne 0 ]] && status=1
  done
fi

if [[ " $steps " == *" bench "* ]]; then
  timeout "$(left 200)" "$BUILD/bin/weights_ipc_bench" ${TANDEM_WEIGHTS_BENCH_ARGS:---models 0.5b,3b --reps 5} 2>&1 | tee "$OUT/bench.md"
  rc=${PIPESTATUS[0]}
  echo "[gpu] bench rc=$rc ($(( $(date +%s) - START )) s)"
  [[ $rc -ne 0 ]] && status=1
fi
exit $status

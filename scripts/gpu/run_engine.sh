#!/usr/bin/env bash
# The rollout engine's GPU checks (issue #14), one device call: builds the
# model stack standalone (workers/standalone: kernels, ops, runtime, model,
# inference; Release, sm_90a, the machine's LibTorch) up to tandem-generate,
# then engine_check.py (greedy vs transformers on CPU fp32 and CUDA bf16, the
# memory handoff) and engine_bench.py (decode tokens/s vs transformers and the
# bandwidth limit), engine_profile.py (a decode step's time by part and by
# kernel, under Kineto). Logs under $OUT: build.log, check.log,
# engine_check.json, bench.md, profile.log and the traces. Needs .gpu-deps/
# carried (scripts/gpu/stage_deps.sh, run here first).
# Usage: scripts/gpu/run_engine.sh [check] [bench] [profile]   (default: check bench)
#   TANDEM_ENGINE_BATCHES  batch sizes for the bench (default: 1 16 64 256)
#   TANDEM_PROFILE_BATCHES batch sizes for the profile (default: 1 64)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-engine-build}
WORK=${TANDEM_GPU_WORK_DIR:-/tmp/tandem-engine-work}
mkdir -p "$OUT" "$WORK"
steps=${*:-check bench}
status=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "[gpu] $(date -u +%FT%TZ) engine: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
start=$(date +%s)
cmake -S workers/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target tandem-generate >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
tool=$(find "$BUILD" -name tandem-generate -type f -perm -u+x | head -1)

if [[ " $steps " == *" check "* ]]; then
  timeout 420 python3 scripts/gpu/engine_check.py "$tool" "$WORK" 2>&1 | tee "$OUT/check.log" | tail -30
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
  cp "$WORK/engine_check.json" "$OUT/" 2>/dev/null
fi
left=$(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) ))
if [[ " $steps " == *" bench "* ]] && (( left < 90 )); then
  echo "[gpu] bench skipped: ${left} s left in this call"
elif [[ " $steps " == *" bench "* ]]; then
  timeout $left python3 scripts/gpu/engine_bench.py "$tool" "$WORK" ${TANDEM_ENGINE_BATCHES:-} 2>&1 | tee "$OUT/bench.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
left=$(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) ))
if [[ " $steps " == *" profile "* ]] && (( left < 60 )); then
  echo "[gpu] profile skipped: ${left} s left in this call"
elif [[ " $steps " == *" profile "* ]]; then
  OUT=$OUT timeout $left python3 scripts/gpu/engine_profile.py "$tool" "$WORK" ${TANDEM_PROFILE_BATCHES:-} 2>&1 | tee "$OUT/profile.log" | grep -E "^\[profile\] batch [0-9]+ (un)?profiled|GPU busy"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
exit $status

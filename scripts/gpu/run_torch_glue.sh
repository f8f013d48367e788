#!/usr/bin/env bash
# Builds and tests the LibTorch glue (workers/ops/, issue #4) on a GPU
# machine in one call: standalone CMake build of kernels/ and workers/ops/ against the
# machine's PyTorch (LibTorch with CUDA), the three glue test binaries (CPU
# and CUDA paths), then the glue-overhead benchmark. Logs land under $OUT.
# Usage: scripts/gpu/run_torch_glue.sh
#   TANDEM_GTEST_SOURCE_DIR  GoogleTest sources when GTest is not installed
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-torch-build}
mkdir -p "$OUT"
status=0

echo "[gpu] $(date -u +%FT%TZ) torch glue"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
targets="tree_attention_op_test moe_ops_test lm_head_loss_op_test torch_glue_overhead_bench"
start=$(date +%s)
cmake -S kernels/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON \
  -DTANDEM_GTEST_SOURCE_DIR="${TANDEM_GTEST_SOURCE_DIR:-}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target $targets >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
grep -E "workers/ops|CUDA path" "$OUT/build.log" | head -5
if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -30 "$OUT/build.log"; exit 1; fi

for t in tree_attention_op_test moe_ops_test lm_head_loss_op_test; do
  bin=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
  timeout 300 "$bin" >"$OUT/$t.log" 2>&1
  rc=$?
  echo "[gpu] $t rc=$rc"
  grep -E "^\[  (PASSED|FAILED) |^\[       OK \].*cuda|^\[  FAILED  \]|Failure|seed" "$OUT/$t.log" | head -30
  [[ $rc -ne 0 ]] && status=1
done

bench=$(find "$BUILD" -name torch_glue_overhead_bench -type f | head -1)
timeout 240 "$bench" 2>&1 | tee "$OUT/glue_overhead.log"
exit $status

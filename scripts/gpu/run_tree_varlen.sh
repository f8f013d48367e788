#!/usr/bin/env bash
# Tree attention on dense varlen kernels (issue #19), in one device call:
# builds the glue (kernels/standalone against the machine's LibTorch,
# Release, sm_90a), runs the tree attention op and forest tests (the CUDA
# path: varlen-flash against the float64 reference) and the MoE op test (its
# grouped-mm experts: aten::_grouped_mm by name) and the fused AdamW
# kernel's test (bit for bit its CPU loop), the implementations'
# benchmark through the glue (tiles vs varlen-flash), then the Python probe
# with the same shapes' baselines (flat batch on cuDNN and flash,
# FlexAttention) and the dense-kernel variants (single / split, flash /
# cuDNN). Summaries go to stdout (only a few files under $OUT come back).
# Usage: scripts/gpu/run_tree_varlen.sh [test] [bench] [probe]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-varlen-build}
STAGES=${*:-test bench probe}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
targets="tree_attention_op_test tree_attention_forest_test moe_ops_test adamw_gpu_test tree_attention_impl_bench"
start=$(date +%s)
cmake -S kernels/standalone -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON \
  -DTANDEM_GTEST_SOURCE_DIR="${TANDEM_GTEST_SOURCE_DIR:-$PWD/.gpu-deps/googletest}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target $targets >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -30 "$OUT/build.log"; exit 1; fi

if [[ " $STAGES " == *" test "* ]]; then
  for t in tree_attention_forest_test tree_attention_op_test moe_ops_test adamw_gpu_test; do
    bin=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
    timeout 300 "$bin" >"$OUT/$t.log" 2>&1
    rc=$?
    echo "[gpu] $t rc=$rc"
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|seed" "$OUT/$t.log" | head -30
    [[ $rc -ne 0 ]] && status=1
  done
fi
if [[ " $STAGES " == *" bench "* ]]; then
  echo "[gpu] tree_attention_impl_bench"
  timeout 300 "$(find "$BUILD" -name tree_attention_impl_bench -type f | head -1)" | tee "$OUT/impl_bench.jsonl"
fi
if [[ " $STAGES " == *" probe "* ]]; then
  echo "[gpu] tree_varlen_probe"
  timeout 420 python3 scripts/gpu/tree_varlen_probe.py 2>&1 | grep -v -i warning | tee "$OUT/probe.log"
fi
exit $status

#!/usr/bin/env bash
# Tree-attention backward round (issue #4, docs/benchmarks.md "Round 3"), in one
# device call: standalone Release build of the tree-attention targets only
# (sm_90a), the ptxas register/spill report of the backward kernels, the GPU
# and CPU tree-attention tests, then the tree-attention benchmark (every
# variant side by side). Everything lands under $OUT.
# Usage: scripts/gpu/run_tree_bwd.sh      (TANDEM_GTEST_SOURCE_DIR: googletest sources)
#   TANDEM_BENCH_ARGS  extra arguments for tree_attention_bench.py (e.g. --no-flex)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-gpu-build}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
echo "[gpu] $(date -u +%FT%TZ) tree-attention backward round"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
cmake -S kernels/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DTANDEM_GPU_TESTS=ON -DTANDEM_GTEST_SOURCE_DIR="${TANDEM_GTEST_SOURCE_DIR:-}" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target tree_attention_gpu_test tree_attention_test tandem_kernels_capi \
    >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc $(date -u +%T)"
if [[ $rc -ne 0 ]]; then tail -40 "$OUT/build.log"; exit 1; fi

NVCC=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
for f in tree_attention_bwd tree_attention_bwd_fused; do
  "${NVCC:-nvcc}" -std=c++20 -arch=sm_90a -O3 -I. -Xptxas -v -c "kernels/tree_attention/$f.cu" -o /dev/null 2>&1 |
    grep -E "entry function|registers|spill" | sed -E 's/.*entry function .*(Dq|Dkv|Bwd[A-Za-z]*|Convert[A-Za-z]*)(ILi[0-9]+E[^ ]*)?.*/\1\2/' \
    >>"$OUT/ptxas.txt"
done
cat "$OUT/ptxas.txt"

for t in tree_attention_gpu_test tree_attention_test; do
  bin=$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)
  timeout 300 "$bin" >"$OUT/$t.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|seed=" "$OUT/$t.log" | head -30
  echo "[gpu] $t rc=$rc $(date -u +%T)"
  [[ $rc -ne 0 ]] && status=1
done

LIB="$BUILD/lib/libtandem_kernels_capi.so"
timeout 420 python3 kernels/tree_attention/bench/tree_attention_bench.py "$LIB" --json "$OUT/tree_attention_bench.json" \
  ${TANDEM_BENCH_ARGS:-} >"$OUT/tree_attention_bench.log" 2>&1
echo "[gpu] bench rc=$? $(date -u +%T)"
grep -v '^{' "$OUT/tree_attention_bench.log" | tail -40
exit $status

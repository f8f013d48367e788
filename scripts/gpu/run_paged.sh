#!/usr/bin/env bash
# Paged decode attention's GPU checks (issue #14, item 5), one device call:
# builds the model stack standalone (workers/standalone: kernels, LibTorch
# ops, model; Release, sm_90a, the machine's LibTorch), runs the kernel's
# CPU and GPU tests, the glue's test (CPU and CUDA), the model's paged
# decode test (CPU and CUDA), then the bandwidth benchmark. Logs under $OUT:
# build.log, <test>.log, tests.log, paged_attention_bench.md.
# Needs .gpu-deps/ carried (scripts/gpu/stage_deps.sh, run here first).
# Usage: scripts/gpu/run_paged.sh [tests] [bench]   (default: both)
#   TANDEM_PAGED_BENCH_ARGS  e.g. --quick (only context 2048, one head shape)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-paged-build}
mkdir -p "$OUT"
steps=${*:-tests bench}
status=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "[gpu] $(date -u +%FT%TZ) paged attention: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
tests="paged_attention_test paged_attention_gpu_test paged_attention_op_test model_paged_decode_test"
start=$(date +%s)
cmake -S workers/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target paged_attention_bench $tests >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
grep -E "tandem kernels:|workers/ops: Torch" "$OUT/build.log" | head -3
if [[ $rc -ne 0 ]]; then grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }

if [[ " $steps " == *" tests "* ]]; then
  for t in $tests; do
    b=$(bin "$t"); [[ -n "$b" ]] || { echo "[gpu] $t not built"; status=1; continue; }
    timeout 300 "$b" >"$OUT/$t.log" 2>&1
    rc=$?
    echo "[gpu] $t rc=$rc $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]|Failure|seed|error|SKIPPED" "$OUT/$t.log" | head -16
    if (( rc > 128 )) && command -v cuda-gdb >/dev/null; then  # a crash: where
      timeout 240 cuda-gdb -batch -ex run -ex bt "$b" >"$OUT/$t.gdb" 2>&1
      grep -E "^#[0-9]+ |signal" "$OUT/$t.gdb" | head -25
    fi
    [[ $rc -ne 0 ]] && status=1
  done
  cat "$OUT"/*_test.log > "$OUT/tests.log" 2>/dev/null
fi
left=$(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) ))
if [[ " $steps " == *" bench "* ]] && (( left < 60 )); then
  echo "[gpu] bench skipped: ${left} s left in this call"
elif [[ " $steps " == *" bench "* ]]; then
  timeout $left "$(bin paged_attention_bench)" ${TANDEM_PAGED_BENCH_ARGS:-} 2>&1 | tee "$OUT/paged_attention_bench.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
exit $status

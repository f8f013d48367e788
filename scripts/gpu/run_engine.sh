#!/usr/bin/env bash
# The rollout engine's GPU checks (issue #14), one device call: builds the
# model stack standalone (workers/standalone: kernels, ops, runtime, model,
# inference; Release, sm_90a, the machine's LibTorch) up to tandem-generate,
# then, as asked:
#   tests    the GPU tests of the decode path (decode_glue_test,
#            decode_gemv_gpu_test, model_paged_decode_test, fused_gpu_test,
#            paged_attention_gpu_test, paged_attention_op_test)
#   gemv     decode_gemv_bench (the decode GEMV against norm + cuBLAS +
#            SwiGLU and the bandwidth limit, per projection and batch)
#   paged    paged_attention_bench (the tiles, warps and mma kernels against the
#            bandwidth limit; --quick, the 16/2 x 128 heads only, with TANDEM_PAGED_QUICK=1;
#            with TANDEM_PAGED_CHAIN=1 its --chain table first: µs per launch in a graph of
#            chained launches, splits merged by the combine kernel or in a cluster)
#   check    engine_check.py (greedy vs transformers on CPU fp32 and CUDA
#            bf16, the memory handoff)
#   bench    engine_bench.py (decode tokens/s vs transformers and the
#            bandwidth limit); with .gpu-deps/base.tar carried (`git archive
#            -o .gpu-deps/base.tar REV`), that commit's tandem-generate is
#            built too and benched beside this one in the same run
#   profile  engine_profile.py (a decode step's time by part and by kernel,
#            under Kineto)
# Under $OUT (the device tool brings back at most 8 files, so few): tests.log
# (every test's output), gemv_bench.md, paged.md, check.log, bench.md,
# profile.log and the profile's traces; build.log (base_build.log) only when a
# build fails. Needs .gpu-deps/ carried (scripts/gpu/stage_deps.sh, run here
# first). Do not pipe the call through `tail`: a call cut off at its time limit
# then shows nothing.
# Usage: scripts/gpu/run_engine.sh [tests] [gemv] [paged] [check] [bench] [profile]   (default: check bench)
#   TANDEM_ENGINE_BATCHES  batch sizes for the bench (default: 1 16 64 256)
#   TANDEM_ENGINE_EAGER=0  the bench skips tandem's eager runs
#   TANDEM_PROFILE_BATCHES batch sizes for the profile (default: 1 64)
#   TANDEM_ENGINE_MODEL=3b a 3.1B dense config for the bench and the profile
#                          (moe: a 0.7B MoE; engine_bench.py)
#   TANDEM_ENGINE_MODELS   several models benched one after the other
#                          ("dense 3b moe")
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-engine-build}
BASE=${TANDEM_GPU_BASE_DIR:-/tmp/tandem-engine-base}
WORK=${TANDEM_GPU_WORK_DIR:-/tmp/tandem-engine-work}
mkdir -p "$OUT" "$WORK"
steps=${*:-check bench}
status=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "[gpu] $(date -u +%FT%TZ) engine: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
start=$(date +%s)
build() {  # SOURCE BUILD LOG TARGET...
  local src=$1 dir=$2 log=$3
  shift 3
  cmake -S "$src/workers/standalone" -B "$dir" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
    -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$log" 2>&1 &&
    cmake --build "$dir" -j16 --target "$@" >>"$log" 2>&1
}
bin() { find "$1" -name "$2" -type f -perm -u+x | head -1; }
left() { echo $(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) )); }
has() { [[ " $steps " == *" $1 "* ]]; }

tests="decode_glue_test decode_gemv_gpu_test model_paged_decode_test fused_gpu_test paged_attention_gpu_test
  paged_attention_op_test"
build "$ROOT" "$BUILD" "$OUT/build.log" tandem-generate $(has tests && echo $tests) $(has gemv && echo decode_gemv_bench) \
  $(has paged && echo paged_attention_bench)
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
rm -f "$OUT/build.log"
tool=$(bin "$BUILD" tandem-generate)
base_tool=
if has bench && [[ -f .gpu-deps/base.tar ]]; then
  mkdir -p "$BASE/src" && tar xf .gpu-deps/base.tar -C "$BASE/src" &&
    build "$BASE/src" "$BASE/build" "$OUT/base_build.log" tandem-generate && base_tool=$(bin "$BASE/build" tandem-generate) &&
    rm -f "$OUT/base_build.log"
  echo "[gpu] base build: ${base_tool:-failed} ($(( $(date +%s) - start )) s)"
fi

if has tests; then
  for t in $tests; do
    timeout 180 "$(bin "$BUILD" $t)" >"$WORK/$t.log" 2>&1
    rc=$?
    { echo "==== $t rc=$rc"; cat "$WORK/$t.log"; } >>"$OUT/tests.log"
    echo "[gpu] $t rc=$rc $(grep -E '^\[  (PASSED|FAILED)  \]' "$WORK/$t.log" | tr '\n' ' ')"
    grep -E "Failure|^\[  FAILED" "$WORK/$t.log" | head -8
    [[ $rc -ne 0 ]] && status=1
  done
fi
if has gemv; then
  timeout 120 "$(bin "$BUILD" decode_gemv_bench)" 2>&1 | tee "$OUT/gemv_bench.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if has paged && [[ -n ${TANDEM_PAGED_CHAIN:-} ]]; then
  timeout 180 "$(bin "$BUILD" paged_attention_bench)" --chain 2>&1 | tee -a "$OUT/paged.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if has paged; then
  timeout 180 "$(bin "$BUILD" paged_attention_bench)" ${TANDEM_PAGED_QUICK:+--quick} 2>&1 | tee -a "$OUT/paged.md"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if has check; then
  timeout 420 python3 scripts/gpu/engine_check.py "$tool" "$WORK" 2>&1 | tee "$OUT/check.log" | tail -30
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if has bench && (( $(left) < 90 )); then
  echo "[gpu] bench skipped: $(left) s left in this call"
elif has bench; then
  for model in ${TANDEM_ENGINE_MODELS:-${TANDEM_ENGINE_MODEL:-dense}}; do
    echo "[gpu] bench $model"
    TANDEM_ENGINE_MODEL=$model TANDEM_ENGINE_BASE=$base_tool timeout "$(left)" python3 scripts/gpu/engine_bench.py \
      "$tool" "$WORK" ${TANDEM_ENGINE_BATCHES:-} 2>&1 | tee -a "$OUT/bench.md"
    [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
  done
fi
if has profile && (( $(left) < 60 )); then
  echo "[gpu] profile skipped: $(left) s left in this call"
elif has profile; then
  OUT=$OUT timeout "$(left)" python3 scripts/gpu/engine_profile.py "$tool" "$WORK" ${TANDEM_PROFILE_BATCHES:-} \
    2>&1 | tee "$OUT/profile.log" | grep -E "^\[profile\] batch [0-9]+ (un)?profiled|GPU busy"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
exit $status

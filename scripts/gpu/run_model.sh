#!/usr/bin/env bash
# The model's GPU checks (issue #13), one device call: builds the model stack
# standalone (workers/standalone, Release, sm_90a, the machine's LibTorch),
# runs the ops' and the model's test binaries (CPU and CUDA paths), the
# golden test against transformers (scripts/gpu/model_golden.py) and the
# forward+backward benchmark (scripts/gpu/model_bench.py). Logs under $OUT.
# Needs .gpu-deps/ carried (scripts/gpu/stage_deps.sh, run here first).
# Usage: scripts/gpu/run_model.sh [golden|bench|tests|profile ...]
#   (default: tests golden bench; profile: scripts/gpu/model_profile.py, the
#   per-kernel/per-op breakdown of tandem's step, traces to $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-model-build}
WORK=${TANDEM_GPU_WORK_DIR:-/tmp/tandem-model-work}
mkdir -p "$OUT" "$WORK"
steps=${*:-tests golden bench}
status=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "[gpu] $(date -u +%FT%TZ) model: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' | tee -a "$OUT/gpu.txt"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
tests="fused_test fused_gpu_test fused_ops_test tree_attention_op_test moe_ops_test lm_head_loss_op_test model_parameter_set_test model_transformer_test model_checkpoint_test"
targets="tandem-model-bench"  # the profile step needs only the bench
[[ " $steps " == *" tests "* ]] && targets="$targets $tests"
[[ " $steps " == *" golden "* || " $steps " == *" bench "* ]] && targets="$targets tandem-model-eval"
start=$(date +%s)
cmake -S workers/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target $targets >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
grep -E "workers/ops: Torch|CUDA path" "$OUT/build.log" | head -3
if [[ $rc -ne 0 ]]; then grep -E "error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }

if [[ " $steps " == *" tests "* ]]; then
  for t in $tests; do
    b=$(bin "$t"); [[ -n "$b" ]] || { echo "[gpu] $t not built"; continue; }
    timeout 300 "$b" >"$WORK/$t.log" 2>&1
    rc=$?
    echo "[gpu] $t rc=$rc $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$WORK/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]|Failure|error" "$WORK/$t.log" | head -12
    if (( rc > 128 )) && command -v cuda-gdb >/dev/null; then  # a crash: where (no gdb on that image)
      timeout 240 cuda-gdb -batch -ex run -ex bt "$b" >"$WORK/$t.gdb" 2>&1
      grep -E "^#[0-9]+ |signal" "$WORK/$t.gdb" | head -25
    fi
    [[ $rc -ne 0 ]] && status=1
  done
  cat "$WORK"/*_test.log > "$OUT/tests.log" 2>/dev/null
fi
if [[ " $steps " == *" golden "* ]]; then
  timeout 420 python3 scripts/gpu/model_golden.py "$(bin tandem-model-eval)" "$WORK/golden" 2>&1 | tee "$OUT/golden.log" | grep -vE "^\[golden\] ok " | tail -40
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
  echo "[gpu] golden: $(grep -c '^\[golden\] ok ' "$OUT/golden.log") ok, $(grep -c '^\[golden\] FAIL' "$OUT/golden.log") failed"
fi
left=$(( ${TANDEM_GPU_CALL_SECONDS:-590} - ($(date +%s) - start) ))
if [[ " $steps " == *" bench "* ]] && (( left < 120 )); then
  echo "[gpu] bench skipped: ${left} s left in this call"
elif [[ " $steps " == *" bench "* ]]; then
  PYTHONUNBUFFERED=1 OUT=$OUT timeout $left python3 scripts/gpu/model_bench.py "$(bin tandem-model-bench)" "$WORK/bench" 2>&1 | tee "$OUT/bench.log" | grep -vE "Warning|warn\(" | tail -30
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi
if [[ " $steps " == *" profile "* ]]; then
  PYTHONUNBUFFERED=1 OUT=$OUT timeout 400 python3 scripts/gpu/model_profile.py "$(bin tandem-model-bench)" "$WORK/profile" \
    ${TANDEM_PROFILE_MODELS:-} >"$OUT/profile.log" 2>&1
  [[ $? -ne 0 ]] && status=1
  grep -E "ms/step|busy|failed|Error" "$OUT/profile.log" | head -20
fi
exit $status

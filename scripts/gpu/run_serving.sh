#!/usr/bin/env bash
# A rollout and a teacher colocated on the H200 under `tandem run`, driven
# through `tandem phase` (issue #14 item 7; docs/inference.md "A colocated
# rollout and teacher"), one device call:
#   1-2. builds tandem-worker there (scripts/gpu/lib.sh: unpacks
#      .gpu-deps/serving.tar.xz);
#   3. saves a random ~0.35B Qwen3 (bf16, Qwen3's vocabulary and tokenizer)
#      with transformers' save_pretrained;
#   4. teacher_check.py: the teacher's /score against transformers (bf16, fp32);
#   5. runs scripts/serving_demo.sh on a CUDA copy of examples/serving.json:
#      the handoff with real device memory (the workers' device-wide
#      reading in `tandem residency`), the teacher's log-probs against the
#      rollout's (bf16).
# Logs under $OUT: build.log, teacher_check.log, serving.log, residency.txt,
# handoff.txt (the handoff log: each command's bytes and time), tasks.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
DEPS=/tmp/tandem-serving-deps
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-serving-build}
WORK=/tmp/tandem-serving-work
BIN=/tmp/tandem-serving-bin
mkdir -p "$WORK/runs"
for t in curl jq; do command -v $t >/dev/null || echo "[gpu] missing: $t"; done
. scripts/gpu/lib.sh
gpu_worker_build "$DEPS" "$BUILD" "$BIN" || exit 1

python3 - "$WORK/runs/serving-model" <<'PY' || exit 1
import sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=64, intermediate_size=3072, max_position_embeddings=4096,
                  tie_word_embeddings=True)
torch.manual_seed(0)
Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(sys.argv[1])
print("[gpu] saved", sys.argv[1], sum(p.numel() for p in Qwen3ForCausalLM(cfg).parameters()) / 1e6, "M parameters")
PY
cp "$DEPS/qwen3/"* "$WORK/runs/serving-model/"
python3 - "$ROOT/examples/serving.json" "$WORK/serving-cuda.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
for name, role in spec["roles"].items():
    role["args"] = [a for a in role["args"]] + ["--device", "cuda"]
    if name == "rollout":
        i = role["args"].index("--kv-cache-mib"); role["args"][i + 1] = "8192"
spec["handoff"].pop("gpu_memory")  # the device's total
json.dump(spec, open(sys.argv[2], "w"), indent=2)
PY
timeout 300 python3 scripts/gpu/teacher_check.py "$BIN/tandem-worker" "$WORK/runs/serving-model" "$WORK/teacher-check" ${TANDEM_TEACHER_BENCH:+--bench} \
  2>&1 | tee "$OUT/teacher_check.log"
check=${PIPESTATUS[0]}
TANDEM_BIN_DIR=$BIN SERVING_SPEC=$WORK/serving-cuda.json SERVING_LOGPROB_TOL=${SERVING_LOGPROB_TOL:-0.05} \
  timeout 400 bash scripts/serving_demo.sh "$WORK" 2>&1 | tee "$OUT/serving.log"
status=${PIPESTATUS[0]}
cp "$WORK/runs/serving.residency" "$OUT/residency.txt" 2>/dev/null
"$BIN/tandem" events "$WORK/runs/serving" --handoff >"$OUT/handoff.txt" 2>&1
tail -n 30 "$WORK"/runs/serving/tasks/*.err >"$OUT/tasks.log" 2>/dev/null
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >>"$OUT/serving.log"
(( check != 0 )) && status=1
exit $status

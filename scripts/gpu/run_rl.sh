#!/usr/bin/env bash
# The RL job on the H200 (issue #16 "Performance"; docs/benchmarks.md "The
# RL job on the H200"), one device call:
#   1-2. builds tandem-worker there (scripts/gpu/lib.sh: unpacks
#      .gpu-deps/serving.tar.xz); the prompts are .gpu-deps/gsm8k/train.jsonl
#      (copied from ../shared/data by stage_deps.sh --rl);
#   3. saves a random Qwen3-MoE of ~0.5B parameters (scripts/gpu/make_moe_model.py,
#      bf16, Qwen3's vocabulary and tokenizer);
#   4. runs the GRPO job under `tandem run` (examples of the spec below: an
#      actor and a rollout colocated on GPU 0, --device cuda, GSM8K prompts,
#      G = 8, up to RL_NEW_TOKENS new tokens a sample, RL_STEPS steps), with
#      tree packing and, with RL_FLAT=1, again without it; with RL_IPC=1,
#      again with the weights published over cuda-ipc (--weights-transport);
#      RL_TREE=0 skips the first (packed, shm) job; RL_PAIRS below;
#   5. with RL_BASELINE=1 (default), the same workload as one plain PyTorch +
#      transformers process (scripts/gpu/rl_baseline.py), for the ratio.
# TANDEM_TREE_ATTENTION and TANDEM_MOE_EXPERTS, when set, become both
# workers' --tree-attention and --moe-experts (a task does not inherit the
# caller's environment).
# RL_KEEP_RESIDENT=1: the handoff releases nothing (every tag stays on the
# GPU; handoff.phases), to measure what the releases cost a step.
# RL_ACTOR_ARGS adds actor flags to both jobs (scripts/gpu/run_agents.sh: a
# multi-turn workflow), RL_NAME (default rl) prefixes the jobs' names.
# Results under $OUT: rl.json (per-phase means after the first step, from
# metrics.jsonl; the baseline's), build.log, job logs.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
DEPS=/tmp/tandem-rl-deps
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-rl-build}
WORK=/tmp/tandem-rl-work
BIN=/tmp/tandem-rl-bin
STEPS=${RL_STEPS:-3}
PROMPTS=${RL_PROMPTS:-32}
NEW=${RL_NEW_TOKENS:-1024}
MB=${RL_MICRO_BATCH_TOKENS:-16384}
NAME=${RL_NAME:-rl}
read -r -a ACTOR_ARGS <<<"${RL_ACTOR_ARGS:-}"
mkdir -p "$WORK"
start=$(date +%s)
. scripts/gpu/lib.sh
gpu_worker_build "$DEPS" "$BUILD" "$BIN" || exit 1

model=$WORK/moe
python3 scripts/gpu/make_moe_model.py "$model" --tokenizer-dir "$DEPS/qwen3" 2>&1 | grep -v Warning | tail -3
[[ -f $model/config.json ]] || exit 1

# The job: actor + one rollout on GPU 0 (the device's memory is the ledger's capacity).
job() {  # NAME EXTRA_ACTOR_ARGS...
  local name=$1; shift
  python3 - "$WORK/$name.json" "$model" "$ROOT/.gpu-deps/gsm8k/train.jsonl" "$STEPS" "$PROMPTS" "$NEW" "$MB" "$name" "$@" <<'PY'
import json, os, sys
out, model, data, steps, prompts, new, mb, name, *extra = sys.argv[1:]
# A task's environment is tandem's (backends/task_env.h): the kernel choices
# travel as the workers' flags.
kernels = []
for var, flag in (("TANDEM_TREE_ATTENTION", "--tree-attention"), ("TANDEM_MOE_EXPERTS", "--moe-experts")):
    if os.environ.get(var):
        kernels += [flag, os.environ[var]]
spec = {
  "name": name, "backend": {"kind": "local"}, "devices": {"count": 1},
  "env": {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"},
  "run_dir": "runs/" + name,
  "roles": {
    "actor": {"worker": "actor", "gpus_per_replica": 1,
              "args": ["--model", model, "--device", "cuda", "--dataset", "gsm8k",
                       "--dataset-options", json.dumps({"path": data}), "--eval-problems", "0",
                       "--steps", steps, "--prompts-per-step", prompts, "--group-size", "8",
                       "--max-new-tokens", new, "--temperature", "1.0", "--max-prompt-tokens", "512",
                       "--lr", "1e-6", "--micro-batch-tokens", mb, "--rollouts", "1",
                       "--algorithm", json.dumps({"name": "grpo", "options": {"kl_coef": 0, "loss_agg_mode": "token-mean"}}),
                       "--request-timeout", "900", "--phase-timeout", "900"] + kernels + extra},
    "rollout": {"worker": "rollout", "replicas": 1, "gpus_per_replica": 1, "colocate_with": "actor", "ports": 1,
                "args": ["--model", model, "--device", "cuda", "--kv-cache-mib", "32768",
                         "--port-file", "rollout.{rank}.port", "--start-released"] + kernels}},
  "handoff": {"controller": "actor", "timeout_s": 600, "on_fault": "fail"}}
if os.environ.get("RL_KEEP_RESIDENT") == "1":
    # Everything stays on the GPU (it fits an 80 GB card): no phase releases
    # but the cuda-ipc exports; the resumes only bring the rollout's tags up
    # once (it starts released) and the actor's optimizer (docs/jobspec.md).
    spec["handoff"]["phases"] = {
        "rollout": {"resume": {"rollout": ["weights", "kv_cache", "cuda_graph"]}},
        "train": {"resume": {"actor": ["params", "grads", "optimizer"]}},
        "sync": {"release": {"actor": ["ipc_exports"]}, "resume": {"rollout": ["weights"]}}}
json.dump(spec, open(out, "w"), indent=1)
PY
  gpu_run_job "$WORK" "$name" "${RL_JOB_TIMEOUT:-300}" "$name"
  local rc=$?
  tail -n 20 "$WORK/runs/$name/tasks/rollout.0.err" >"$OUT/$name.rollout.log" 2>/dev/null
  grep -E '^\[run\] actor/0 step|learning|time per step|tree packing|residency peak' "$OUT/$name.err" | tail -12
  return $rc
}
# RL_PAIRS=N (with RL_FLAT=1) runs the packed and the flat job N times,
# alternating (NAME-tree, NAME-flat, NAME-tree2, NAME-flat2, ...): a 3-step
# job's train time varies by ~10% from run to run (docs/benchmarks.md).
names=()
for ((pair = 1; pair <= ${RL_PAIRS:-1}; ++pair)); do
  suffix=$( ((pair > 1)) && echo "$pair" )
  [[ ${RL_TREE:-1} == 1 ]] && job "$NAME-tree$suffix" "${ACTOR_ARGS[@]}" && names+=("$NAME-tree$suffix")
  [[ ${RL_FLAT:-0} == 1 ]] && job "$NAME-flat$suffix" --no-tree-packing "${ACTOR_ARGS[@]}" && names+=("$NAME-flat$suffix")
done
[[ ${RL_IPC:-0} == 1 ]] && job "$NAME-ipc" --weights-transport cuda-ipc "${ACTOR_ARGS[@]}"
if [[ ${RL_BASELINE:-1} == 1 ]]; then
  # The same prompts (GSM8K questions), G, lengths and loss; EOS ignored so
  # that every response is full length (tandem's random model rarely stops).
  budget=$(( ${RL_CALL_BUDGET:-540} - ($(date +%s) - start) ))
  echo "[gpu] baseline: ${budget} s left"
  timeout $((budget + 30)) python3 scripts/gpu/rl_baseline.py --model "$model" --steps "$STEPS" --warmup 1 \
    --prompts-per-step "$PROMPTS" --group-size 8 --max-new-tokens "$NEW" --ignore-eos \
    --prompts "$ROOT/.gpu-deps/gsm8k/train.jsonl" --time-budget "$budget" --out "$OUT/baseline.json" \
    >"$OUT/baseline.log" 2>&1
  echo "[gpu] baseline rc=$?"; tail -8 "$OUT/baseline.log"
fi
python3 scripts/gpu/summarize_runs.py "$OUT" "$NAME" "${names[@]}" "$NAME-ipc" --with "baseline=$OUT/baseline.json"

#!/usr/bin/env bash
# Multi-turn agent RL on the GPU (issue #20 "Examples"; docs/agents.md "On
# the GPU"), one device call:
#   1. builds tandem-worker (scripts/gpu/lib.sh);
#   2. AGENTS_EXAMPLES (default "multiturn toolcalls"): each examples/<name>.json
#      as a CUDA job on GPU 0 (every role --device cuda, the base's sft there
#      too with the `base` preset, for AGENTS_SFT_SECONDS when set, else its
#      steps; one rollout), its evals and step times into agents.json;
#   3. with AGENTS_TREE=1 (default), the actor step on multi-turn batches with
#      and without tree packing (scripts/gpu/run_rl.sh, RL_NAME=mt): a random
#      Qwen3-MoE of ~0.5B, GSM8K questions, the multi-turn-feedback workflow
#      of AGENTS_TURNS turns (a random model is never right: every episode
#      takes them all) with per-turn advantages (each turn one trajectory, its
#      episode's history its prompt: the tree shares it), AGENTS_NEW_TOKENS a
#      turn, AGENTS_STEPS steps each; mt.json.
# Results under $OUT: agents.json, mt.json, <job>.err (tandem run's output),
# <job>.actor.log, <job>.metrics.jsonl.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
WORK=/tmp/tandem-agents-work
export TANDEM_GPU_BUILD_DIR=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-gpu-build}
. scripts/gpu/lib.sh
mkdir -p "$WORK"
gpu_worker_build /tmp/tandem-agents-deps "$TANDEM_GPU_BUILD_DIR" /tmp/tandem-agents-bin || exit 1

example() {  # NAME: examples/NAME.json on GPU 0
  local name=$1
  python3 - "examples/$name.json" "$WORK/$name.json" <<'PY' || return 1
import json, os, sys
src, out = sys.argv[1:]
spec = json.load(open(src))
spec["devices"], spec["run_dir"] = {"count": 1}, "runs/" + spec["name"]
spec["handoff"].pop("gpu_memory", None)  # the device's memory is the ledger's capacity
spec["handoff"]["timeout_s"] = 600
spec.pop("env", None)
roles = spec["roles"]
for r in roles.values():  # one GPU: every role on it, one rollout
    a = r["args"]
    a += ["--device", "cuda"]
    if "--threads" in a: i = a.index("--threads"); del a[i:i + 2]
    if "--kv-cache-mib" in a: a[a.index("--kv-cache-mib") + 1] = "4096"
    if "--rollouts" in a: a[a.index("--rollouts") + 1] = "1"
    if "--preset" in a: a[a.index("--preset") + 1] = "base"  # head dim 64: CUDA's tree attention (small's is 48)
    if r.get("worker") == "sft" and "AGENTS_SFT_SECONDS" in os.environ:  # a stronger base: sft for that long
        for flag, value in [("--max-steps", "100000"), ("--time-limit", os.environ["AGENTS_SFT_SECONDS"]), ("--lr", "1e-3")]:
            if flag in a: a[a.index(flag) + 1] = value
            else: a += [flag, value]
    if r.get("worker") == "rollout": r["replicas"] = 1
    if "gpus_per_replica" in r: r["gpus_per_replica"] = 1
roles["base"]["gpus_per_replica"] = 1; roles["base"]["colocate_with"] = "actor"  # a plain task on the job's GPU
json.dump(spec, open(out, "w"), indent=1)
PY
  gpu_run_job "$WORK" "$name" "${AGENTS_JOB_TIMEOUT:-240}" "$name"
  grep -h '"eval"' "$WORK/runs/$name/tasks/base.0.out" 2>/dev/null | tail -1 >"$OUT/$name.sft.jsonl"
  grep -h 'eval sample' "$WORK/runs/$name/tasks/actor.0.err" 2>/dev/null >"$OUT/$name.samples.log"
  grep -E '^\[run\] actor/0 step' "$OUT/$name.err" | tail -2
}
for name in ${AGENTS_EXAMPLES-multiturn toolcalls}; do example "$name"; done
python3 scripts/gpu/summarize_runs.py "$OUT" agents ${AGENTS_EXAMPLES-multiturn toolcalls}

if [[ ${AGENTS_TREE:-1} == 1 ]]; then
  turns=${AGENTS_TURNS:-3}
  RL_NAME=mt RL_BASELINE=0 RL_FLAT=1 RL_STEPS=${AGENTS_STEPS:-3} RL_NEW_TOKENS=${AGENTS_NEW_TOKENS:-256} \
    RL_ACTOR_ARGS="--workflow {\"name\":\"multi-turn-feedback\",\"options\":{\"max_turns\":$turns}} --advantage-unit turn --episode-threads 256" \
    bash scripts/gpu/run_rl.sh
fi

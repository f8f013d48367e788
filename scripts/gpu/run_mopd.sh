#!/usr/bin/env bash
# MOPD on the H200 (issue #18 item 5; docs/mopd.md "On the H200"), one
# device call: builds tandem-worker (scripts/gpu/lib.sh), then runs, under
# `tandem run` on GPU 0, a CUDA copy of examples/mopd.json at a larger
# scale (MOPD_PRESET, default `base`: 16 layers, hidden 768):
#   1. three sft roles train the two teachers (sums, products) and the
#      student's base (subtraction: it knows the format, not the skills),
#      each for at most MOPD_SFT_SECONDS;
#   2. the student distills from both teachers (mopd, top-k term, no task
#      reward) for MOPD_STEPS steps (MOPD_SKIP_MOPD=1: not); with MOPD_GRPO=1, then the same
#      student trained by GRPO alone (the verifier's reward on the same
#      prompts, no teachers) for the same steps, for the comparison the
#      issue asks for.
# Results under $OUT: <job>.metrics.jsonl, <job>.err (tandem run's output),
# <job>.actor.log, mopd.json (held-out accuracy per skill at each eval of each
# job, the teachers' and the base's, per-phase step times).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
WORK=/tmp/tandem-mopd-work
STEPS=${MOPD_STEPS:-150}
PRESET=${MOPD_PRESET:-base}
SFT_S=${MOPD_SFT_SECONDS:-120}
. scripts/gpu/lib.sh
mkdir -p "$WORK"
gpu_worker_build /tmp/tandem-mopd-deps "${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-mopd-build}" /tmp/tandem-mopd-bin || exit 1

# The job: examples/mopd.json on one GPU, every role --device cuda.
job() {  # NAME ALGORITHM(mopd|grpo)
  local name=$1 algo=$2
  python3 - examples/mopd.json "$WORK/$name.json" "$name" "$algo" "$STEPS" "$PRESET" "$SFT_S" <<'PY' || return 1
import json, sys
src, out, name, algo, steps, preset, sft_s = sys.argv[1:]
spec = json.load(open(src))
spec["name"], spec["devices"], spec["run_dir"] = name, {"count": 1}, "runs/mopd-gpu"
spec["handoff"].pop("gpu_memory", None)  # the device's memory is the ledger's capacity
spec["handoff"]["timeout_s"] = 600
spec.pop("env", None)
roles = spec["roles"]
def arg(role, flag, value):
    a = roles[role]["args"]
    if flag in a: a[a.index(flag) + 1] = value
    else: a += [flag, value]
for r in roles.values():  # one GPU: every role on it, one rollout
    r["args"] += ["--device", "cuda"]
    if "gpus_per_replica" in r: r["gpus_per_replica"] = 1
    if r.get("worker") == "rollout": r["replicas"] = 1
    if "--threads" in r["args"]: i = r["args"].index("--threads"); del r["args"][i:i + 2]
for r in ["add_sft", "mul_sft", "base"]:  # on the job's GPU too (a plain task there, no handoff)
    roles[r]["gpus_per_replica"] = 1; roles[r]["colocate_with"] = "actor"
    arg(r, "--preset", preset); arg(r, "--max-steps", "100000"); arg(r, "--time-limit", sft_s)
    arg(r, "--lr", "1e-3"); arg(r, "--eval-problems", "512")
# The student's base knows the format (subtraction), not the two skills.
arg("base", "--dataset-options", json.dumps({"level": 1, "ops": ["-"], "style": "plain"}))
arg("rollout", "--kv-cache-mib", "4096")
objectives = json.loads(roles["actor"]["args"][roles["actor"]["args"].index("--objectives") + 1])
if algo == "grpo":  # the same prompts, the verifier's reward, no teachers
    for o in objectives.values(): o["kind"] = "rl"; o.pop("teacher", None)
    del roles["teacher_add"], roles["teacher_mul"]
    arg("actor", "--algorithm", json.dumps({"name": "grpo", "options": {"kl_coef": 0}}))
    arg("actor", "--group-size", "8"); arg("actor", "--prompts-per-step", "32")
else:
    arg("actor", "--algorithm", json.dumps({"name": "mopd", "options": {"distill": {"rl_coef": 0, "distill_coef": 0, "top_k": 8}}}))
    arg("actor", "--group-size", "1"); arg("actor", "--prompts-per-step", "256")
arg("actor", "--objectives", json.dumps(objectives)); arg("actor", "--rollouts", "1")
arg("actor", "--steps", steps); arg("actor", "--lr", "1e-4" if algo == "grpo" else "1e-3")
arg("actor", "--eval-every", "25"); arg("actor", "--eval-problems", "256"); arg("actor", "--warmup-steps", "10")
json.dump(spec, open(out, "w"), indent=1)
PY
  gpu_run_job "$WORK" "$name" "${MOPD_JOB_TIMEOUT:-420}" mopd-gpu
  local rc=$?
  for t in add_sft mul_sft base; do tail -n 30 "$WORK/runs/mopd-gpu/tasks/$t.0.err" >"$OUT/$name.$t.log" 2>/dev/null; done
  grep -h '"eval"' "$WORK/runs/mopd-gpu/tasks/"{add_sft,mul_sft,base}.0.out 2>/dev/null | tail -3 >"$OUT/$name.sft.jsonl"
  grep -E '^\[run\] actor/0 step' "$OUT/$name.err" | tail -3
  return $rc
}
[[ ${MOPD_SKIP_MOPD:-0} == 1 ]] || job mopd-gpu mopd
[[ ${MOPD_GRPO:-0} == 1 ]] && job grpo-gpu grpo
python3 scripts/gpu/summarize_runs.py "$OUT" mopd mopd-gpu grpo-gpu

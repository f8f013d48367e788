#!/usr/bin/env bash
# A rollout and a teacher colocated on one device, under `tandem run`,
# driven through `tandem phase` (docs/inference.md "A colocated rollout and
# teacher"): examples/serving.json on the embedded local backend.
#   1. a small model, trained by `tandem-worker sft` unless WORK/runs/serving-model exists;
#   2. `tandem run examples/serving.json` in the background;
#   3. phase rollout: the teacher's weights are released, /generate samples
#      with log-probs;
#   4. phase teacher: the rollout's weights and KV cache are released, a
#      /generate sent now waits; /score gives the teacher's log-probs of the
#      sample, which must equal the rollout's (the same model);
#   5. phase rollout again: the waiting request completes;
#   6. each phase's residency (the workers' own reports) is checked, and the
#      job is cancelled: every task exits 0.
# Exits non-zero, saying why, when a step or a check fails (ctest runs it:
# workers/roles/CMakeLists.txt). Needs curl and jq (scripts/setup.sh --test).
# Usage: scripts/serving_demo.sh [WORK_DIR]   (default: the repository root)
#   TANDEM_BIN_DIR (default build/bin), SERVING_SFT_STEPS (default 60),
#   SERVING_SPEC (default examples/serving.json; scripts/gpu/run_serving.sh
#   gives a CUDA one), SERVING_LOGPROB_TOL (default 1e-3: CPU fp32).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${TANDEM_BIN_DIR:-$SRC/build/bin}" && pwd)
WORK=$(cd "${1:-$SRC}" && pwd)
cd "$WORK"
mkdir -p runs
fail() { echo "[serving] FAIL: $*" >&2; exit 1; }

model=runs/serving-model
if [[ ! -f $model/config.json ]]; then
  echo "[serving] 1/6 training a small model into $model (tandem-worker sft --preset tiny)"
  "$BIN/tandem-worker" sft --preset tiny --max-steps "${SERVING_SFT_STEPS:-60}" --eval-problems 4 \
    --eval-max-new-tokens 8 --threads 1 --out "$model" --log runs/serving-model.log
fi

echo "[serving] 2/6 tandem run examples/serving.json"
state=$(mktemp -d "${TMPDIR:-/tmp}/tandem-serving-XXXXXX")
rm -f runs/serving/rollout.port runs/serving/teacher.port
"$BIN/tandem" run "${SERVING_SPEC:-$SRC/examples/serving.json}" --state-dir "$state" --gpus 0 >runs/serving.out 2>runs/serving.err &
run_pid=$!
cleanup() {
  if kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi
  rm -rf "$state"
}
trap cleanup EXIT
T=("$BIN/tandem" --socket "$state/tandemd.sock")
job=
for _ in $(seq 600); do
  job=$(sed -n 's/^\[run\] job \([^ ]*\)  run dir.*/\1/p' runs/serving.err | head -1)
  [[ -n $job && -s runs/serving/rollout.port && -s runs/serving/teacher.port ]] && break
  kill -0 "$run_pid" 2>/dev/null || { cat runs/serving.err >&2; fail "tandem run ended early"; }
  sleep 0.1
done
[[ -s runs/serving/teacher.port ]] || { cat runs/serving.err >&2; fail "the workers did not start in 60 s"; }
rollout="http://127.0.0.1:$(head -1 runs/serving/rollout.port)"
teacher="http://127.0.0.1:$(head -1 runs/serving/teacher.port)"
echo "[serving]     job $job: rollout $rollout, teacher $teacher"

# The bytes ROLE's TAG holds now, from the workers' own reports (0 when released).
resident() {
  "${T[@]}" residency "$job" --json |
    jq --arg role "$1" --arg tag "$2" '[.gpus[].holders[] | select(.role == $role and .tag == $tag) | .bytes] | add // 0'
}
expect_resident() {  # ROLE TAG yes|no
  local bytes; bytes=$(resident "$1" "$2")
  if [[ $3 == yes ]]; then ((bytes > 0)) || fail "$1's $2 should be resident; the workers report $bytes bytes"
  else ((bytes == 0)) || fail "$1's $2 should be released; the workers report $bytes bytes"; fi
}

echo "[serving] 3/6 tandem phase $job rollout"
"${T[@]}" phase "$job" rollout
expect_resident rollout weights yes; expect_resident rollout kv_cache yes; expect_resident teacher weights no
text=$(curl -sSf "$rollout/generate" -d '{"text": "12+7=", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}') ||
  fail "/generate (text)"
echo "[serving]     /generate \"12+7=\": $(jq -c '{text, output_ids}' <<<"$text")"
prompt='[49, 50, 43, 55, 61]'
sample=$(curl -sSf "$rollout/generate" -d "{\"input_ids\": $prompt, \"return_logprob\": true,
  \"sampling_params\": {\"temperature\": 1.0, \"max_new_tokens\": 12, \"seed\": 5, \"ignore_eos\": true}}") ||
  fail "/generate (sampled)"
echo "[serving]     /generate sampled: $(jq -c '{output_ids, weight_version: .meta_info.weight_version}' <<<"$sample")"

echo "[serving] 4/6 tandem phase $job teacher"
"${T[@]}" phase "$job" teacher
expect_resident rollout weights no; expect_resident rollout kv_cache no; expect_resident teacher weights yes
"${T[@]}" residency "$job" | tee runs/serving.residency
curl -sSf "$rollout/generate" -d "{\"input_ids\": $prompt, \"sampling_params\": {\"temperature\": 0, \"max_new_tokens\": 4}}" \
  >runs/serving.waited &
waiting=$!
# The teacher scores the rollout's sample: the prompt, then the output, each output token scored.
score=$(jq -c --argjson p "$prompt" '{input_ids: ($p + .output_ids), score_from: ($p | length)}' <<<"$sample" |
  curl -sSf "$teacher/score" -d @-) || fail "/score"
echo "[serving]     /score: $(jq -c '.results[0].token_logprobs | map(. * 1000 | round / 1000)' <<<"$score")"
worst=$(jq -n --argjson a "$(jq -c '[.meta_info.output_token_logprobs[][0]]' <<<"$sample")" \
  --argjson b "$(jq -c '.results[0].token_logprobs' <<<"$score")" \
  'if ($a | length) != ($b | length) then 1e9 else [range($a | length) | ($a[.] - $b[.]) | fabs] | max end')
jq -e -n --argjson w "$worst" --argjson tol "${SERVING_LOGPROB_TOL:-1e-3}" '$w < $tol' >/dev/null ||
  fail "the teacher's log-probs differ from the rollout's by $worst (same model: they must agree)"
echo "[serving]     the teacher's log-probs of the sample agree with the rollout's within ${SERVING_LOGPROB_TOL:-1e-3} (largest difference $worst)"
sleep 1
kill -0 "$waiting" 2>/dev/null || fail "a /generate sent in the teacher phase was answered before the rollout phase"

echo "[serving] 5/6 tandem phase $job rollout"
"${T[@]}" phase "$job" rollout
wait "$waiting" || fail "the waiting /generate failed"
echo "[serving]     the request sent in the teacher phase: $(jq -c '{output_ids}' runs/serving.waited)"
expect_resident teacher weights no

echo "[serving] 6/6 tandem cancel $job"
"${T[@]}" cancel "$job" >/dev/null
rc=0; wait "$run_pid" || rc=$?
((rc == 4)) || { cat runs/serving.err >&2; fail "tandem run exited $rc, not 4 (cancelled)"; }
for t in rollout teacher; do
  jq -e '.exit_code == 0 and .signal == 0' "runs/serving/tasks/$t.0.exit" >/dev/null ||
    fail "$t did not exit 0 on SIGTERM: $(cat "runs/serving/tasks/$t.0.exit")"
done
grep -E '^\[run\]   (rollout|teacher)' runs/serving.err
echo "[serving] PASS: logs in runs/serving/tasks/, residency: tandem residency runs/serving"

#!/usr/bin/env bash
# examples/mopd.json under `tandem run` on the embedded local backend, CPU,
# made small (tiny models of two sft steps, three MOPD steps; the checks
# are on the job's mechanics, docs/mopd.md has the learning run), both
# teachers serving the student's own starting model:
#   - the job ends by itself, exit 0, every task exit 0;
#   - each step runs ROLLOUT -> TEACHER(add's) -> TEACHER(mul's) -> TRAIN ->
#     SYNC: each teacher's weights resumed in its own phase only, released
#     before the other teacher's resume and before TRAIN (handoff.jsonl);
#     the ledger never holds two teachers at once (residency.jsonl);
#   - metrics.jsonl has the distill loss over every response token (every
#     prompt is routed), seconds/teacher per teacher, and the held-out
#     accuracy per objective; at step 1 (the student still its starting
#     model) the teachers' log-probs are the rollouts' to float rounding:
#     teacher_log_ratio ~ 0, so the tokens, positions and prompts the
#     teachers score are the student's own; and the top-k term ~ 0 with
#     the student's mass on the teachers' top-k their own, so each top-k
#     row lines up with the student's position (its extra labels);
#   - a teacher killed (SIGKILL) is a failed job naming it, never a hang.
# Needs tandem, tandem-worker and jq (scripts/setup.sh --test).
NAME=mopd-job
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/runs/mopd.err $work/runs/mopd/tasks/*.err"
run_pid=
on_exit 'if [[ -n $run_pid ]] && kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi'

# The example with tiny models and three steps.
small=$work/mopd.json
jq '
  def setarg($flag; $value): (index($flag) as $i | if $i == null then . + [$flag, $value] else .[$i + 1] = $value end);
  .roles |= with_entries(
    if .value.worker == "sft" then .value.args |= (setarg("--preset"; "tiny") | setarg("--max-steps"; "2")
                                                   | setarg("--eval-problems"; "2") | setarg("--eval-max-new-tokens"; "4"))
    elif .value.worker == "teacher" then .value.args |= setarg("--model"; "base")
    elif .key == "actor" then .value.args |= (setarg("--steps"; "3") | setarg("--prompts-per-step"; "4")
                                              | setarg("--max-new-tokens"; "8") | setarg("--eval-problems"; "4")
                                              | setarg("--eval-every"; "0") | setarg("--wait-for-model"; "120"))
    else . end)' "$SRC/examples/mopd.json" >"$small"
mkdir -p runs
run_job "$small" mopd 300
run=runs/mopd
for t in actor.0 rollout.0 rollout.1 teacher_add.0 teacher_mul.0 add_sft.0 mul_sft.0 base.0; do
  jq -e '.exit_code == 0 and .signal == 0' "$run/tasks/$t.exit" >/dev/null || fail "$t: $(cat "$run/tasks/$t.exit")"
done

h=$run/handoff.jsonl
# The phases in the order they ran (one entry per phase entered).
order=$(jq -r -s '[.[] | .phase | sub("SYNC\\(.*\\)"; "SYNC")] | reduce .[] as $p ([]; if (length > 0 and .[-1] == $p) then . else . + [$p] end)
                  | join(" ")' "$h")
want_cycle="ROLLOUT TEACHER(0) TEACHER(1) TRAIN SYNC"
[[ $order == *"$want_cycle $want_cycle $want_cycle"* ]] ||
  fail "phases ran as: $order (expected three cycles of $want_cycle)"
resume='select(.command == "resume" and .tag == "weights" and .outcome == "ok")'
for teacher in teacher_add teacher_mul; do
  phases=$(jq -r -s "[.[] | $resume | select(.role == \"$teacher\") | .phase] | unique | join(\" \")" "$h")
  n=$(jq -s "[.[] | $resume | select(.role == \"$teacher\")] | length" "$h")
  [[ $phases == TEACHER* && $phases != *" "* && $n == 3 ]] ||
    fail "$teacher's weights were resumed $n times in phases '$phases' (3 times, in its own TEACHER phase)"
done
# Never two teachers resident at once: replay residency.jsonl.
both=$(jq -s '[foreach (.[] | select(.tag == "weights" and (.role | startswith("teacher_")))) as $r ({};
               .[$r.role] = $r.bytes; [.[] | select(. > 0)] | length)] | max // 0' "$run/residency.jsonl")
((both <= 1)) || fail "two teachers were resident at once (residency.jsonl)"

m=$run/metrics.jsonl
steps=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m")
[[ $steps == "[1,2,3]" ]] || fail "metrics.jsonl steps $steps, expected [1,2,3]"
for key in distill/distill_loss distill/teacher_log_ratio distill/tokens distill/topk_loss seconds/teacher seconds/teacher/teacher_add \
           seconds/teacher/teacher_mul accuracy/add accuracy/mul; do
  jq -e -s --arg k "$key" 'map(select(.["reward/mean"] != null)) | all(has($k))' "$m" >/dev/null ||
    fail "a step line lacks $key: $(grep -m1 reward "$m")"
done
jq -e -s 'map(select(.["reward/mean"] != null)) | all(.["distill/tokens"] > 0)' "$m" >/dev/null ||
  fail "no routed tokens: $(grep -m1 reward "$m")"
jq -e -s 'map(select(.step == 1 and .["reward/mean"] != null))[0] | (.["distill/teacher_log_ratio"] | fabs) < 1e-4' \
  "$m" >/dev/null || fail "step 1: the teachers (the student's own start) disagree with the rollouts: $(grep -m1 reward "$m")"
jq -e -s 'map(select(.step == 1 and .["reward/mean"] != null))[0]
          | (.["distill/topk_loss"] | fabs) < 1e-4 and .["distill/topk_teacher_mass"] > 0
            and ((.["distill/topk_student_mass"] - .["distill/topk_teacher_mass"]) | fabs) < 1e-4' \
  "$m" >/dev/null || fail "step 1: the teachers' top-k and the student's disagree: $(grep -m1 reward "$m")"
jq -e -s 'map(select(.final == true)) | length == 1 and (.[0] | has("eval/add/accuracy") and has("eval/mul/accuracy"))' \
  "$m" >/dev/null || fail "the final line lacks eval/<objective>/accuracy: $(tail -1 "$m")"
grep -E '^\[run\] (actor/0 step|job .* succeeded)' runs/mopd.err

# A teacher killed mid-run: the job fails (on_fault fail), naming why, in bounded time.
jq '.roles.actor.args |= (index("--steps") as $i | .[$i + 1] = "50")' "$small" >"$work/mopd-kill.json"
"$BIN/tandem" run "$work/mopd-kill.json" --state-dir "$state" --gpus 0,1 >runs/kill.out 2>runs/kill.err &
run_pid=$!
wait_line runs/kill.err '^\[run\] actor/0 step 1:'
pid=$(worker_pid runs/kill.err teacher_mul 0)
[[ $pid =~ ^[0-9]+$ ]] || fail "no pid of teacher_mul.0"
kill -9 "$pid"
timeout 200 tail --pid="$run_pid" -f /dev/null || fail "the job did not end within 200 s of the teacher's SIGKILL"
rc=0; wait "$run_pid" || rc=$?
run_pid=
((rc != 0)) || fail "the job with a killed teacher exited 0"
grep -q "teacher_mul" runs/kill.err || fail "the failure does not name teacher_mul: $(tail -5 runs/kill.err)"
echo "[mopd-job] PASS: 3 MOPD steps, each teacher resident only in its own phase, distill metrics per step;" \
  "a killed teacher fails the job (exit $rc)"

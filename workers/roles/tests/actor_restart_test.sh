#!/usr/bin/env bash
# The RL job's faults (issue #16 "Reliability"; docs/rl.md "Checkpoints and
# resume", "Faults"): examples/grpo.json, 6 steps, a checkpoint every 2,
# handoff.on_fault "restart", under `tandem run` on the embedded local
# backend, CPU, a base model of two sft steps (the checks are on mechanics):
#   1. once step 3's metrics line is written, the actor is killed with
#      SIGKILL: the daemon restarts it, it resumes from the checkpoint of
#      step 2 (metrics.jsonl cut back to step 2: step 3 is trained again,
#      never counted twice) and publishes that model past the group's
#      newest version before its first rollout;
#   2. once step 5's line is written, rollout 1 is killed with SIGKILL: the
#      daemon restarts it and reloads the last published version; the
#      actor waits for it (its samples must be of the current version);
#   3. the job ends succeeded, every task exit 0; metrics.jsonl holds steps
#      1..6 once each; every sample of a step came from the version the
#      actor published before it;
#   4. run again over the same run dir (a new job), the actor resumes from
#      the last checkpoint (step 6), trains nothing more and ends.
# Needs tandem, tandem-worker and jq (scripts/setup.sh --test).
NAME=actor-restart
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/runs/restart.err $work/runs/again.err"
run_pid=
on_exit 'if [[ -n $run_pid ]] && kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi'
make_base
jq '.roles.actor.args |= (map(if . == "4" then "6" else . end) + ["--checkpoint-dir", "checkpoints", "--checkpoint-every", "2",
      "--phase-timeout", "120"])
    | .roles.actor.args |= (. as $a | [range(length)] | map(select($a[.] != "--eval-every" and (. == 0 or $a[. - 1] != "--eval-every"))) | map($a[.]))
    | .handoff.on_fault = "restart"' "$SRC/examples/grpo.json" >restart.json
jq -e '.roles.actor.args | index("6") and (index("--eval-every") | not)' restart.json >/dev/null ||
  fail "restart.json: $(jq -c .roles.actor.args restart.json)"

run=runs/grpo
m=$run/metrics.jsonl
steps() { jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m" 2>/dev/null || echo "[]"; }
wait_step() {  # STEP: until metrics.jsonl has that step's line
  for _ in $(seq 1800); do
    jq -e -s --argjson s "$1" 'any(.step == $s and .["reward/mean"] != null)' "$m" >/dev/null 2>&1 && return 0
    kill -0 "$run_pid" 2>/dev/null || fail "the job ended before step $1: $(tail -3 runs/restart.err)"
    sleep 0.1
  done
  fail "no step $1 in 180 s"
}

"$BIN/tandem" run restart.json --state-dir "$state" --gpus 0,1 >runs/restart.out 2>runs/restart.err &
run_pid=$!
wait_step 3
actor=$(worker_pid runs/restart.err actor 0)
[[ $actor =~ ^[0-9]+$ ]] || fail "no pid for actor 0"
kill -KILL "$actor"
echo "[actor-restart] killed the actor (pid $actor) after step 3"
wait_step 5
grep -q "resumed from .*step-0*2" "$run/tasks/actor.0.err" || fail "the actor did not resume from step 2"
rollout=$(worker_pid runs/restart.err rollout 1)
[[ $rollout =~ ^[0-9]+$ ]] || fail "no pid for rollout.1"
kill -KILL "$rollout"
echo "[actor-restart] killed rollout 1 (pid $rollout) after step 5"
rc=0
timeout 240 tail --pid="$run_pid" -f /dev/null || fail "the job did not end in 240 s"
wait "$run_pid" || rc=$?
run_pid=
((rc == 0)) || fail "tandem run exited $rc"
for t in actor.0 rollout.0 rollout.1; do
  jq -e '.exit_code == 0 and .signal == 0' "$run/tasks/$t.exit" >/dev/null || fail "$t: $(cat "$run/tasks/$t.exit")"
done
[[ $(steps) == "[1,2,3,4,5,6]" ]] || fail "metrics.jsonl steps $(steps), expected [1,2,3,4,5,6] once each"
# Each step's samples came from the version published before it: after the
# resume the actor published step 2's model as a new version and went on
# from it, one version a step.
versions=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .["weight_version/min"]]' "$m")
jq -e -n --argjson v "$versions" '$v[0:2] == [0,1] and ([range(2; 5) | $v[. + 1] - $v[.]] | all(. == 1)) and $v[2] > 2' \
  >/dev/null || fail "weight_version/min per step $versions"
echo "[actor-restart] steps $(steps), versions $versions"
grep -E '^[0-9:.]+ +(actor.0|rollout.1) +(restarting|running|exited|failed)' runs/restart.err | head -8 || true
grep -q "rollout 1: .*asking again\|phase .*asking again" "$run/tasks/actor.0.err" ||
  echo "[actor-restart] note: the actor never had to ask again (rollout 1 came back between requests)"

# 4. The same job again over the run dir: it resumes from step 6 and ends.
"$BIN/tandem" run restart.json --state-dir "$state" --gpus 0,1 >runs/again.out 2>runs/again.err || fail "the second run: $(tail -5 runs/again.err)"
grep -q "resumed from .*step-0*6" "$run/tasks/actor.0.err" || fail "the second run did not resume from step 6"
[[ $(steps) == "[1,2,3,4,5,6]" ]] || fail "after the second run, metrics.jsonl steps $(steps)"
jq -e -s 'map(select(.final == true)) | length == 1' "$m" >/dev/null || fail "metrics.jsonl has not exactly one final line"
echo "[actor-restart] PASS: the actor and a rollout killed mid-run, the job went on; each step counted once; a second run resumed"

#!/usr/bin/env bash
# Data-parallel actor replicas (issue #16 item 4; docs/rl.md "Data
# parallel") under `tandem run` on the embedded local backend, CPU (gloo),
# a base model of two sft steps whose rewards are all 0, so the algorithm
# has an entropy bonus for gradients that are not 0:
#   1. examples/grpo.json, 4 steps, --optimizer muon, once with one actor
#      (its AdamW part staged: --optimizer-residency staged, 1 MiB buffers)
#      and once with two replicas (`replicas: 2`, `ports: 2`: the second
#      serves the weights to the rollouts, --weights-transport nccl), the same
#      seed: both end exit 0
#      (every task); replica 1 trained steps 1..4 on its share; rank 0
#      found the replicas' parameters identical after the last step; step 1
#      (the same weights and seeds: the same samples) logs the same reward
#      and response length and the same grad norm and entropy up to the
#      reduction order (1e-4 relative) in both runs;
#   2. two replicas, AdamW's state sharded between them (--optimizer-shard,
#      gathered for each checkpoint), a checkpoint every 2 steps, handoff.on_fault
#      "restart": once step 3's line is written, replica 1 is killed with
#      SIGKILL; rank 0's next collective fails, the daemon restarts both,
#      they meet again and resume from step 2's checkpoint; the job ends
#      succeeded, steps 1..6 in metrics.jsonl once each;
#   3. resharding (issue #17): the fault run's step-2 checkpoint restored
#      into one actor (2 ranks -> 1), which trains steps 3..6; that run's
#      step-4 checkpoint restored into two replicas (1 -> 2, each keeping
#      its half of AdamW's state), which train 5..6. A step after a restore starts from the same weights as the
#      step it repeats: the same reward and response length, the grad norm
#      and entropy up to the reduction order (1e-4 relative);
#   4. a rank 0 of two without a leased port exits 2 naming what the role
#      lacks ("ports": 1).
# Needs tandem, tandem-worker and jq (scripts/setup.sh --test).
NAME=actor-dp
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/runs/one.err $work/runs/two.err $work/runs/fault.err"
run_pid=
on_exit 'if [[ -n $run_pid ]] && kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi'
make_base
algorithm='{"name": "grpo", "options": {"entropy_coef": 0.05}}'
spec() {  # NAME REPLICAS [jq filter]: examples/grpo.json as NAME.json
  jq --arg n "$1" --argjson r "$2" --arg a "$algorithm" '.name = $n | .run_dir = "runs/" + $n
      | .roles.actor.args += ["--algorithm", $a]
      | if $r > 1 then .roles.actor += {"replicas": $r, "gpus_per_replica": 1, "ports": 1} else . end
      | '"${3:-.}" "$SRC/examples/grpo.json" >"$1.json"
  jq -e '.roles.actor.args | index("--algorithm") as $i | .[$i + 1] | fromjson | .options.entropy_coef == 0.05' \
    "$1.json" >/dev/null || fail "$1.json: $(jq -c .roles.actor.args "$1.json")"
}
step_line() { jq -c --argjson s "$2" 'select(.step == $s and .["reward/mean"] != null)' "runs/$1/metrics.jsonl"; }

# 1. One actor, then two replicas.
spec one 1 '.roles.actor.args += ["--optimizer", "muon", "--optimizer-residency", "staged", "--optimizer-slot-mib", "1"]'
spec two 2 '.roles.actor.args += ["--optimizer", "muon", "--weights-transport", "nccl"] | .roles.actor.ports = 2'

run_job one.json one
run_job two.json two
for t in actor.0 actor.1 rollout.0 rollout.1; do
  jq -e '.exit_code == 0 and .signal == 0' "runs/two/tasks/$t.exit" >/dev/null || fail "two: $t: $(cat "runs/two/tasks/$t.exit")"
done
for s in 1 2 3 4; do
  grep -q "replica 1 step $s: [1-9][0-9]* trajectories of 16" runs/two/tasks/actor.1.err || fail "replica 1 did not train step $s"
done
grep -q "data-parallel rank 0 of 2 (gloo" runs/two/tasks/actor.0.err || fail "rank 0 did not lead a gloo group"
# Its weights went to the rollouts over nccl, the store on its second leased port.
for r in 0 1; do
  grep -q "loaded weights version 4 from nccl:" "runs/two/tasks/rollout.$r.err" || fail "two: rollout $r: not over nccl"
done
grep -q "optimizer: muon, state staged through 2 x 1 MiB buffers" runs/one/tasks/actor.0.err ||
  fail "one: not Muon with AdamW staged"
grep -q "step 4: the 2 replicas hold the same parameters" runs/two/tasks/actor.0.err ||
  fail "rank 0 did not find the replicas identical after step 4"
a=$(step_line one 1)
b=$(step_line two 1)
echo "[actor-dp] step 1, one actor: $(jq -c '{grad_norm, "loss/entropy_mean", "response_length/mean"}' <<<"$a")"
echo "[actor-dp] step 1, two replicas: $(jq -c '{grad_norm, "loss/entropy_mean", "response_length/mean"}' <<<"$b")"
# The same step, from the same weights, in two runs: $1 and $2 are its lines.
same_step() {
  jq -e -n --argjson a "$1" --argjson b "$2" '
    def close(k): ($a[k] - $b[k] | fabs) <= 1e-4 * ([($a[k] | fabs), 1e-12] | max);
    $a["reward/mean"] == $b["reward/mean"] and $a["response_length/mean"] == $b["response_length/mean"]
    and $a.grad_norm > 0 and close("grad_norm") and close("loss/entropy_mean")' >/dev/null
}
same_step "$a" "$b" || fail "step 1 differs between one actor and two replicas"

# 2. Replica 1 killed mid-run, on_fault restart.
six_steps='.roles.actor.args |= (map(if . == "4" then "6" else . end) + ["--checkpoint-dir", "checkpoints",
                "--checkpoint-every", "2", "--keep-checkpoints", "3", "--phase-timeout", "120", "--optimizer-shard"])'
spec fault 2 "$six_steps"' | .handoff.on_fault = "restart"'
m=runs/fault/metrics.jsonl
"$BIN/tandem" run fault.json --state-dir "$state" --gpus 0,1 >runs/fault.out 2>runs/fault.err &
run_pid=$!
for _ in $(seq 1800); do
  jq -e -s 'any(.step == 3 and .["reward/mean"] != null)' "$m" >/dev/null 2>&1 && break
  kill -0 "$run_pid" 2>/dev/null || fail "fault: the job ended before step 3"
  sleep 0.1
done
replica=$(worker_pid runs/fault.err actor 1)
[[ $replica =~ ^[0-9]+$ ]] || fail "fault: no pid for actor replica 1"
kill -KILL "$replica"
echo "[actor-dp] killed replica 1 (pid $replica) after step 3"
timeout 300 tail --pid="$run_pid" -f /dev/null || fail "fault: the job did not end in 300 s"
rc=0
wait "$run_pid" || rc=$?
run_pid=
((rc == 0)) || fail "fault: tandem run exited $rc"
steps=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m")
[[ $steps == "[1,2,3,4,5,6]" ]] || fail "fault: metrics.jsonl steps $steps, expected [1,2,3,4,5,6] once each"
grep -q "resumed from .*step-0*2" runs/fault/tasks/actor.0.err || fail "fault: rank 0 did not resume from step 2"
grep -q "optimizer: adamw, state native, sharded across the data-parallel ranks" runs/fault/tasks/actor.0.err ||
  fail "fault: AdamW's state was not sharded"
grep -q "step 6: the 2 replicas hold the same parameters" runs/fault/tasks/actor.0.err ||
  fail "fault: the replicas differ after the resume"
grep -E '^\[run\]|^[0-9:.]+ +actor\.[01] +(restarting|exited|failed)' runs/fault.err | grep -E 'actor\.[01]' | head -6 || true

# 3. Resharding: 2 ranks' checkpoint into 1, and 1's into 2.
reshard() {  # NAME REPLICAS FROM_RUN STEP: NAME restored from FROM_RUN's step-STEP checkpoint
  spec "$1" "$2" "$six_steps"
  mkdir -p "runs/$1/checkpoints"
  local from
  from=$(find "runs/$3/checkpoints" -maxdepth 1 -name "step-*" | grep -E "step-0*$4\$") || fail "$3 has no step-$4 checkpoint"
  cp -r "$from" "runs/$1/checkpoints/"
  run_job "$1.json" "$1"
  grep -q "resumed from .*step-0*$4" "runs/$1/tasks/actor.0.err" || fail "$1 did not resume from $3's step $4"
  local next=$(($4 + 1))
  same_step "$(step_line "$3" "$next")" "$(step_line "$1" "$next")" ||
    fail "$1 ($2 ranks) step $next differs from $3's: $(step_line "$3" "$next") vs $(step_line "$1" "$next")"
}
reshard onefromtwo 1 fault 2
reshard twofromone 2 onefromtwo 4
grep -q "step 6: the 2 replicas hold the same parameters" runs/twofromone/tasks/actor.0.err ||
  fail "twofromone: the replicas differ after the restore"
echo "[actor-dp] resharded: 2 ranks' step-2 checkpoint trained on by 1 (step 3 the same), 1's step-4 by 2 (step 5 the same)"

# 4. No leased port for the rendezvous.
rc=0
out=$(env -u TANDEM_PORTS TANDEM_RANK=0 TANDEM_WORLD_SIZE=2 TANDEM_CONTROL="unix:$work/nobody.sock" \
  "$BIN/tandem-worker" actor --model runs/grpo-model 2>&1) || rc=$?
((rc == 2)) || fail "rank 0 without a port exited $rc: $out"
grep -q 'give the actor role "ports": 1' <<<"$out" || fail "rank 0 without a port: $out"
echo "[actor-dp] PASS: two replicas train like one; a replica killed mid-run, both came back from the checkpoint;" \
  "checkpoints move between 2 ranks and 1; a rank 0 without a port says so"

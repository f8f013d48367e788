#!/usr/bin/env bash
# tandemd killed with SIGKILL in the middle of an RL job and started again
# on its state dir (issue #16 "Reliability"; docs/rl.md "Faults"):
# examples/grpo.json, 6 steps, submitted to a standalone tandemd. Once
# step 2's metrics line is written the daemon is killed; the actor and the
# rollouts keep running (re-adopted by the next daemon), their control
# connections break, and they connect again to the restarted daemon; the
# actor asks for its phase again. The job ends succeeded, every task exit 0,
# metrics.jsonl holds steps 1..6 once each.
# Needs tandem, tandemd, tandem-worker and jq (scripts/setup.sh --test).
NAME=actor-daemon
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/tandemd.log"
dpid=
job=
on_exit 'if [[ -n $dpid ]] && kill -0 "$dpid" 2>/dev/null; then
  [[ -n $job ]] && T cancel "$job" >/dev/null 2>&1 && sleep 2
  kill -TERM "$dpid"; wait "$dpid" 2>/dev/null || true
fi'
T() { "$BIN/tandem" --socket "$state/tandemd.sock" "$@"; }
start_daemon() {
  "$BIN/tandemd" --state-dir "$state" --gpus 0,1 >>"$work/tandemd.log" 2>&1 &
  dpid=$!
  for _ in $(seq 200); do
    T status >/dev/null 2>&1 && return 0
    kill -0 "$dpid" 2>/dev/null || fail "tandemd exited while starting"
    sleep 0.1
  done
  fail "tandemd did not answer in 20 s"
}
make_base
jq --arg run "$work/runs/grpo" '.run_dir = $run
    | .roles.actor.args |= (map(if . == "4" then "6" else . end) + ["--phase-timeout", "120"])' \
  "$SRC/examples/grpo.json" >job.json

start_daemon
job=$(T submit job.json | tail -1)
m=runs/grpo/metrics.jsonl
has_step() { jq -e -s --argjson s "$1" 'any(.step == $s and .["reward/mean"] != null)' "$m" >/dev/null 2>&1; }
for _ in $(seq 1800); do has_step 2 && break; sleep 0.1; done
has_step 2 || fail "no step 2 in 180 s"
kill -KILL "$dpid"
wait "$dpid" 2>/dev/null || true
echo "[actor-daemon] killed tandemd (pid $dpid) after step 2"
sleep 1
start_daemon
echo "[actor-daemon] tandemd started again (pid $dpid)"
for _ in $(seq 2400); do
  s=$(T status "$job" --json 2>/dev/null | jq -r .state)
  [[ $s =~ ^(succeeded|failed|cancelled)$ ]] && break
  sleep 0.1
done
[[ ${s:-} == succeeded ]] || fail "job $job ended ${s:-never} ($(T status "$job" --json 2>/dev/null | jq -c '{state, detail}'))"
for t in actor.0 rollout.0 rollout.1; do
  jq -e '.exit_code == 0 and .signal == 0' "runs/grpo/tasks/$t.exit" >/dev/null || fail "$t: $(cat "runs/grpo/tasks/$t.exit")"
done
steps=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m")
[[ $steps == "[1,2,3,4,5,6]" ]] || fail "metrics.jsonl steps $steps, expected [1,2,3,4,5,6]"
grep -q "connected to tandemd again" runs/grpo/tasks/actor.0.err ||
  echo "[actor-daemon] note: the actor's connection did not break while it was in a phase request"
echo "[actor-daemon] PASS: tandemd killed after step 2 and restarted; the job went on and succeeded, steps $steps"

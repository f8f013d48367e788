#!/usr/bin/env bash
# examples/grpo.json under `tandem run` on the embedded local backend, CPU:
# an actor driving two colocated rollouts through four GRPO steps on a model
# of two sft steps (its text is noise; the checks are on the job's
# mechanics, not on learning):
#   - the job ends by itself, exit 0, every task exit 0 (the rollouts on
#     the shutdown the daemon sends once the controller succeeded);
#   - metrics.jsonl has steps 1..4 with the documented keys, eval/accuracy
#     before, at step 2 and at the end;
#   - every SYNC(v) published v and both rollouts loaded it, from the
#     segment the actor's ack named (handoff.jsonl);
#   - the actor's optimizer tag: released for every rollout phase and
#     SYNC, resumed for every train phase (handoff.jsonl), its residency
#     falling to 0 and back, never flagged as a leak (residency.jsonl);
#   - from step 2 on, samples come from the version of the step before
#     (weight_version/min = step - 1);
#   - --out wrote a model directory that loads (config.json, weights);
#   - tandem run printed a progress line per step (the actor's metrics);
#   - run again (over stale port files of another job, which the actor must
#     not take) and cancelled after step 1, the job leaves no shm segment
#     (the daemon removes what the SIGTERMed actor could not);
#   - with --weights-transport nccl (gloo on the CPU), two steps: every
#     version reaches both rollouts through epoch 1's broadcast group;
#   - --weights-transport cuda-ipc without --device cuda is refused, naming both.
# Needs tandem, tandem-worker and jq (scripts/setup.sh --test).
NAME=actor-job
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/runs/grpo.err"
run_pid=
on_exit 'if [[ -n $run_pid ]] && kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi'
make_base

run_job "$SRC/examples/grpo.json" grpo
run=runs/grpo
for t in actor.0 rollout.0 rollout.1; do
  jq -e '.exit_code == 0 and .signal == 0' "$run/tasks/$t.exit" >/dev/null || fail "$t: $(cat "$run/tasks/$t.exit")"
done

m=$run/metrics.jsonl
[[ -s $m ]] || fail "no $m"
steps=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m")
[[ $steps == "[1,2,3,4]" ]] || fail "metrics.jsonl steps $steps, expected [1,2,3,4]"
for key in reward/mean reward/std accuracy response_length/mean grad_norm lr tokens_per_s seconds/rollout \
           seconds/train seconds/sync seconds/step loss/pg_loss weight_version/min; do
  jq -e -s --arg k "$key" 'map(select(.["reward/mean"] != null)) | all(has($k))' "$m" >/dev/null ||
    fail "a step line lacks $key: $(head -2 "$m" | tail -1)"
done
evals=$(jq -s -c '[.[] | select(has("eval/accuracy")) | .step]' "$m")
[[ $evals == "[0,2,4]" ]] || fail "eval/accuracy at steps $evals, expected [0,2,4]"
versions=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .["weight_version/min"]]' "$m")
[[ $versions == "[0,1,2,3]" ]] || fail "weight_version/min per step $versions, expected [0,1,2,3]"

h=$run/handoff.jsonl
for v in 1 2 3 4; do
  jq -e -s --argjson v "$v" 'any(.command == "publish_weights" and .version == $v and .outcome == "ok")' "$h" \
    >/dev/null || fail "no publish_weights v$v in handoff.jsonl"
  n=$(jq -s --argjson v "$v" '[.[] | select(.command == "load_weights" and .version == $v and .outcome == "ok")
       | .rank] | unique | length' "$h")
  ((n == 2)) || fail "load_weights v$v reached $n of 2 rollouts"
done
# The optimizer tag: resumed for each of the 4 train phases, released before
# each rollout phase after the first and for each SYNC.
opt='select(.role == "actor" and .tag == "optimizer" and .outcome == "ok")'
resumes=$(jq -s "[.[] | $opt | select(.command == \"resume\")] | length" "$h")
releases=$(jq -s "[.[] | $opt | select(.command == \"release\")] | length" "$h")
((resumes == 4 && releases >= 4)) || fail "optimizer tag: $resumes resumes (4 expected), $releases releases (>= 4)"
r=$run/residency.jsonl
jq -e -s 'any(.role == "actor" and .tag == "optimizer" and .bytes > 0) and
          any(.role == "actor" and .tag == "optimizer" and .bytes == 0 and .delta < 0) and
          all(.leak | not)' "$r" >/dev/null || fail "residency.jsonl: the optimizer tag did not come and go: $(grep -m3 optimizer "$r")"
grep -q "loaded weights version 4 from shm:" "$run"/tasks/rollout.0.err ||
  fail "rollout 0 did not load from the actor's shm segment"
[[ -f $run/model/config.json && -f $run/model/model.safetensors && -f $run/model/tokenizer.json ]] ||
  fail "--out model: $(ls "$run/model" 2>&1)"
"$BIN/tandem-worker" sft --init "$run/model" --out runs/reload --max-steps 1 --eval-problems 2 --eval-max-new-tokens 2 \
  --threads 1 --log runs/reload.log >/dev/null || fail "the actor's --out model does not load"
grep -q '^\[run\] actor/0 step 4: reward/mean ' runs/grpo.err ||
  fail "tandem run printed no progress line for step 4"
grep -E '^\[run\] (actor/0 step|job .* succeeded)' runs/grpo.err
# Cancelled mid-run (Ctrl-C: the actor gets SIGTERM). A segment is
# unlinked by its last reader, so one is left only when the publisher dies
# between publishing and the loads; stand one in, named as the actor names
# its versions (from the rollout's log), and the daemon must remove it when
# the job ends, and nothing of the job may be left in /dev/shm.
# The reused run dir keeps the first job's port files; stand in ones of an
# older job on a port nobody serves: the actor must wait for its own job's.
for r in 0 1; do printf '1\ngrpo-000000\n' >"$run/rollout.$r.port"; done
"$BIN/tandem" run "$SRC/examples/grpo.json" --state-dir "$state" --gpus 0,1 >runs/cancel.out 2>runs/cancel.err &
run_pid=$!
wait_line runs/cancel.err '^\[run\] actor/0 step 1:'
name=$(sed -n 's|.*loaded weights version 1 from shm:/\(tandem-.*-v\)1$|\1|p' "$run"/tasks/rollout.0.err | head -1)
[[ -n $name ]] || fail "no segment name in rollout 0's log"
segment=${name%.actor.0-v}  # tandem-<job>-<job>
head -c 4096 /dev/zero >"/dev/shm/${name}99"
kill -INT "$run_pid"
rc=0; wait "$run_pid" || rc=$?
run_pid=
((rc == 4)) || fail "the cancelled run exited $rc, not 4"
# SIGTERM ended the actor (no destructor ran): what is gone, the daemon removed.
jq -e '.signal == 15' "$run/tasks/actor.0.exit" >/dev/null || fail "actor.0: $(cat "$run/tasks/actor.0.exit")"
[[ ! -e /dev/shm/${name}99 ]] || { rm -f "/dev/shm/${name}99"; fail "the daemon left /dev/shm/${name}99"; }
if ls /dev/shm | grep -qF "$segment"; then fail "the cancelled job left $(ls /dev/shm | grep -F "$segment")"; fi
# The same job with --weights-transport nccl (gloo on the CPU): every
# version reaches both rollouts through one broadcast group, whose store is
# on the actor's leased port.
jq '.name = "grpo-nccl" | .run_dir = "runs/grpo-nccl" | .roles.actor.ports = 1 |
    .roles.actor.args |= ((.[index("--steps") + 1] = "2") + ["--weights-transport", "nccl"])' \
  "$SRC/examples/grpo.json" >grpo-nccl.json
run_job grpo-nccl.json grpo-nccl
run=runs/grpo-nccl
h=$run/handoff.jsonl
for v in 1 2; do
  n=$(jq -s --argjson v "$v" '[.[] | select(.command == "load_weights" and .version == $v and .outcome == "ok")
       | .rank] | unique | length' "$h")
  ((n == 2)) || fail "nccl: load_weights v$v reached $n of 2 rollouts"
done
for r in 0 1; do
  grep -q "loaded weights version 2 from nccl:127.0.0.1:[0-9]*/e1/n2#v2" "$run/tasks/rollout.$r.err" ||
    fail "nccl: rollout $r did not load version 2 through epoch 1's group: $(grep -m2 'loaded weights' "$run/tasks/rollout.$r.err")"
done
refusal=$("$BIN/tandem-worker" actor --model base --weights-transport cuda-ipc 2>&1) && fail "cuda-ipc on the CPU was accepted"
grep -q -- "--weights-transport cuda-ipc .* needs --device cuda" <<<"$refusal" || fail "cuda-ipc on the CPU: $refusal"
echo "[actor-job] PASS: 4 steps, every version loaded by both rollouts, the optimizer released $releases times and" \
  "resumed $resumes; a cancelled job leaves no segment; over nccl both rollouts loaded every version"

#!/usr/bin/env bash
# examples/grpo.json with a workflow (docs/agents.md "Workflows in the
# actor") under `tandem run` on CPU: the actor runs multi-turn-feedback
# episodes (3 turns, per-turn advantages) through its in-process proxy over
# two colocated rollouts, on a model of two sft steps (its text is noise: the
# checks are on the mechanics):
#   - the job ends by itself, exit 0;
#   - each step line has the episode metrics, each eval line the per-turn
#     accuracies; a noise model is nearly always wrong, so nearly every
#     episode takes all 3 turns;
#   - the turns of an episode share their history: tree packing computes
#     far fewer tokens than the sequences hold;
#   - an outside agent (curl, plain HTTP) talks to the same proxy while the
#     job runs (--proxy-port-file), its session export holds the exact ids
#     with the model's tokens marked;
#   - simulated-user with the user's model served by tandem (a rollout role
#     with --frozen-weights), handed off with the rollouts, never loading
#     the actor's weights;
#   - a bad --workflow is refused before anything runs, naming the key.
# Needs tandem, tandem-worker, jq and curl.
NAME=workflow-job
. "$(dirname "$0")/actor_job_lib.sh"
LOGS="$work/runs/workflow.err"
run_pid=
on_exit 'if [[ -n $run_pid ]] && kill -0 "$run_pid" 2>/dev/null; then kill -INT "$run_pid"; wait "$run_pid" || true; fi'
make_base

# jq: the actor's flag $k set to $v (replaced, or added).
SET='def set($k; $v): (index($k)) as $i | if $i then .[$i + 1] = $v else . + [$k, $v] end;'
spec=$work/workflow.json
jq "$SET"' .name = "workflow" | .run_dir = "runs/workflow"
    | .roles.actor.args |= (set("--workflow"; "{\"name\": \"multi-turn-feedback\", \"options\": {\"max_turns\": 3}}")
                            | set("--advantage-unit"; "turn") | set("--proxy-port-file"; "proxy.port")
                            | set("--steps"; "3") | set("--eval-every"; "2"))' "$SRC/examples/grpo.json" >"$spec"
run=runs/workflow
"$BIN/tandem" run "$spec" --state-dir "$state" --gpus 0,1 >runs/workflow.out 2>runs/workflow.err &
run_pid=$!
# An outside agent, while the job runs: the proxy answers once a rollout phase lets it.
for _ in $(seq 600); do [[ -s $run/proxy.port ]] && break; sleep 0.1; done
[[ -s $run/proxy.port ]] || fail "no $run/proxy.port"
port=$(head -1 "$run/proxy.port")
answer=$(curl -sS -m 120 -H 'X-Session-Id: outside-1' -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 8}' \
  "http://127.0.0.1:$port/v1/chat/completions") || fail "the outside agent's call failed"
jq -e '.choices[0].message.role == "assistant" and .usage.completion_tokens >= 1' <<<"$answer" >/dev/null ||
  fail "the outside agent's answer: $answer"
export_json=$(curl -sS -m 30 "http://127.0.0.1:$port/v1/sessions/outside-1") || fail "no session export"
jq -e '.turns | length == 1' <<<"$export_json" >/dev/null || fail "session export: $export_json"
jq -e '.turns[0] | (.ids | length) == (.mask | length) and (.mask | add) >= 1' <<<"$export_json" >/dev/null ||
  fail "session export ids/mask: $export_json"
timeout 240 tail --pid="$run_pid" -f /dev/null || fail "the job did not end in 240 s"
rc=0; wait "$run_pid" || rc=$?
run_pid=
((rc == 0)) || fail "tandem run exited $rc"

m=$run/metrics.jsonl
steps=$(jq -s -c '[.[] | select(.["reward/mean"] != null) | .step]' "$m")
[[ $steps == "[1,2,3]" ]] || fail "metrics.jsonl steps $steps, expected [1,2,3]"
for key in episode/solved episode/turns/mean episode/failed episode/turn1/accuracy loss/pg_loss; do
  jq -e -s --arg k "$key" 'map(select(.["reward/mean"] != null)) | all(has($k))' "$m" >/dev/null ||
    fail "a step line lacks $key: $(sed -n 2p "$m")"
done
jq -e -s 'map(select(has("eval/accuracy"))) | length == 3 and all(has("eval/turn1/accuracy") and has("eval/turns/mean"))' \
  "$m" >/dev/null || fail "eval lines lack the per-turn accuracies: $(grep eval "$m" | head -2)"
jq -e -s 'map(select(.["reward/mean"] != null)) | all(.["episode/turns/mean"] > 2.5 and .["episode/failed"] == 0)' \
  "$m" >/dev/null || fail "a noise model's episodes should take all 3 turns: $(jq -c '.["episode/turns/mean"]' "$m")"
jq -e -s 'map(select(.["reward/mean"] != null)) | all(.["tokens/packed"] * 2 < .["tokens/sequence"])' "$m" >/dev/null ||
  fail "the turns' shared history was not packed once: $(jq -c '[.["tokens/packed"], .["tokens/sequence"]]' "$m")"
grep -q 'workflow multi-turn-feedback through the proxy' "$run/tasks/actor.0.err" || fail "the actor did not start its proxy"
grep -q 'eval sample (step 0): ".*That is not right. Try again' "$run/tasks/actor.0.err" ||
  fail "no eval sample with the feedback in the actor's log: $(grep -m1 'eval sample' "$run/tasks/actor.0.err")"

# simulated-user: the user is a second model served by tandem, a rollout
# role with --frozen-weights colocated with the actor: handed off like the
# rollouts (released for TRAIN, resumed for ROLLOUT), sent every version's
# load_weights and keeping its own weights.
jq "$SET"' .name = "simuser" | .run_dir = "runs/simuser"
    | .roles.user = (.roles.rollout | .replicas = 1 | .gpus_per_replica = 2
                     | .args = ["--model", "../grpo-model", "--kv-cache-mib", "16", "--threads", "1",
                                "--port-file", "user.{rank}.port", "--start-released", "--frozen-weights"])
    | .roles.actor.args |= (set("--workflow"; "{\"name\": \"simulated-user\", \"options\": {\"max_turns\": 2, \"user\": {\"port_file\": \"user.{rank}.port\", \"tokenizer\": \"../grpo-model\"}, \"user_max_tokens\": 8}}")
                            | set("--steps"; "2") | set("--eval-every"; "0"))' "$SRC/examples/grpo.json" >"$work/simuser.json"
run_job "$work/simuser.json" simuser
s=runs/simuser
jq -e '.exit_code == 0' "$s/tasks/user.0.exit" >/dev/null || fail "user.0: $(cat "$s/tasks/user.0.exit")"
grep -q 'the simulated user through a proxy' "$s/tasks/actor.0.err" || fail "the actor did not start the user's proxy"
grep -q 'load_weights version 2: kept its own weights' "$s/tasks/user.0.err" || fail "the user did not keep its weights at SYNC(2)"
jq -e -s 'any(.role == "user" and .command == "release" and .outcome == "ok") and
          any(.role == "user" and .command == "resume" and .outcome == "ok")' "$s/handoff.jsonl" >/dev/null ||
  fail "the user role was not handed off: $(grep -m3 '"user"' "$s/handoff.jsonl")"
jq -e -s 'map(select(.["reward/mean"] != null)) | length == 2 and all(.["episode/failed"] == 0)' "$s/metrics.jsonl" \
  >/dev/null || fail "simulated-user steps: $(cat "$s/metrics.jsonl")"

# A bad workflow is refused at once, naming what is wrong.
jq "$SET"' .name = "bad" | .run_dir = "runs/bad"
    | .roles.actor.args |= set("--workflow"; "{\"name\": \"multi-turn-feedback\", \"options\": {\"max_turns\": 0}}")' \
  "$SRC/examples/grpo.json" >"$work/bad.json"
rc=0; "$BIN/tandem" run "$work/bad.json" --state-dir "$state" --gpus 0,1 >runs/bad.out 2>runs/bad.err || rc=$?
((rc != 0)) || fail "a bad --workflow ran"
grep -q "key 'max_turns': expected an integer in \[1, 64\]" runs/bad/tasks/actor.0.err ||
  fail "the refusal does not name max_turns: $(tail -3 runs/bad/tasks/actor.0.err)"
echo "[workflow-job] PASS: 3 steps of 3-turn episodes, per-turn metrics, an outside agent served by the same proxy;" \
  "a simulated user served by tandem and handed off"

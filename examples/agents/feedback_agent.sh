#!/usr/bin/env bash
# An outside agent for the actor's `command` workflow (docs/agents.md
# "command"), in plain bash with curl and jq: the multi-turn feedback game
# over the proxy's OpenAI API. tandem runs it once per episode with
# OPENAI_BASE_URL and TANDEM_SESSION_ID set and the problem on stdin; it
# answers with its reward on the last line of stdout.
#   AGENT_TURNS  answers allowed (default 2); a right answer at turn k earns 0.5^(k-1).
set -euo pipefail
input=$(cat)
answer=$(jq -r .answer <<<"$input")
messages=$(jq -c .messages <<<"$input")
question=$(jq -r '[.messages[] | select(.role == "user")] | last | .content' <<<"$input")
params=$(jq -c '{temperature, max_tokens}' <<<"$input")
turns=${AGENT_TURNS:-2}
rewards=()
for ((turn = 1; turn <= turns; turn++)); do
  body=$(jq -nc --argjson m "$messages" --argjson p "$params" '$p + {messages: $m}')
  reply=$(curl -sS --fail-with-body -m 600 -H "X-Session-Id: $TANDEM_SESSION_ID" -H 'Content-Type: application/json' \
    -d "$body" "$OPENAI_BASE_URL/chat/completions")
  message=$(jq -c '.choices[0].message' <<<"$reply")  # sent back as returned: the session goes on from its tokens
  said=$(jq -r '.content // ""' <<<"$message" | sed -n 's/^Answer: *//p' | tail -1)
  if [[ $said == "$answer" ]]; then
    rewards+=("$(awk -v k="$turn" 'BEGIN { print 0.5 ^ (k - 1) }')")
    echo "{\"reward\": ${rewards[-1]}, \"solved\": true, \"turn_rewards\": [$(IFS=,; echo "${rewards[*]}")]}"
    exit 0
  fi
  rewards+=(0)
  messages=$(jq -c --argjson msg "$message" --arg q "$question" \
    '. + [$msg, {role: "user", content: ("That is not right. Try again: " + $q)}]' <<<"$messages")
done
echo "{\"reward\": 0, \"turn_rewards\": [$(IFS=,; echo "${rewards[*]}")]}"

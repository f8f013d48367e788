// A problem of a data set (docs/model.md, "Data sets and rewards"): what a
// data set gives the trainer and the rollout, and what its verifier scores a
// response against. `prompt` is the conversation before the model's turn
// (formatted by a chat template elsewhere); `answer` is the ground truth as
// the data set states it (a number such as "1234" or "-3/4" for the math sets;
// the verifier decides how a response is compared with it);
// `reference_solution`, when the data set has one, is a complete response
// (the sft role trains on it) that its own verifier scores 1. `tools` names
// the tools the model is offered with the problem (the agents' tools, e.g.
// "calculator": the prompt is then rendered with Qwen3's tool template);
// `reference_turns`, when not empty, is a whole reference conversation
// after the prompt that sft trains on instead of the reference solution:
// assistant turns (a tool call is Qwen's "<tool_call>...</tool_call>" text)
// and the tools' answers (role "tool"), ending with the answer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "workers/data/chat_message.h"

namespace tandem::data {

struct Problem {
  std::string id;                    // unique within its data set, e.g. "train.jsonl:17"
  std::vector<ChatMessage> prompt;   // system/user turns, in order
  std::string answer;                // ground truth
  std::optional<std::string> reference_solution;
  std::vector<std::string> tools;
  std::vector<ChatMessage> reference_turns;
};

}  // namespace tandem::data

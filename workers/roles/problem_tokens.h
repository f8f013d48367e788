// A problem's tokens for sft and its evals (docs/model.md "sft"; docs/
// agents.md "Tool calls in sft"): with tools (data::Problem::tools) the
// prompt is Qwen3's tool template exactly as the actor's proxy renders a
// chat call offering those tools (agents/tool_chat_template.h), so that a
// model trained here meets at RL time the tokens it was trained on; without
// tools it is the chat format's (data/chat_template.h).
//
// ProblemSftExample with a reference conversation (Problem::reference_turns)
// lays it out as the proxy's session would hold it: the prompt, then each
// assistant turn's text and its end of turn (trained, as the model would
// generate them), then what follows it up to the next generation prompt
// (the tools' answers; context, SftExample::trained 0), as a continued call
// renders it. Without one, train::MakeSftExample (with tools: the reference
// solution as one answer after the tool prompt).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/data/chat_template.h"
#include "workers/data/problem.h"
#include "workers/data/tokenizer.h"
#include "workers/train/sft_example.h"

namespace tandem::roles {

StatusOr<std::vector<int32_t>> ProblemPromptIds(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                                const data::Problem& problem);

StatusOr<train::SftExample> ProblemSftExample(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                              const data::Problem& problem, data::TokenId end_token);

}  // namespace tandem::roles

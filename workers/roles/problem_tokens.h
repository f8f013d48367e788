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
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/data/chat_template.h"
#include "workers/data/problem.h"
#include "workers/data/tokenizer.h"
#include "workers/train/sft_example.h"

namespace tandem::roles {

StatusOr<std::vector<int32_t>> ProblemPromptIds(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                                const data::Problem& problem);

// The prompt's ids when the model is offered `tools` (agents::ToolsNamed
// names) in place of the problem's own: how a workflow's first call renders
// it (agents::Workflow::tool_names; none: the chat format's prompt).
StatusOr<std::vector<int32_t>> PromptIdsOffering(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                                 const data::Problem& problem, const std::vector<std::string>& tools);

// What --max-prompt-tokens measures (data::PromptLengthLimit::count): the
// length of PromptIdsOffering; SIZE_MAX when the prompt cannot be rendered,
// so that the filter drops the problem.
size_t PromptTokensOffering(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                            const data::Problem& problem, const std::vector<std::string>& tools);

StatusOr<train::SftExample> ProblemSftExample(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                              const data::Problem& problem, data::TokenId end_token);

}  // namespace tandem::roles

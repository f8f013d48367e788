// One supervised example for sft (docs/model.md, "sft"): a problem's prompt
// formatted by the chat template with the generation prompt, then its
// reference solution and the end-of-turn token. The loss is on the response
// only: tokens [prompt_tokens, ids.size()), the end token included, so the
// model learns to stop; `trained`, when not empty, says which of those the
// loss counts (a reference conversation's tool answers are context:
// roles/problem_tokens.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/data/chat_template.h"
#include "workers/data/problem.h"
#include "workers/data/tokenizer.h"

namespace tandem::train {

struct SftExample {
  std::vector<int32_t> ids;
  int32_t prompt_tokens = 0;  // ids[0, prompt_tokens) are the prompt
  std::vector<uint8_t> trained;  // per response token: 1 the loss counts it (empty: every one)
  int32_t response_tokens() const { return static_cast<int32_t>(ids.size()) - prompt_tokens; }
};

// FailedPrecondition when the problem has no reference solution; the
// tokenizer's errors otherwise, prefixed with the problem id.
StatusOr<SftExample> MakeSftExample(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                    const data::Problem& problem, data::TokenId end_token);

}  // namespace tandem::train

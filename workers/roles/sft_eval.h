// Accuracy of a model on problems by greedy decoding (docs/model.md, "sft"):
// each prompt is formatted by the chat template with the generation prompt,
// decoded greedily until the end-of-turn token, and the decoded text is
// scored by the data set's verifier. Used by sft for its periodic eval, and
// by anyone checking a saved model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/data/chat_template.h"
#include "workers/data/problem.h"
#include "workers/data/tokenizer.h"
#include "workers/data/verifier.h"
#include "workers/inference/greedy.h"
#include "workers/model/transformer.h"

namespace tandem::roles {

struct EvalResult {
  int64_t correct = 0;
  int64_t total = 0;
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
  std::vector<std::string> responses;  // decoded, in problem order
};

StatusOr<EvalResult> EvaluateGreedy(const model::Transformer& model, const data::Tokenizer& tokenizer,
                                    const data::ChatFormat& format, const std::vector<data::Problem>& problems,
                                    const data::Verifier& verifier, const inference::GreedyOptions& options);

}  // namespace tandem::roles

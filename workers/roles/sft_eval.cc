// Greedy evaluation scored by a verifier (sft_eval.h).
#include "workers/roles/sft_eval.h"

#include "workers/roles/problem_tokens.h"

namespace tandem::roles {

StatusOr<EvalResult> EvaluateGreedy(const model::Transformer& model, const data::Tokenizer& tokenizer,
                                    const data::ChatFormat& format, const std::vector<data::Problem>& problems,
                                    const data::Verifier& verifier, const inference::GreedyOptions& options) {
  std::vector<std::vector<int32_t>> prompts;
  for (const data::Problem& p : problems) {
    TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ProblemPromptIds(tokenizer, format, p), "eval");
    prompts.push_back(std::move(ids));
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::vector<int32_t>> outs, inference::GreedyDecode(model, prompts, options),
                          "eval");
  EvalResult r;
  r.total = static_cast<int64_t>(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(outs[i], {.skip_special_tokens = true}), "eval decode");
    r.correct += verifier.Verify(text, problems[i].answer).reward >= 1.0;
    r.responses.push_back(std::move(text));
  }
  return r;
}

}  // namespace tandem::roles

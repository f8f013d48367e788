// Lock-step greedy decoding (greedy.h).
#include "workers/inference/greedy.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <string>

#include "workers/model/model_input.h"

namespace tandem::inference {
namespace {

StatusOr<std::vector<std::vector<int32_t>>> DecodeBatch(const model::Transformer& model,
                                                        const std::vector<std::vector<int32_t>>& prompts,
                                                        const GreedyOptions& options) {
  const int64_t b_count = static_cast<int64_t>(prompts.size());
  const auto cpu_long = at::TensorOptions().dtype(at::kLong);
  model::KvCache cache = model::KvCache::Empty(model.config(), b_count, model.device(), model.dtype());
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<bool> done(prompts.size(), false);
  at::Tensor tokens = at::empty({b_count}, cpu_long);
  for (int64_t b = 0; b < b_count; ++b) tokens[b] = static_cast<int64_t>(prompts[static_cast<size_t>(b)][0]);
  for (int64_t t = 0;; ++t) {
    const at::Tensor positions = at::full({b_count}, t, cpu_long);
    const model::DecodeOutput o =
        model.Decode(tokens.to(model.device()), positions.to(model.device()), cache);
    cache.Append(o.new_keys, o.new_values);
    const at::Tensor choice = o.logits.argmax(-1).to(at::kCPU).contiguous();
    const int64_t* chosen = choice.data_ptr<int64_t>();
    int64_t* next = tokens.data_ptr<int64_t>();
    bool all_done = true;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const std::vector<int32_t>& prompt = prompts[b];
      if (t + 1 < static_cast<int64_t>(prompt.size())) {
        next[b] = prompt[static_cast<size_t>(t + 1)];
        all_done = false;
        continue;
      }
      if (!done[b]) {
        const int32_t tok = static_cast<int32_t>(chosen[b]);
        if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) {
          done[b] = true;
        } else {
          out[b].push_back(tok);
          done[b] = static_cast<int64_t>(out[b].size()) >= options.max_new_tokens;
        }
        next[b] = tok;
      }
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::vector<int32_t>>> GreedyDecode(const model::Transformer& model,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const GreedyOptions& options) {
  if (options.max_new_tokens < 1 || options.batch_size < 1)
    return InvalidArgument("greedy decode: max_new_tokens and batch_size must be positive");
  const model::ModelConfig& c = model.config();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return InvalidArgument("greedy decode: prompt " + std::to_string(i) + " is empty");
    for (const int32_t tok : prompts[i])
      if (tok < 0 || tok >= c.vocab_size)
        return InvalidArgument("greedy decode: prompt " + std::to_string(i) + ": token " + std::to_string(tok) +
                               " outside the vocabulary (" + std::to_string(c.vocab_size) + ")");
    if (static_cast<int64_t>(prompts[i].size()) + options.max_new_tokens > c.max_position_embeddings)
      return InvalidArgument("greedy decode: prompt " + std::to_string(i) + " plus " +
                             std::to_string(options.max_new_tokens) + " new tokens exceeds max_position_embeddings (" +
                             std::to_string(c.max_position_embeddings) + ")");
  }
  std::vector<std::vector<int32_t>> out;
  out.reserve(prompts.size());
  try {
    c10::NoGradGuard no_grad;
    for (size_t start = 0; start < prompts.size(); start += static_cast<size_t>(options.batch_size)) {
      const size_t end = std::min(prompts.size(), start + static_cast<size_t>(options.batch_size));
      const std::vector<std::vector<int32_t>> chunk(prompts.begin() + static_cast<std::ptrdiff_t>(start),
                                                    prompts.begin() + static_cast<std::ptrdiff_t>(end));
      TANDEM_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> part, DecodeBatch(model, chunk, options));
      for (auto& p : part) out.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    return Internal(std::string("greedy decode: ") + e.what());
  }
  return out;
}

}  // namespace tandem::inference

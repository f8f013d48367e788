// The sft step: pack, score response tokens, AdamW (sft_trainer.h).
#include "workers/train/sft_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <string>

#include "workers/model/model_input.h"

namespace tandem::train {

namespace {

struct Packed {
  model::ForestBatch batch;
  int64_t response_tokens = 0, sequence_tokens = 0;  // response: those the loss counts
  std::vector<float> weights;  // per scored token, in the batch's order: 1 counted, 0 context
  bool masked = false;         // some weight is 0
};

// The loss: the mean negative log-prob of the counted tokens.
at::Tensor MaskedLoss(const at::Tensor& logprob, const Packed& p) {
  if (!p.masked) return -logprob.mean();
  const at::Tensor w = at::tensor(p.weights).to(logprob.device()).to(logprob.scalar_type());
  return -(logprob * w).sum() / static_cast<double>(p.response_tokens);
}

StatusOr<Packed> Pack(const model::Transformer& model, const std::vector<SftExample>& examples) {
  if (examples.empty()) return InvalidArgument("sft step: no examples");
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> score_from;
  Packed p;
  for (size_t i = 0; i < examples.size(); ++i) {
    const SftExample& e = examples[i];
    if (e.prompt_tokens < 1 || e.response_tokens() < 1)
      return InvalidArgument("sft example " + std::to_string(i) + ": needs a prompt and a response token");
    if (!e.trained.empty() && static_cast<int32_t>(e.trained.size()) != e.response_tokens())
      return InvalidArgument("sft example " + std::to_string(i) + ": a trained mask of " + std::to_string(e.trained.size()) +
                             " for " + std::to_string(e.response_tokens()) + " response tokens");
    seqs.push_back(e.ids);
    score_from.push_back(e.prompt_tokens);
    for (int32_t j = 0; j < e.response_tokens(); ++j) {
      const bool counted = e.trained.empty() || e.trained[static_cast<size_t>(j)] != 0;
      p.weights.push_back(counted ? 1.0f : 0.0f);
      p.response_tokens += counted;
      p.masked |= !counted;
    }
    p.sequence_tokens += static_cast<int64_t>(e.ids.size());
  }
  if (p.response_tokens == 0) return InvalidArgument("sft step: no token the loss counts");
  TANDEM_ASSIGN_OR_RETURN(p.batch, model::BuildForestBatch(seqs, score_from, model.config().vocab_size, model.device()),
                          "sft step");
  return p;
}

}  // namespace

SftTrainer::SftTrainer(model::Transformer& model, SftTrainerOptions options, std::unique_ptr<Optimizer> opt)
    : model_(model), options_(options), opt_(std::move(opt)) {}
SftTrainer::~SftTrainer() = default;

StatusOr<std::unique_ptr<SftTrainer>> SftTrainer::Create(model::Transformer& model, const SftTrainerOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.schedule.Validate(), "sft trainer");
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt,
                          MakeOptimizer(model.parameters(), options.optimizer), "sft trainer");
  return std::unique_ptr<SftTrainer>(new SftTrainer(model, options, std::move(opt)));
}

StatusOr<SftStepStats> SftTrainer::Step(const std::vector<SftExample>& examples, double progress) {
  TANDEM_ASSIGN_OR_RETURN(Packed p, Pack(model_, examples));
  SftStepStats st;
  st.response_tokens = p.response_tokens;
  st.sequence_tokens = p.sequence_tokens;
  st.packed_tokens = p.batch.num_tokens();
  st.lr = options_.schedule.At(steps(), progress);
  try {
    model_.parameters().ZeroGrad();
    const model::ForestOutput out = model_.Forward(p.batch);
    const at::Tensor loss = MaskedLoss(out.logprob, p);
    st.loss = loss.item<double>();
    if (!std::isfinite(st.loss)) return Internal("sft step " + std::to_string(steps()) + ": non-finite loss");
    loss.backward();
  } catch (const std::exception& e) {
    return Internal("sft step " + std::to_string(steps()) + ": " + e.what());
  }
  TANDEM_ASSIGN_OR_RETURN(st.grad_norm, opt_->Step(st.lr), "sft step " + std::to_string(steps()));
  return st;
}

StatusOr<double> SftTrainer::Loss(const std::vector<SftExample>& examples) const {
  TANDEM_ASSIGN_OR_RETURN(Packed p, Pack(model_, examples));
  try {
    at::NoGradGuard no_grad;
    return MaskedLoss(model_.Forward(p.batch).logprob, p).item<double>();
  } catch (const std::exception& e) {
    return Internal(std::string("sft loss: ") + e.what());
  }
}

}  // namespace tandem::train

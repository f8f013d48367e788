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
  int64_t response_tokens = 0, sequence_tokens = 0;
};

StatusOr<Packed> Pack(const model::Transformer& model, const std::vector<SftExample>& examples) {
  if (examples.empty()) return InvalidArgument("sft step: no examples");
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> score_from;
  Packed p;
  for (size_t i = 0; i < examples.size(); ++i) {
    const SftExample& e = examples[i];
    if (e.prompt_tokens < 1 || e.response_tokens() < 1)
      return InvalidArgument("sft example " + std::to_string(i) + ": needs a prompt and a response token");
    seqs.push_back(e.ids);
    score_from.push_back(e.prompt_tokens);
    p.response_tokens += e.response_tokens();
    p.sequence_tokens += static_cast<int64_t>(e.ids.size());
  }
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
    const at::Tensor loss = -out.logprob.mean();
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
    return -model_.Forward(p.batch).logprob.mean().item<double>();
  } catch (const std::exception& e) {
    return Internal(std::string("sft loss: ") + e.what());
  }
}

}  // namespace tandem::train

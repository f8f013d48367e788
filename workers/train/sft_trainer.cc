// The sft step: pack, score response tokens, AdamW (sft_trainer.h).
#include "workers/train/sft_trainer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "workers/model/model_input.h"

namespace tandem::train {

struct SftTrainer::Optimizer {
  explicit Optimizer(std::vector<torch::optim::OptimizerParamGroup> groups, const torch::optim::AdamWOptions& o)
      : adamw(std::move(groups), o) {}
  torch::optim::AdamW adamw;
};

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

// The key LibTorch's optimizers file a parameter's state under: the
// TensorImpl's address, as a string in LibTorch 1.x, as a pointer in later ones.
template <class Map>
typename Map::key_type StateKey(const Map&, const at::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << static_cast<const void*>(p.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

std::string ExpAvgName(const std::string& slot) { return "exp_avg/" + slot; }
std::string ExpAvgSqName(const std::string& slot) { return "exp_avg_sq/" + slot; }

}  // namespace

SftTrainer::SftTrainer(model::Transformer& model, SftTrainerOptions options, std::unique_ptr<Optimizer> opt)
    : model_(model), options_(options), opt_(std::move(opt)) {}
SftTrainer::~SftTrainer() = default;

StatusOr<std::unique_ptr<SftTrainer>> SftTrainer::Create(model::Transformer& model, const SftTrainerOptions& options) {
  TANDEM_RETURN_IF_ERROR(options.schedule.Validate(), "sft trainer");
  if (!(options.weight_decay >= 0) || !(options.max_grad_norm >= 0) || !(options.beta1 >= 0 && options.beta1 < 1) ||
      !(options.beta2 >= 0 && options.beta2 < 1) || !(options.eps > 0))
    return InvalidArgument("sft trainer: weight decay and clip must be >= 0, betas in [0, 1), eps > 0");
  try {
    model.parameters().EnableGrad();
    std::vector<at::Tensor> decay, no_decay;
    for (const model::ParameterSet::Slot& s : model.parameters().slots())
      (s.leaf.dim() >= 2 ? decay : no_decay).push_back(s.leaf);
    torch::optim::AdamWOptions o(options.schedule.peak_lr);
    o.betas({options.beta1, options.beta2}).eps(options.eps).weight_decay(options.weight_decay);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(o));
    auto nd = std::make_unique<torch::optim::AdamWOptions>(o);
    nd->weight_decay(0.0);
    if (!no_decay.empty()) groups.emplace_back(no_decay, std::move(nd));
    auto opt = std::make_unique<Optimizer>(std::move(groups), o);
    return std::unique_ptr<SftTrainer>(new SftTrainer(model, options, std::move(opt)));
  } catch (const std::exception& e) {
    return Internal(std::string("sft trainer: ") + e.what());
  }
}

StatusOr<SftStepStats> SftTrainer::Step(const std::vector<SftExample>& examples, double progress) {
  TANDEM_ASSIGN_OR_RETURN(Packed p, Pack(model_, examples));
  SftStepStats st;
  st.response_tokens = p.response_tokens;
  st.sequence_tokens = p.sequence_tokens;
  st.packed_tokens = p.batch.num_tokens();
  st.lr = options_.schedule.At(steps_, progress);
  try {
    model_.parameters().ZeroGrad();
    const model::ForestOutput out = model_.Forward(p.batch);
    const at::Tensor loss = -out.logprob.mean();
    st.loss = loss.item<double>();
    if (!std::isfinite(st.loss)) return Internal("sft step " + std::to_string(steps_) + ": non-finite loss");
    loss.backward();
    double sq = 0;
    for (const at::Tensor& g : model_.parameters().grad_buffers()) sq += g.to(at::kDouble).square().sum().item<double>();
    st.grad_norm = std::sqrt(sq);
    if (!std::isfinite(st.grad_norm)) return Internal("sft step " + std::to_string(steps_) + ": non-finite gradient");
    if (options_.max_grad_norm > 0 && st.grad_norm > options_.max_grad_norm) {
      const double scale = options_.max_grad_norm / (st.grad_norm + 1e-6);
      for (const at::Tensor& g : model_.parameters().grad_buffers()) g.mul_(scale);
    }
    for (torch::optim::OptimizerParamGroup& group : opt_->adamw.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(st.lr);
    opt_->adamw.step();
  } catch (const std::exception& e) {
    return Internal("sft step " + std::to_string(steps_) + ": " + e.what());
  }
  ++steps_;
  return st;
}

SftTrainerState SftTrainer::State() const {
  SftTrainerState out;
  out.steps = steps_;
  const auto& state = opt_->adamw.state();
  for (const model::ParameterSet::Slot& s : model_.parameters().slots()) {
    const auto it = state.find(StateKey(state, s.leaf));
    if (it == state.end()) continue;
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.tensors[ExpAvgName(s.name)] = st.exp_avg();
    out.tensors[ExpAvgSqName(s.name)] = st.exp_avg_sq();
  }
  return out;
}

Status SftTrainer::Restore(const SftTrainerState& in) {
  const std::vector<model::ParameterSet::Slot>& slots = model_.parameters().slots();
  if (in.steps < 0) return InvalidArgument("sft trainer state: negative step count");
  if (in.tensors.empty() != (in.steps == 0))
    return InvalidArgument("sft trainer state: " + std::to_string(in.steps) + " steps but " +
                           std::to_string(in.tensors.size()) + " optimizer tensors");
  if (!in.tensors.empty() && in.tensors.size() != 2 * slots.size())
    return InvalidArgument("sft trainer state: " + std::to_string(in.tensors.size()) + " optimizer tensors, the model has " +
                           std::to_string(slots.size()) + " parameters (two moments each)");
  const std::vector<model::ParameterSet::Slot> none;
  const std::vector<model::ParameterSet::Slot>& stateful = in.tensors.empty() ? none : slots;
  for (const model::ParameterSet::Slot& s : stateful) {
    for (const std::string& name : {ExpAvgName(s.name), ExpAvgSqName(s.name)}) {
      const auto it = in.tensors.find(name);
      if (it == in.tensors.end()) return InvalidArgument("sft trainer state: no tensor \"" + name + "\"");
      if (!it->second.defined() || it->second.sizes() != s.leaf.sizes())
        return InvalidArgument("sft trainer state: \"" + name + "\" has the wrong shape");
    }
  }
  try {
    at::NoGradGuard no_grad;
    auto& state = opt_->adamw.state();
    std::remove_reference_t<decltype(state)> fresh;
    for (const model::ParameterSet::Slot& s : stateful) {
      const auto like = at::TensorOptions().dtype(s.leaf.scalar_type()).device(s.leaf.device());
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(in.steps);
      st->exp_avg(in.tensors.at(ExpAvgName(s.name)).to(like, /*non_blocking=*/false, /*copy=*/true).contiguous());
      st->exp_avg_sq(in.tensors.at(ExpAvgSqName(s.name)).to(like, false, true).contiguous());
      fresh[StateKey(fresh, s.leaf)] = std::move(st);
    }
    state = std::move(fresh);
  } catch (const std::exception& e) {
    return Internal(std::string("sft trainer state: ") + e.what());
  }
  steps_ = in.steps;
  return Status::Ok();
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

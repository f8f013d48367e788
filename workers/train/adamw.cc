// AdamW with clipping over a parameter set (adamw.h).
#include "workers/train/adamw.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace tandem::train {

struct AdamW::Impl {
  explicit Impl(std::vector<torch::optim::OptimizerParamGroup> groups, const torch::optim::AdamWOptions& o)
      : adamw(std::move(groups), o) {}
  torch::optim::AdamW adamw;
};

namespace {

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

AdamW::AdamW(model::ParameterSet& params, AdamWOptions options, std::unique_ptr<Impl> impl)
    : params_(params), options_(options), impl_(std::move(impl)) {}
AdamW::~AdamW() = default;

Status Validate(const AdamWOptions& options) {
  if (!(options.weight_decay >= 0) || !(options.max_grad_norm >= 0) || !(options.beta1 >= 0 && options.beta1 < 1) ||
      !(options.beta2 >= 0 && options.beta2 < 1) || !(options.eps > 0))
    return InvalidArgument("adamw: weight decay and clip must be >= 0, betas in [0, 1), eps > 0");
  return Status::Ok();
}

StatusOr<double> ClipGradNorm(const model::ParameterSet& params, double max_grad_norm) {
  try {
    double sq = 0;
    for (const at::Tensor& g : params.grad_buffers()) sq += g.to(at::kDouble).square().sum().item<double>();
    const double norm = std::sqrt(sq);
    if (!std::isfinite(norm)) return Internal("non-finite gradient");
    if (max_grad_norm > 0 && norm > max_grad_norm) {
      const double scale = max_grad_norm / (norm + 1e-6);
      for (const at::Tensor& g : params.grad_buffers()) g.mul_(scale);
    }
    return norm;
  } catch (const std::exception& e) {
    return Internal(std::string("clipping the gradients: ") + e.what());
  }
}

StatusOr<std::unique_ptr<AdamW>> AdamW::Create(model::ParameterSet& params, const AdamWOptions& options) {
  TANDEM_RETURN_IF_ERROR(Validate(options));
  try {
    params.EnableGrad();
    std::vector<at::Tensor> decay, no_decay;
    for (const model::ParameterSet::Slot& s : params.slots()) (s.leaf.dim() >= 2 ? decay : no_decay).push_back(s.leaf);
    torch::optim::AdamWOptions o(1e-3);
    o.betas({options.beta1, options.beta2}).eps(options.eps).weight_decay(options.weight_decay);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(o));
    auto nd = std::make_unique<torch::optim::AdamWOptions>(o);
    nd->weight_decay(0.0);
    if (!no_decay.empty()) groups.emplace_back(no_decay, std::move(nd));
    auto impl = std::make_unique<Impl>(std::move(groups), o);
    return std::unique_ptr<AdamW>(new AdamW(params, options, std::move(impl)));
  } catch (const std::exception& e) {
    return Internal(std::string("adamw: ") + e.what());
  }
}

StatusOr<double> AdamW::Step(double lr) {
  TANDEM_ASSIGN_OR_RETURN(const double norm, ClipGradNorm(params_, options_.max_grad_norm), "adamw step");
  try {
    for (torch::optim::OptimizerParamGroup& group : impl_->adamw.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    impl_->adamw.step();
    ++steps_;
    return norm;
  } catch (const std::exception& e) {
    return Internal(std::string("adamw step: ") + e.what());
  }
}

OptimizerState AdamW::State() const {
  OptimizerState out;
  out.steps = steps_;
  const auto& state = impl_->adamw.state();
  for (const model::ParameterSet::Slot& s : params_.slots()) {
    const auto it = state.find(StateKey(state, s.leaf));
    if (it == state.end()) continue;
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.tensors[ExpAvgName(s.name)] = st.exp_avg();
    out.tensors[ExpAvgSqName(s.name)] = st.exp_avg_sq();
  }
  return out;
}

Status AdamW::Restore(const OptimizerState& in) {
  const std::vector<model::ParameterSet::Slot>& slots = params_.slots();
  if (in.steps < 0) return InvalidArgument("optimizer state: negative step count");
  if (in.tensors.empty() != (in.steps == 0))
    return InvalidArgument("optimizer state: " + std::to_string(in.steps) + " steps but " +
                           std::to_string(in.tensors.size()) + " optimizer tensors");
  if (!in.tensors.empty() && in.tensors.size() != 2 * slots.size())
    return InvalidArgument("optimizer state: " + std::to_string(in.tensors.size()) + " optimizer tensors, the model has " +
                           std::to_string(slots.size()) + " parameters (two moments each)");
  const std::vector<model::ParameterSet::Slot> none;
  const std::vector<model::ParameterSet::Slot>& stateful = in.tensors.empty() ? none : slots;
  for (const model::ParameterSet::Slot& s : stateful) {
    for (const std::string& name : {ExpAvgName(s.name), ExpAvgSqName(s.name)}) {
      const auto it = in.tensors.find(name);
      if (it == in.tensors.end()) return InvalidArgument("optimizer state: no tensor \"" + name + "\"");
      if (!it->second.defined() || it->second.sizes() != s.leaf.sizes())
        return InvalidArgument("optimizer state: \"" + name + "\" has the wrong shape");
    }
  }
  try {
    at::NoGradGuard no_grad;
    auto& state = impl_->adamw.state();
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
    return Internal(std::string("optimizer state: ") + e.what());
  }
  steps_ = in.steps;
  return Status::Ok();
}

}  // namespace tandem::train

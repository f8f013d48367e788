// AdamW with native or staged state (adamw.h).
#include "workers/train/adamw.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "kernels/adamw/adamw.h"
#include "workers/ops/glue_common.h"
#include "workers/collective/group.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "kernels/adamw/adamw_cuda.h"
#endif

namespace tandem::train {
Status Validate(const AdamWOptions& options) {
  if (!(options.weight_decay >= 0) || !(options.max_grad_norm >= 0) || !(options.beta1 >= 0 && options.beta1 < 1) ||
      !(options.beta2 >= 0 && options.beta2 < 1) || !(options.eps > 0))
    return InvalidArgument("adamw: weight decay and clip must be >= 0, betas in [0, 1), eps > 0");
  if (options.staging.slots < 1)
    return InvalidArgument("adamw staging: slots must be >= 1, got " + std::to_string(options.staging.slots));
  if (options.staging.slot_bytes < 1024)
    return InvalidArgument("adamw staging: slot_bytes must be >= 1024, got " + std::to_string(options.staging.slot_bytes));
  return Status::Ok();
}

namespace {

#ifdef TANDEM_TORCH_CUDA
kernels::AdamWParamType KernelType(at::ScalarType t) {
  return t == at::kFloat ? kernels::AdamWParamType::kF32
         : t == at::kBFloat16 ? kernels::AdamWParamType::kBf16
                              : kernels::AdamWParamType::kF16;
}
#endif

}  // namespace

StatusOr<double> GradNorm(const model::ParameterSet& params) {
  try {
    // Squares exact in double, summed in double, in one pass over each
    // buffer (kernels/adamw). On CUDA the sum stays on the device until the
    // end: one sync. Other dtypes on the CPU: in float64 a chunk at a time.
    double host = 0;
    at::Tensor device;  // a double on the gradients' GPU
    for (const at::Tensor& g : params.grad_buffers()) {
      const at::Tensor flat = g.reshape({-1});
      const at::ScalarType t = flat.scalar_type();
      if (flat.is_cpu() && t == at::kFloat) {
        double sum = 0;
        ops::ThrowIfError(kernels::SumSquaresCpu(flat.numel(), flat.data_ptr<float>(), &sum, at::get_num_threads()),
                          "the gradients' norm");
        host += sum;
        continue;
      }
#ifdef TANDEM_TORCH_CUDA
      if (flat.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf)) {
        if (!device.defined()) device = at::zeros({}, flat.options().dtype(at::kDouble));
        const at::Tensor workspace = at::empty({kernels::kSumSquaresCudaBlocks}, flat.options().dtype(at::kDouble));
        ops::ThrowIfError(kernels::SumSquaresCuda(KernelType(t), flat.numel(), flat.data_ptr(),
                                                  workspace.data_ptr<double>(), device.data_ptr<double>(),
                                                  c10::cuda::getCurrentCUDAStream(flat.device().index()).stream()),
                          "the gradients' norm");
        continue;
      }
#endif
      constexpr int64_t kChunk = int64_t{1} << 24;
      for (int64_t i = 0; i < flat.numel(); i += kChunk)
        host += flat.slice(0, i, std::min(flat.numel(), i + kChunk)).to(at::kDouble).square().sum().item<double>();
    }
    const double norm = std::sqrt(host + (device.defined() ? device.item<double>() : 0.0));
    if (!std::isfinite(norm)) return Internal("non-finite gradient");
    return norm;
  } catch (const std::exception& e) {
    return Internal(std::string("the gradients' norm: ") + e.what());
  }
}

double ClipScale(double norm, double max_grad_norm) {
  return max_grad_norm > 0 && norm > max_grad_norm ? max_grad_norm / (norm + 1e-6) : 1.0;
}

StatusOr<double> ClipGradNorm(const model::ParameterSet& params, double max_grad_norm) {
  TANDEM_ASSIGN_OR_RETURN(const double norm, GradNorm(params), "clipping the gradients");
  const double scale = ClipScale(norm, max_grad_norm);
  if (scale == 1.0) return norm;
  try {
    for (const at::Tensor& g : params.grad_buffers()) g.mul_(scale);
  } catch (const std::exception& e) {
    return Internal(std::string("clipping the gradients: ") + e.what());
  }
  return norm;
}

AdamW::AdamW(model::ParameterSet& params, AdamWOptions options) : params_(params), adamw_(std::move(options)) {}
AdamW::~AdamW() = default;

StatusOr<std::unique_ptr<AdamW>> AdamW::Create(model::ParameterSet& params, const AdamWOptions& options,
                                               std::shared_ptr<StagingBuffers> buffers) {
  TANDEM_RETURN_IF_ERROR(Validate(options));
  if (params.slots().empty()) return InvalidArgument("adamw: no parameters");
  std::unique_ptr<AdamW> o(new AdamW(params, options));
  const at::Tensor& first = params.slots().front().leaf;
  const at::ScalarType dtype = first.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    return InvalidArgument(std::string("adamw: parameters of dtype ") + c10::toString(dtype) +
                           " (fp32, bf16 or fp16 only)");
  o->master_ = dtype != at::kFloat;
#ifdef TANDEM_TORCH_CUDA
  const bool kernel_takes = first.is_cuda() || (first.is_cpu() && dtype == at::kFloat);
#else
  const bool kernel_takes = first.is_cpu() && dtype == at::kFloat;
#endif
  o->fused_ = options.fused && kernel_takes;
  std::vector<StateSlabs::Item> items;
  for (size_t i = 0; i < params.slots().size(); ++i)
    if (!options.takes || options.takes(params.slots()[i])) o->taken_.push_back(i);
  if (o->taken_.empty()) return InvalidArgument("adamw: it takes none of the parameters");
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();  // the elements this rank owns
  if (options.shard != nullptr && options.shard->world_size() > 1) {
    if (options.takes) return InvalidArgument("adamw: a sharded state needs AdamW on every parameter (not beside Muon)");
    o->shard_ = options.shard;
    int64_t total = 0;
    for (const model::ParameterSet::Slot& s : params.slots()) total += s.leaf.numel();
    const int64_t r = options.shard->rank(), n = options.shard->world_size();
    if (total < n) return InvalidArgument("adamw: " + std::to_string(total) + " parameters cannot be sharded over " +
                                          std::to_string(n) + " ranks");
    lo = total / n * r + std::min(r, total % n);
    hi = lo + total / n + (r < total % n ? 1 : 0);
  }
  for (int64_t at = 0; const size_t i : o->taken_) {
    const model::ParameterSet::Slot& s = params.slots()[i];
    const int64_t n = s.leaf.numel(), b = std::max(lo, at), e = std::min(hi, at + n);
    if (b < e) {
      items.push_back({i, s.name, e - b, 1});
      o->begin_.push_back(b - at);
    }
    at += n;
  }
  TANDEM_ASSIGN_OR_RETURN(o->slabs_,
                          StateSlabs::Create(std::move(items), o->master_ ? 3 : 2, options.staging, first.device(),
                                             std::move(buffers)),
                          "adamw");
  try {
    params.EnableGrad();
    c10::NoGradGuard no_grad;
    if (o->master_) {
      for (size_t i = 0; i < o->slabs_->items().size(); ++i)
        o->slabs_->View(2, i).copy_(o->Owned(params.slots()[o->slabs_->items()[i].slot].leaf.detach(), i));
    }
  } catch (const std::exception& e) {
    return Internal(std::string("adamw: initialising its state: ") + e.what());
  }
  return o;
}

at::Tensor AdamW::Owned(const at::Tensor& slot_tensor, size_t item) const {
  return slot_tensor.reshape({-1}).narrow(0, begin_[item], slabs_->items()[item].numel);
}

void AdamW::Update(const StateSlabs::Piece& piece, const std::vector<at::Tensor>& state, double lr,
                   double grad_scale) {
  const model::ParameterSet::Slot& s = params_.slots()[slabs_->items()[piece.item].slot];
  const int64_t at = begin_[piece.item] + piece.begin;
  const at::Tensor p = s.leaf.detach().view({-1}).narrow(0, at, piece.length);
  at::Tensor g = s.leaf.grad().view({-1}).narrow(0, at, piece.length);
  const at::Tensor &m = state[0], &v = state[1];
  const at::Tensor& w = master_ ? state[2] : p;
  const double weight_decay = s.leaf.dim() >= 2 ? adamw_.weight_decay : 0.0;
  if (fused_) {
    TORCH_CHECK(g.scalar_type() == p.scalar_type(), "adamw: gradient of ", s.name, " is ", g.scalar_type(),
                ", its parameter ", p.scalar_type());
    const kernels::AdamWStep step{lr, weight_decay, adamw_.beta1, adamw_.beta2, adamw_.eps, steps_ + 1, grad_scale};
    if (p.is_cpu()) {
      ops::ThrowIfError(kernels::AdamWCpu(step, piece.length, g.data_ptr<float>(), p.data_ptr<float>(),
                                          m.data_ptr<float>(), v.data_ptr<float>(), at::get_num_threads()),
                        "adamw");
      return;
    }
#ifdef TANDEM_TORCH_CUDA
    float* const master = master_ ? w.data_ptr<float>() : nullptr;
    ops::ThrowIfError(kernels::AdamWCuda(step, KernelType(p.scalar_type()), piece.length, p.data_ptr(), g.data_ptr(), master,
                                         m.data_ptr<float>(), v.data_ptr<float>(),
                                         c10::cuda::getCurrentCUDAStream(p.device().index()).stream()),
                      "adamw");
#endif
    return;
  }
  // LibTorch's AdamW::step, op for op (torch/csrc/api/src/optim/adamw.cpp).
  if (master_) g = g.to(at::kFloat);
  const double t = static_cast<double>(steps_ + 1);
  if (weight_decay != 0) w.mul_(1 - lr * weight_decay);
  const double bias_correction1 = 1 - std::pow(adamw_.beta1, t);
  const double bias_correction2 = 1 - std::pow(adamw_.beta2, t);
  m.mul_(adamw_.beta1).add_(g, 1 - adamw_.beta1);
  v.mul_(adamw_.beta2).addcmul_(g, g, 1 - adamw_.beta2);
  const at::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(adamw_.eps);
  w.addcdiv_(m, denom, -lr / bias_correction1);
  if (master_) p.copy_(w);
}

StatusOr<double> AdamW::Step(double lr) {
  // The kernel scales the gradients as it reads them when AdamW owns every
  // slot; otherwise (unfused, or another optimizer reads the other slots'
  // gradients) ClipGradNorm scales them in place.
  const bool kernel_clips = fused_ && taken_.size() == params_.slots().size();
  TANDEM_ASSIGN_OR_RETURN(const double norm,
                          kernel_clips ? GradNorm(params_) : ClipGradNorm(params_, adamw_.max_grad_norm), "adamw step");
  const double grad_scale = kernel_clips ? ClipScale(norm, adamw_.max_grad_norm) : 1.0;
  try {
    c10::NoGradGuard no_grad;
    slabs_->Update([&](const StateSlabs::Piece& piece, const std::vector<at::Tensor>& state) {
      Update(piece, state, lr, grad_scale);
    });
  } catch (const std::exception& e) {
    return Internal(std::string("adamw step: ") + e.what());
  }
  ++steps_;
  if (shard_ != nullptr) TANDEM_RETURN_IF_ERROR(GatherParameters(), "adamw step");
  return norm;
}

std::optional<size_t> AdamW::ItemOf(size_t slot) const {
  const std::vector<StateSlabs::Item>& items = slabs_->items();
  const auto it = std::lower_bound(items.begin(), items.end(), slot,
                                   [](const StateSlabs::Item& item, size_t s) { return item.slot < s; });
  if (it == items.end() || it->slot != slot) return std::nullopt;
  return static_cast<size_t>(it - items.begin());
}

Status AdamW::GatherParameters() {
  try {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.slots().size(); ++i) {
      const at::Tensor flat = params_.slots()[i].leaf.detach().view({-1});
      const std::optional<size_t> k = ItemOf(i);
      const int64_t b = k ? begin_[*k] : 0, e = k ? b + slabs_->items()[*k].numel : 0;  // what this rank owns
      if (b > 0) flat.narrow(0, 0, b).fill_(-0.0);
      if (e < flat.numel()) flat.narrow(0, e, flat.numel() - e).fill_(-0.0);
    }
  } catch (const std::exception& e) {
    return Internal(std::string("gathering the parameters: ") + e.what());
  }
  std::vector<at::Tensor> buffers = params_.buffers();
  return shard_->AllReduceSum(buffers).WithContext("gathering the parameters");
}

Status AdamW::GatherState() {
  if (shard_ == nullptr) return Status::Ok();
  gathered_ = {steps_, {}};
  if (steps_ == 0) return Status::Ok();
  const at::Device device = params_.slots().front().leaf.device();
  try {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.slots().size(); ++i) {
      const model::ParameterSet::Slot& s = params_.slots()[i];
      const std::optional<size_t> k = ItemOf(i);
      for (int kind = 0; kind < (master_ ? 3 : 2); ++kind) {
        std::vector<at::Tensor> whole = {at::full({s.leaf.numel()}, -0.0, at::TensorOptions().dtype(at::kFloat).device(device))};
        if (k) Owned(whole[0], *k).copy_(slabs_->View(kind, *k));
        TANDEM_RETURN_IF_ERROR(shard_->AllReduceSum(whole), "gathering the optimizer's state");
        if (shard_->rank() != 0) continue;  // rank 0 writes checkpoints
        static const char* const kNames[] = {"exp_avg/", "exp_avg_sq/", "master/"};
        gathered_.tensors[kNames[kind] + s.name] = whole[0].cpu().view(s.leaf.sizes());
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("gathering the optimizer's state: ") + e.what());
  }
  return Status::Ok();
}

OptimizerState AdamW::State() const {
  if (shard_ != nullptr) return gathered_.steps == steps_ ? gathered_ : OptimizerState{steps_, {}};
  OptimizerState out;
  out.steps = steps_;
  if (steps_ == 0) return out;
  for (size_t i = 0; i < slabs_->items().size(); ++i) {
    const model::ParameterSet::Slot& s = params_.slots()[slabs_->items()[i].slot];
    out.tensors["exp_avg/" + s.name] = slabs_->View(0, i).view(s.leaf.sizes());
    out.tensors["exp_avg_sq/" + s.name] = slabs_->View(1, i).view(s.leaf.sizes());
    if (master_) out.tensors["master/" + s.name] = slabs_->View(2, i).view(s.leaf.sizes());
  }
  return out;
}

Status AdamW::Restore(const OptimizerState& in) {
  const std::vector<StateSlabs::Item>& items = slabs_->items();
  const size_t owned = taken_.size();
  if (in.steps < 0) return InvalidArgument("optimizer state: negative step count");
  if (in.tensors.empty() != (in.steps == 0))
    return InvalidArgument("optimizer state: " + std::to_string(in.steps) + " steps but " +
                           std::to_string(in.tensors.size()) + " optimizer tensors");
  bool with_master = false;
  if (!in.tensors.empty()) {
    with_master = in.tensors.size() == 3 * owned;
    if (in.tensors.size() != 2 * owned && !(master_ && with_master))
      return InvalidArgument("optimizer state: " + std::to_string(in.tensors.size()) + " optimizer tensors, AdamW has " +
                             std::to_string(owned) + " parameters (two moments each" +
                             (master_ ? ", and their fp32 masters" : "") + ")");
    for (const size_t slot : taken_) {
      const model::ParameterSet::Slot& s = params_.slots()[slot];
      const at::IntArrayRef shape = s.leaf.sizes();
      std::vector<std::string> names = {"exp_avg/" + s.name, "exp_avg_sq/" + s.name};
      if (with_master) names.push_back("master/" + s.name);
      for (const std::string& name : names) {
        const auto it = in.tensors.find(name);
        if (it == in.tensors.end()) return InvalidArgument("optimizer state: no tensor \"" + name + "\"");
        if (!it->second.defined() || it->second.sizes() != shape || !at::isFloatingType(it->second.scalar_type()))
          return InvalidArgument("optimizer state: \"" + name + "\" has the wrong shape or dtype");
      }
    }
  }
  try {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].name;
      auto put = [&](int kind, const std::string& key) {
        const auto it = in.tensors.find(key);
        if (it == in.tensors.end()) {
          slabs_->View(kind, i).zero_();
        } else {
          slabs_->View(kind, i).copy_(Owned(it->second, i));
        }
      };
      put(0, "exp_avg/" + name);
      put(1, "exp_avg_sq/" + name);
      if (master_) {
        if (with_master) {
          put(2, "master/" + name);
        } else {
          slabs_->View(2, i).copy_(Owned(params_.slots()[items[i].slot].leaf.detach(), i));
        }
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("optimizer state: ") + e.what());
  }
  steps_ = in.steps;
  gathered_ = {};
  return Status::Ok();
}

Status AdamW::Release() { return slabs_->Release().WithContext("adamw"); }
Status AdamW::Resume() { return slabs_->Resume().WithContext("adamw"); }

}  // namespace tandem::train

// AdamW with native or staged state (adamw.h).
#include "workers/train/adamw.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace tandem::train {
namespace {

int64_t Kinds(bool master) { return master ? 3 : 2; }

}  // namespace

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

StatusOr<StagingOptions> MakeStaging(const std::string& residency, int64_t slots, int64_t slot_mib) {
  StagingOptions s;
  if (residency == "staged") {
    s.residency = Residency::kStaged;
  } else if (residency != "native") {
    return InvalidArgument("--optimizer-residency: expected native or staged, got \"" + residency + "\"");
  }
  if (slots < 1 || slots > 1024) return InvalidArgument("--optimizer-slots: expected 1 to 1024, got " + std::to_string(slots));
  if (slot_mib < 1 || slot_mib > 65536)
    return InvalidArgument("--optimizer-slot-mib: expected 1 to 65536, got " + std::to_string(slot_mib));
  s.slots = static_cast<int>(slots);
  s.slot_bytes = slot_mib << 20;
  return s;
}

std::string Describe(const StagingOptions& s) {
  if (s.residency == Residency::kNative) return "native";
  return "staged through " + std::to_string(s.slots) + " x " + std::to_string(s.slot_bytes >> 20) + " MiB buffers";
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

AdamW::AdamW(model::ParameterSet& params, AdamWOptions options) : params_(params), adamw_(std::move(options)) {}
AdamW::~AdamW() = default;

StatusOr<std::unique_ptr<AdamW>> AdamW::Create(model::ParameterSet& params, const AdamWOptions& options) {
  TANDEM_RETURN_IF_ERROR(Validate(options));
  if (params.slots().empty()) return InvalidArgument("adamw: no parameters");
  std::unique_ptr<AdamW> o(new AdamW(params, options));
  const StagingOptions& staging = options.staging;
  try {
    params.EnableGrad();
    const at::Tensor& first = params.slots().front().leaf;
    const at::ScalarType dtype = first.scalar_type();
    if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
      return InvalidArgument(std::string("adamw: parameters of dtype ") + c10::toString(dtype) +
                             " (fp32, bf16 or fp16 only)");
    o->master_ = dtype != at::kFloat;
    o->slot_state_.assign(params.slots().size(), -1);
    for (size_t i = 0; i < params.slots().size(); ++i) {
      const model::ParameterSet::Slot& s = params.slots()[i];
      if (options.takes && !options.takes(s)) continue;
      o->owned_.push_back(i);
      o->slot_state_[i] = o->total_;
      o->total_ += s.leaf.numel();
    }
    if (o->owned_.empty()) return InvalidArgument("adamw: it takes none of the parameters");
    const bool staged = staging.residency == Residency::kStaged;
    at::TensorOptions where = at::TensorOptions().dtype(at::kFloat).device(staged ? at::Device(at::kCPU) : first.device());
    if (staged && first.is_cuda()) where = where.pinned_memory(true);
    auto slab = [&] { return at::zeros({o->total_}, where); };
    o->exp_avg_ = slab();
    o->exp_avg_sq_ = slab();
    if (o->master_) {
      o->master_w_ = slab();
      for (const size_t i : o->owned_) {
        const at::Tensor& leaf = params.slots()[i].leaf;
        o->master_w_.narrow(0, o->slot_state_[i], leaf.numel()).copy_(leaf.detach().reshape({-1}));
      }
    }
    if (staged) {
      // Buckets of at most `capacity` elements of each kind; a slot larger
      // than that is cut into pieces. Consecutive pieces: a bucket's state
      // is one contiguous range of the slabs.
      const int64_t capacity = staging.slot_bytes / (4 * Kinds(o->master_));
      for (const size_t i : o->owned_) {
        const int64_t n = params.slots()[i].leaf.numel();
        for (int64_t begin = 0; begin < n;) {
          if (o->buckets_.empty() || o->buckets_.back().elements == capacity) o->buckets_.emplace_back();
          Bucket& b = o->buckets_.back();
          const int64_t length = std::min(n - begin, capacity - b.elements);
          b.pieces.push_back({i, begin, length, o->slot_state_[i] + begin});
          b.elements += length;
          begin += length;
        }
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("adamw: allocating its state: ") + e.what());
  }
  return o;
}

void AdamW::Update(const Piece& piece, const at::Tensor& m, const at::Tensor& v, const at::Tensor& master, double lr) {
  // LibTorch's AdamW::step, op for op (torch/csrc/api/src/optim/adamw.cpp).
  const model::ParameterSet::Slot& s = params_.slots()[piece.slot];
  const at::Tensor p = s.leaf.detach().view({-1}).narrow(0, piece.begin, piece.length);
  at::Tensor g = s.leaf.grad().view({-1}).narrow(0, piece.begin, piece.length);
  if (master_) g = g.to(at::kFloat);
  const at::Tensor& w = master_ ? master : p;
  const double t = static_cast<double>(steps_ + 1);
  const double weight_decay = s.leaf.dim() >= 2 ? adamw_.weight_decay : 0.0;
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
  TANDEM_ASSIGN_OR_RETURN(const double norm, ClipGradNorm(params_, adamw_.max_grad_norm));
  try {
    at::NoGradGuard no_grad;
    if (adamw_.staging.residency == Residency::kNative) {
      for (const size_t i : owned_) {
        const int64_t n = params_.slots()[i].leaf.numel();
        const int64_t at = slot_state_[i];
        Update({i, 0, n, at}, exp_avg_.narrow(0, at, n), exp_avg_sq_.narrow(0, at, n),
               master_ ? master_w_.narrow(0, at, n) : at::Tensor(), lr);
      }
    } else {
      const at::Device device = params_.slots().front().leaf.device();
      const bool async = device.is_cuda();
      const int64_t capacity = adamw_.staging.slot_bytes / (4 * Kinds(master_));
      if (buffers_.empty()) {
        for (int i = 0; i < adamw_.staging.slots && i < static_cast<int>(buckets_.size()); ++i)
          buffers_.push_back(at::empty({capacity * Kinds(master_)}, at::TensorOptions().dtype(at::kFloat).device(device)));
      }
      for (size_t b = 0; b < buckets_.size(); ++b) {
        const Bucket& bucket = buckets_[b];
        const at::Tensor& buffer = buffers_[b % buffers_.size()];
        const int64_t first = bucket.pieces.front().state, n = bucket.elements;
        std::vector<std::pair<at::Tensor, at::Tensor>> kinds = {{exp_avg_.narrow(0, first, n), buffer.narrow(0, 0, n)},
                                                                {exp_avg_sq_.narrow(0, first, n), buffer.narrow(0, capacity, n)}};
        if (master_) kinds.emplace_back(master_w_.narrow(0, first, n), buffer.narrow(0, 2 * capacity, n));
        for (auto& [host, staged] : kinds) staged.copy_(host, async);  // in stream order after the buffer's last copy back
        for (const Piece& piece : bucket.pieces) {
          const int64_t at = piece.state - first;
          Update(piece, kinds[0].second.narrow(0, at, piece.length), kinds[1].second.narrow(0, at, piece.length),
                 master_ ? kinds[2].second.narrow(0, at, piece.length) : at::Tensor(), lr);
        }
        const bool last = b + 1 == buckets_.size();
        for (auto& [host, staged] : kinds) host.copy_(staged, async && !last);  // the last blocks: the step's state is home
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("adamw step: ") + e.what());
  }
  ++steps_;
  return norm;
}

OptimizerState AdamW::State() const {
  OptimizerState out;
  out.steps = steps_;
  if (steps_ == 0) return out;
  for (const size_t i : owned_) {
    const model::ParameterSet::Slot& s = params_.slots()[i];
    auto view = [&](const at::Tensor& slab) { return slab.narrow(0, slot_state_[i], s.leaf.numel()).view(s.leaf.sizes()); };
    out.tensors["exp_avg/" + s.name] = view(exp_avg_);
    out.tensors["exp_avg_sq/" + s.name] = view(exp_avg_sq_);
    if (master_) out.tensors["master/" + s.name] = view(master_w_);
  }
  return out;
}

Status AdamW::Restore(const OptimizerState& in) {
  const std::vector<model::ParameterSet::Slot>& slots = params_.slots();
  const size_t owned = owned_.size();
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
    for (const size_t i : owned_) {
      const model::ParameterSet::Slot& s = slots[i];
      std::vector<std::string> names = {"exp_avg/" + s.name, "exp_avg_sq/" + s.name};
      if (with_master) names.push_back("master/" + s.name);
      for (const std::string& name : names) {
        const auto it = in.tensors.find(name);
        if (it == in.tensors.end()) return InvalidArgument("optimizer state: no tensor \"" + name + "\"");
        if (!it->second.defined() || it->second.sizes() != s.leaf.sizes() || !at::isFloatingType(it->second.scalar_type()))
          return InvalidArgument("optimizer state: \"" + name + "\" has the wrong shape or dtype");
      }
    }
  }
  try {
    at::NoGradGuard no_grad;
    for (const size_t i : owned_) {
      const model::ParameterSet::Slot& s = slots[i];
      const int64_t n = s.leaf.numel(), at = slot_state_[i];
      auto put = [&](const at::Tensor& slab, const std::string& name) {
        const auto it = in.tensors.find(name);
        if (it == in.tensors.end()) {
          slab.narrow(0, at, n).zero_();
        } else {
          slab.narrow(0, at, n).copy_(it->second.reshape({-1}));
        }
      };
      put(exp_avg_, "exp_avg/" + s.name);
      put(exp_avg_sq_, "exp_avg_sq/" + s.name);
      if (master_) {
        if (with_master) {
          put(master_w_, "master/" + s.name);
        } else {
          master_w_.narrow(0, at, n).copy_(s.leaf.detach().reshape({-1}));
        }
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("optimizer state: ") + e.what());
  }
  steps_ = in.steps;
  return Status::Ok();
}

void AdamW::Release() { buffers_.clear(); }

int64_t AdamW::device_bytes() const {
  if (adamw_.staging.residency == Residency::kNative)
    return static_cast<int64_t>(exp_avg_.nbytes() + exp_avg_sq_.nbytes() + (master_ ? master_w_.nbytes() : 0));
  int64_t bytes = 0;
  for (const at::Tensor& b : buffers_) bytes += static_cast<int64_t>(b.nbytes());
  return bytes;
}

}  // namespace tandem::train

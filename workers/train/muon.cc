// Muon's update (muon.h).
#include "workers/train/muon.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace tandem::train {

Status Validate(const MuonOptions& o) {
  if (!(o.beta >= 0 && o.beta < 1)) return InvalidArgument("muon: beta must be in [0, 1), got " + std::to_string(o.beta));
  if (o.ns_steps < 1 || o.ns_steps > 100)
    return InvalidArgument("muon: ns_steps must be in [1, 100], got " + std::to_string(o.ns_steps));
  if (!(o.weight_decay >= 0)) return InvalidArgument("muon: weight_decay must be >= 0");
  if (!at::isFloatingType(o.ns_dtype)) return InvalidArgument("muon: ns_dtype must be a floating type");
  return Status::Ok();
}

bool MuonTakes(const std::string& name, at::IntArrayRef shape) {
  if (shape.size() < 2) return false;
  return name.find("embed_tokens") == std::string::npos && name.find("lm_head") == std::string::npos;
}

std::vector<at::Tensor> MuonMatrices(const std::string& name, const at::Tensor& t) {
  const auto ends_with = [&name](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("experts.w_gate_up")) {
    const int64_t i = t.size(-1) / 2;
    return {t.narrow(-1, 0, i).transpose(-2, -1), t.narrow(-1, i, i).transpose(-2, -1)};
  }
  if (ends_with("experts.w_down")) return {t.transpose(-2, -1)};
  return {t};
}

at::Tensor NewtonSchulz5(const at::Tensor& g, int steps, at::ScalarType dtype) {
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = g.size(-2) > g.size(-1);
  at::Tensor x = g.to(dtype);
  if (tall) x = x.transpose(-2, -1);
  x = x / (at::linalg_vector_norm(x, 2, at::IntArrayRef{-2, -1}, /*keepdim=*/true) + 1e-7);
  for (int i = 0; i < steps; ++i) {
    const at::Tensor A = at::matmul(x, x.transpose(-2, -1));
    const at::Tensor B = b * A + c * at::matmul(A, A);
    x = a * x + at::matmul(B, x);
  }
  if (tall) x = x.transpose(-2, -1);
  return x.to(g.scalar_type());
}

double MuonScale(int64_t rows, int64_t cols, bool match_adamw_rms) {
  if (match_adamw_rms) return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
}

void MuonUpdate(const at::Tensor& w, const at::Tensor& grad, const at::Tensor& momentum, double lr,
                const MuonOptions& o) {
  const at::Tensor g = grad.to(at::kFloat);
  momentum.lerp_(g, 1 - o.beta);
  const at::Tensor u = o.nesterov ? g.lerp(momentum, o.beta) : momentum;
  const at::Tensor x = NewtonSchulz5(u, o.ns_steps, o.ns_dtype);
  if (o.weight_decay != 0) w.mul_(1 - lr * o.weight_decay);
  w.add_(x, -lr * MuonScale(w.size(-2), w.size(-1), o.match_adamw_rms));
}

}  // namespace tandem::train

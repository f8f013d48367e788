// The fused AdamW update on the CPU (adamw.h). Compiled with
// -ffp-contract=off (CMakeLists.txt): each operation rounds on its own, as
// the CUDA kernel's explicit __f*_rn intrinsics do, so both give the same
// bits.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/adamw/adamw.h"
#include "kernels/common/parallel_for.h"

namespace tandem::kernels {

Status CheckAdamWStep(const AdamWStep& s) {
  auto bad = [](const char* field, double value, const char* want) {
    return InvalidArgument(std::string("adamw step: ") + field + " must be " + want + ", got " + std::to_string(value));
  };
  if (!std::isfinite(s.lr) || s.lr < 0) return bad("lr", s.lr, "finite and >= 0");
  if (!std::isfinite(s.weight_decay) || s.weight_decay < 0) return bad("weight_decay", s.weight_decay, "finite and >= 0");
  if (!(s.beta1 >= 0 && s.beta1 < 1)) return bad("beta1", s.beta1, "in [0, 1)");
  if (!(s.beta2 >= 0 && s.beta2 < 1)) return bad("beta2", s.beta2, "in [0, 1)");
  if (!(s.eps > 0) || !std::isfinite(s.eps)) return bad("eps", s.eps, "finite and > 0");
  if (s.step < 1) return bad("step", static_cast<double>(s.step), ">= 1");
  if (!std::isfinite(s.grad_scale) || !(s.grad_scale > 0)) return bad("grad_scale", s.grad_scale, "finite and > 0");
  return Status::Ok();
}

AdamWScalars MakeAdamWScalars(const AdamWStep& s) {
  const double t = static_cast<double>(s.step);
  AdamWScalars k;
  k.decay = static_cast<float>(1 - s.lr * s.weight_decay);
  k.beta1 = static_cast<float>(s.beta1);
  k.one_minus_beta1 = static_cast<float>(1 - s.beta1);
  k.beta2 = static_cast<float>(s.beta2);
  k.one_minus_beta2 = static_cast<float>(1 - s.beta2);
  k.neg_step_size = static_cast<float>(-s.lr / (1 - std::pow(s.beta1, t)));
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, t)));
  k.eps = static_cast<float>(s.eps);
  k.grad_scale = static_cast<float>(s.grad_scale);
  return k;
}

namespace {

void UpdateRange(const AdamWScalars& k, int64_t begin, int64_t end, const float* grad, float* w, float* m, float* v) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * k.grad_scale;
    const float mi = m[i] * k.beta1 + k.one_minus_beta1 * g;
    const float vi = v[i] * k.beta2 + k.one_minus_beta2 * g * g;
    const float denom = std::sqrt(vi) / k.bias_correction2_sqrt + k.eps;
    w[i] = w[i] * k.decay + k.neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

Status AdamWCpu(const AdamWStep& s, int64_t n, const float* grad, float* w, float* m, float* v, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckAdamWStep(s));
  if (n < 0) return InvalidArgument("adamw (cpu): negative element count " + std::to_string(n));
  if (n == 0) return Status::Ok();
  if (grad == nullptr || w == nullptr || m == nullptr || v == nullptr)
    return InvalidArgument("adamw (cpu): null pointer");
  const AdamWScalars k = MakeAdamWScalars(s);
  // Blocks of 64 Ki elements (1.25 MiB of the five arrays): a thread's start
  // costs less than one block's update.
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  ParallelFor(blocks, blocks == 1 ? 1 : threads, [&](int64_t b) {
    UpdateRange(k, b * kBlock, std::min(n, (b + 1) * kBlock), grad, w, m, v);
  });
  return Status::Ok();
}

Status SumSquaresCpu(int64_t n, const float* x, double* out, int threads) {
  if (n < 0) return InvalidArgument("sum of squares (cpu): negative element count " + std::to_string(n));
  if (out == nullptr || (n > 0 && x == nullptr)) return InvalidArgument("sum of squares (cpu): null pointer");
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  ParallelFor(blocks, blocks == 1 ? 1 : threads, [&](int64_t b) {
    // Eight running sums in a fixed pattern: independent adds, same order every run.
    double acc[8] = {};
    const int64_t begin = b * kBlock, end = std::min(n, (b + 1) * kBlock);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    for (int j = 0; i < end; ++i, ++j) acc[j] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[static_cast<size_t>(b)] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  });
  double sum = 0;
  for (double p : partial) sum += p;
  *out = sum;
  return Status::Ok();
}

}  // namespace tandem::kernels

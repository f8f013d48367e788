// One AdamW update in one pass over memory (issue #17, "AdamW ... fused
// semantics"; docs/optimizers.md "The fused update"): per element it reads
// the gradient, the weight (or its fp32 master), exp_avg and exp_avg_sq once
// and writes them back, where LibTorch's op-by-op update runs about nine
// kernels over the same tensors. CPU oracle and CPU implementation here;
// CUDA in adamw_cuda.h. The caller decides per tensor whether weight decay
// applies (adamw.h in workers/train: matrices only).
//
// torch.optim.AdamW's math (decoupled decay, bias correction, eps outside
// the square root), with the gradient clip's factor applied as it is read:
//   g      = grad * grad_scale
//   w      = w * (1 - lr * weight_decay)
//   m      = m * beta1 + (1 - beta1) * g
//   v      = v * beta2 + ((1 - beta2) * g) * g
//   denom  = sqrt(v) / sqrt(1 - beta2^t) + eps
//   w      = w + ((-lr / (1 - beta1^t)) * m) / denom
// The scalar factors are computed in double and rounded to fp32 once
// (AdamWScalars), as LibTorch casts a double scalar for a float tensor; the
// element math is fp32, every operation rounded on its own (no fused
// multiply-add), in the order written. So the CPU implementation and the
// CUDA kernel give the same bits, and LibTorch's ops differ from them only
// where its vectorised kernels contract a multiply-add (one rounding).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem::kernels {

struct AdamWStep {
  double lr = 0;
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 1;         // t: 1 for the first update
  double grad_scale = 1;    // the gradient clip's factor (1: none)
};
// InvalidArgument naming the field: lr and weight_decay finite and >= 0,
// betas in [0, 1), eps > 0, step >= 1, grad_scale finite and > 0.
Status CheckAdamWStep(const AdamWStep& s);

// The per-element constants, rounded to fp32 once.
struct AdamWScalars {
  float decay = 1;                 // 1 - lr * weight_decay
  float beta1 = 0, one_minus_beta1 = 0;
  float beta2 = 0, one_minus_beta2 = 0;
  float neg_step_size = 0;         // -lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1; // sqrt(1 - beta2^t)
  float eps = 0;
  float grad_scale = 1;
};
AdamWScalars MakeAdamWScalars(const AdamWStep& s);

// Oracle: the formula above in fp64 from the fp32 inputs, stored as fp32.
// w, m, v are updated in place; n >= 0.
void AdamWRef(const AdamWStep& s, int64_t n, const float* grad, float* w, float* m, float* v);

// CPU implementation, fp32 (the bits of the CUDA kernel). Blocks of
// elements in parallel on `threads` threads (<= 0: one per hardware thread;
// small tensors run on the caller's). InvalidArgument for a bad step, a
// negative n or a null pointer with n > 0.
Status AdamWCpu(const AdamWStep& s, int64_t n, const float* grad, float* w, float* m, float* v, int threads = 0);

// The gradient clip's input: the sum of x_i^2, each square exact in double,
// summed in double over blocks of 64 Ki elements in a fixed order (the same
// result on any thread count). InvalidArgument for n < 0, a null x or out.
Status SumSquaresCpu(int64_t n, const float* x, double* out, int threads = 0);

}  // namespace tandem::kernels

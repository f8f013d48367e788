// LibTorch glue for the decoder's fused glue kernels (kernels/fused/fused.h;
// issue #13 "Performance"; docs/model.md "Fused ops"): custom autograd
// functions dispatching by device, CPU fp32 to the CPU implementation, CUDA
// bf16 to the kernels on the current stream (HF's bf16 roundings, fused.h).
// Each replaces 5-15 ATen kernels of HF's formula, forward and backward.
//
//   RmsNorm(x [..., C], weight [C], eps) -> y [..., C]     (Qwen3RMSNorm)
//   AddRmsNorm(x, delta, weight, eps) -> {sum = x + delta, normed = RmsNorm(sum)}
//     (the residual add fused; both outputs differentiable)
//   QkNormRotary(x [T, heads, D], weight [D], cos [T, D], sin [T, D], eps)
//     -> rotary(RmsNorm(x)) [T, heads, D]; cos/sin get no gradient
//   Swiglu(gate, up) -> silu(gate) * up (same shapes)
// Inputs may be non-contiguous (copied then). Gradients in the inputs'
// dtypes; weight gradients summed in fp32. Wrong dtypes, devices or shapes
// throw c10::Error naming the function and the argument.
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem::ops {

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

struct AddRmsNormOutput {
  at::Tensor sum;     // x + delta, x's dtype
  at::Tensor normed;  // RmsNorm(sum)
};
AddRmsNormOutput AddRmsNorm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps);

at::Tensor QkNormRotary(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin,
                        double eps);

at::Tensor Swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace tandem::ops

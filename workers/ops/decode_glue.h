// Forward-only fused glue of the decode step (issue #14 "Performance";
// docs/inference.md "A decode step's kernels"). At small batches a decode
// step is bound by how many kernels it launches, not by their work: these
// take the outputs of the fused q/k/v and gate/up projections (one GEMM
// each instead of three and two; model/transformer.cc) and do in one kernel
// what the training ops do in several. No autograd: inputs must not
// require grad.
//
//   QkvRotaryKvWrite(qkv [T, (Hq + 2 Hkv) D] (rows may be strided, as a
//       slice of a wider output), q_weight, k_weight [D], cos, sin [T, D],
//       key_blocks, value_blocks [N, block_size, Hkv, D], slot_mapping [T]
//       int64, q_heads, eps) -> q [T, Hq, D]
//     = QkNormRotary of the q heads with q_weight; the k heads
//     (QkNormRotary with k_weight) and the v heads are written to the pools
//     as PagedKvWrite writes them. CUDA bf16: one kernel, bit for bit the
//     ops it replaces; CPU (and shapes the kernel does not take): those ops.
//   SwigluPacked(gate_up [T, 2I]) -> Swiglu(gate_up[:, :I], gate_up[:, I:])
//     [T, I]; CUDA bf16 with I even: one kernel, bit for bit Swiglu.
//   NormLinear(x [T, H], delta [T, H] or undefined, norm_weight [H], eps,
//       weight [O, H], swiglu) -> {sum = x + delta (x itself without delta),
//       y = linear(RmsNorm(sum), weight) [T, O], or SwigluPacked of it
//       [T, O / 2] with swiglu}: the norm before a projection and the
//     activation after it. H even and at most kFusedCudaMaxCols (the fused
//     norm's widths).
//   DecodeLinear(x [T, K], weight [O, K]) -> linear(x, weight).
//     These two, on CUDA bf16 where the decode GEMV is faster
//     (kernels::DecodeGemvPays: a batch-1 step's one row) and
//     TANDEM_DECODE_GEMV is not off: one kernel each (fp32 sums in another
//     order than cuBLAS's: an output may differ by a bf16 rounding); else
//     the ops they replace (AddRmsNorm or RmsNorm, at::linear,
//     SwigluPacked).
// Bad dtypes, devices or shapes throw c10::Error naming the argument.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tandem::ops {

at::Tensor QkvRotaryKvWrite(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& key_blocks,
                            const at::Tensor& value_blocks, const at::Tensor& slot_mapping, int64_t q_heads,
                            double eps);

at::Tensor SwigluPacked(const at::Tensor& gate_up);

struct NormLinearOutput {
  at::Tensor sum;  // x + delta, or x
  at::Tensor y;
};
NormLinearOutput NormLinear(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& norm_weight, double eps,
                            const at::Tensor& weight, bool swiglu);

at::Tensor DecodeLinear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace tandem::ops

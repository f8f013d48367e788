// LibTorch glue for the MoE layer pieces (issue #4, "Thin LibTorch glue";
// docs/kernels-torch.md; the math is kernels/moe/moe.h). Each differentiable
// piece is a custom autograd function; all dispatch by device:
// CPU -> the CPU implementation (fp32), CUDA -> the CUDA kernels (bf16
// activations and weights, fp32 router) on the current stream, with cuBLAS
// from at::cuda::getCurrentCUDABlasHandle().
//
//   MoeRoute(logits [T, E] fp32, k, score, renormalize)
//     -> topk_weight [T, k] fp32 (differentiable), score_sum [E] fp32
//        (differentiable: the load-balancing statistic), topk_idx [T, k]
//        int32, scores [T, E] and counts [E] int32 (not differentiable).
//   MoePermutePlan(topk_idx [T, k] int32, E, host_offsets) -> the grouping
//     (no gradient); with host_offsets its offsets are also copied to the
//     host (on CUDA: one stream sync; the kKernels experts need them).
//   MoePermute(x [T, H], plan) -> xp [T*k, H], rows grouped by expert.
//   MoeExpertsFfn(xp, plan, w_gate_up [E, H, 2I], w_down [E, I, H], impl) ->
//     yp [T*k, H], SwiGLU per expert (grouped GEMM); grads for xp and
//     weights. Two implementations (MoeExpertsImpl):
//       kKernels    kernels/moe's grouped GEMM (CUDA: cuBLAS grouped-batched
//                   or per-expert GEMMs over the host offsets; CPU: its
//                   oracle), its own backward;
//       kGroupedMm  ATen's grouped GEMM over the plan's device offsets
//                   (CUDA: aten::_grouped_mm called by name, one CUTLASS
//                   kernel, no host offsets and so no sync: the path CUDA
//                   graphs can capture; CPU: one at::mm per expert, its
//                   reference), SwiGLU in ATen ops, ATen's autograd;
//       kDefault    CPU: kKernels; CUDA: TANDEM_MOE_EXPERTS = grouped-mm
//                   or kernels, read once; unset: grouped-mm where
//                   LibTorch has aten::_grouped_mm, else kernels.
//   MoeUnpermute(yp, topk_weight [T, k] fp32, plan) -> out [T, H];
//     grads for yp and topk_weight.
// Activations and weights: CPU fp32, CUDA bf16 (weight gradients are
// computed in fp32 and returned in the weights' dtype); on CUDA H and I must
// be multiples of 8 (16-byte rows). Wrong device, dtype
// or shape throws c10::Error. On the CPU an expert id out of range is an
// error; on CUDA such a pair is counted nowhere and its rows stay unwritten.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kernels/moe/moe.h"

namespace tandem::ops {

struct MoeRouting {
  at::Tensor topk_weight;  // [T, k] fp32
  at::Tensor topk_idx;     // [T, k] int32
  at::Tensor scores;       // [T, E] fp32
  at::Tensor counts;       // [E] int32
  at::Tensor score_sum;    // [E] fp32
};

MoeRouting MoeRoute(const at::Tensor& logits, int64_t top_k, kernels::RouterScore score, bool renormalize);

struct MoePermutation {
  int64_t tokens = 0;                 // T
  int64_t top_k = 0;                  // k
  int64_t experts = 0;                // E
  at::Tensor offsets;                 // [E + 1] int32, on the device of topk_idx
  at::Tensor perm_pos;                // [T * k] int32: row of pair t*k+j
  at::Tensor perm_src;                // [T * k] int32: pair of row r
  std::vector<int32_t> host_offsets;  // offsets on the host
};

// host_offsets false leaves plan.host_offsets empty on CUDA (the CPU plan
// always has them: they cost nothing there).
MoePermutation MoePermutePlan(const at::Tensor& topk_idx, int64_t num_experts, bool host_offsets = true);

enum class MoeExpertsImpl { kDefault, kKernels, kGroupedMm };
// What kDefault means for tensors on `device`.
MoeExpertsImpl DefaultMoeExpertsImpl(const at::Device& device);

at::Tensor MoePermute(const at::Tensor& x, const MoePermutation& plan);
// kKernels needs the plan's host offsets (c10::Error without them);
// kGroupedMm on CUDA needs a LibTorch with aten::_grouped_mm (c10::Error
// naming it otherwise).
at::Tensor MoeExpertsFfn(const at::Tensor& xp, const MoePermutation& plan, const at::Tensor& w_gate_up,
                         const at::Tensor& w_down, MoeExpertsImpl impl = MoeExpertsImpl::kDefault);
at::Tensor MoeUnpermute(const at::Tensor& yp, const at::Tensor& topk_weight, const MoePermutation& plan);

}  // namespace tandem::ops

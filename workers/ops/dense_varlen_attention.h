// Dense variable-length attention with a bottom-right causal mask, forward
// and backward, on the kernels PyTorch ships (issue #19; the tree attention
// over it is tree_attention_varlen.h).
//
// A call is a list of blocks: block b's queries q[cu_q[b], cu_q[b+1]) attend
// to keys and values k, v[cu_k[b], cu_k[b+1]); query i of a block of Lq
// queries and Lk >= Lq keys sees keys j <= Lk - Lq + i (the causal mask
// aligned bottom-right). q [Tq, Hq, D], k and v [Tk, Hkv, D], contiguous,
// one dtype and device, Hq % Hkv == 0; cu_q and cu_k int32 [B + 1] on that
// device, from 0; max_q and max_k the longest block's lengths. With
// causal false every query of a block sees every key of it.
//
// Kernels:
//   kFlash      aten::_flash_attention_forward / _backward: PyTorch's
//               FlashAttention-2 varlen kernel (CUDA, bf16 or fp16,
//               D % 8 == 0 and D <= 256; GQA without copies). Called by
//               name (aten_call.h): a LibTorch without it throws c10::Error
//               naming it.
//   kReference  block by block with ordinary LibTorch ops, in fp32 (fp64 for
//               fp64 inputs), on any device: the CPU path the tests run, and
//               the oracle of the CUDA test.
// The forward also returns what the backward needs (the log-sum-exp per
// query and head, and the kernel's random state, unused without dropout).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <utility>

namespace tandem::ops {

enum class DenseVarlenKernel { kReference, kFlash };

struct DenseVarlenCall {
  at::Tensor cu_q, cu_k;
  int64_t max_q = 0, max_k = 0;
  double scale = 1;
  bool causal = true;  // false: every query sees every key of its block
};

struct DenseVarlenSaved {
  at::Tensor lse, rng_state, unused;
};

// The dtype sums over a call's values are kept in: fp64 for fp64 inputs,
// else fp32 (the reference kernel, gradients summed over gathered rows).
inline at::ScalarType DenseVarlenAccumulator(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::pair<at::Tensor, DenseVarlenSaved> DenseVarlenForward(DenseVarlenKernel kernel, const at::Tensor& q,
                                                           const at::Tensor& k, const at::Tensor& v,
                                                           const DenseVarlenCall& call);

// dq [Tq, Hq, D], dk and dv [Tk, Hkv, D], in q's dtype.
std::array<at::Tensor, 3> DenseVarlenBackward(DenseVarlenKernel kernel, const at::Tensor& dout, const at::Tensor& q,
                                              const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                              const DenseVarlenSaved& saved, const DenseVarlenCall& call);

}  // namespace tandem::ops

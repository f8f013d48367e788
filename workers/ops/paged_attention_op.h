// LibTorch glue for paged decode attention and the K/V slot write (issue
// #14; docs/inference.md "Paged attention"; the math and layout are
// kernels/paged_attention/paged_attention.h, which is workers/model/
// paged_kv.h's layout). Forward only: no autograd (inference).
//
// PagedAttention(q [T, Hq, D], key_blocks, value_blocks [N, block_size, Hkv,
// D], block_table [B, M] int32, context_lens [B] int32, q_starts [B + 1]
// int32, scale) -> out [T, Hq, D] in q's dtype: sequence b's new tokens are
// rows q_starts[b] .. q_starts[b + 1] - 1 (q_lens[b] of them), and its new
// token j attends to the first context_lens[b] - q_lens[b] + j + 1 keys of
// its block table. QueryStarts(q_lens [B] int32) -> (0, cumsum(q_lens)), on
// q_lens' device: computed once per step, not once per layer.
//   CPU: fp32 tensors, metadata on the CPU; lengths, q_starts and every block
//   id a sequence reads are checked (c10::Error naming the sequence).
//   CUDA: bf16, head dim 64 or 128, metadata int32 on the same device; the
//   split plan from the device's SM count and the table width; bad device
//   metadata gives NaN rows (paged_attention_cuda.h), never a fault. Runs
//   on the current stream without a host sync (graph-capturable).
// PagedKvWrite(k, v [T, Hkv, D], key_blocks, value_blocks, slot_mapping [T]
// int64): writes k[t] / v[t] at slot slot_mapping[t] of the pools, in place
// (the pools must be contiguous); a negative slot is skipped. On the CPU a
// slot >= N * block_size throws before anything is written; on CUDA it is
// skipped.
// Any other violation (device, dtype, rank, shape) throws c10::Error naming
// the argument.
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem::ops {

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& key_blocks, const at::Tensor& value_blocks,
                          const at::Tensor& block_table, const at::Tensor& context_lens, const at::Tensor& q_starts,
                          double scale);

at::Tensor QueryStarts(const at::Tensor& q_lens);

void PagedKvWrite(const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_blocks,
                  const at::Tensor& value_blocks, const at::Tensor& slot_mapping);

}  // namespace tandem::ops

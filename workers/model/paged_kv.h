// A view of the inference engine's paged KV cache, as the model reads and
// writes it (issue #14; docs/inference.md "KV cache"). The engine
// (workers/inference/) owns the block pool and its allocation; the model
// only sees these tensors, so model/ never includes inference/.
//
// Layout: per layer, keys and values are block pools
//   [num_blocks, block_size, Hkv, D] in the model's dtype and device;
// token t of sequence b lives in block block_table[b][t / block_size] at
// offset t % block_size. Keys are stored after k_norm and rotary.
//
// A step (Transformer::DecodePaged) feeds q_lens[b] >= 1 new tokens of each
// of the B sequences (decode: 1; a few for speculative or chunked steps),
// packed sequence by sequence into `tokens`/`positions` [T]. Before
// attending, the model writes each new token's K/V at slot_mapping[t]
// (= block * block_size + offset, int64); then new token j of sequence b
// attends to the first context_lens[b] - q_lens[b] + j + 1 entries of its
// block table (its past, the new tokens before it, and itself).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tandem::model {

struct PagedKv {
  std::vector<at::Tensor> key_blocks;    // per layer [num_blocks, block_size, Hkv, D]
  std::vector<at::Tensor> value_blocks;  // per layer, same shape
  at::Tensor block_table;   // [B, max_blocks_per_seq] int32 (unused entries: any value, never read)
  at::Tensor context_lens;  // [B] int32: entries after this step's writes
  at::Tensor q_lens;        // [B] int32: new tokens per sequence, >= 1, sum = T
  at::Tensor slot_mapping;  // [T] int64: where each new token's K/V is written

  int64_t block_size() const { return key_blocks.empty() ? 0 : key_blocks[0].size(1); }
  int64_t batch() const { return context_lens.defined() ? context_lens.size(0) : 0; }
};

}  // namespace tandem::model

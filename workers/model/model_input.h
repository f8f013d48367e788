// The model's two input forms (docs/model.md "The model"):
//
// ForestBatch — a packed forest: the tokens of many sequences in one batch,
// common prefixes stored once (a trie per distinct first token, in
// depth-first preorder; kernels/tree_attention/forest.h), position ids = trie
// depths, plus the (row, label) pairs to score: for sequence s and every
// label index i in [score_from[s], len(s)), the pair (packed row of token
// i-1, label token i). Pairs are ordered sequence by sequence, label index
// ascending; pair_offsets[s] is where sequence s's pairs start. A fork row
// (the last shared token before responses diverge) is in one pair per
// response. Only the rows of some pair go through the LM head (head_rows);
// pair_head[m] indexes head_rows.
//
// KvCache — incremental decoding: a simple contiguous per-layer cache of past
// keys (after k_norm and rotary) and values, [B, P, Hkv, D] per layer, with
// lengths[b] <= P valid entries for row b (the rest are ignored). The paged
// cache of the inference engine replaces it later.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/model/config.h"
#include "workers/ops/tree_attention_op.h"

namespace tandem::model {

struct ForestBatch {
  c10::intrusive_ptr<ops::TreeForest> forest;  // validated, its tile plan built
  at::Tensor tokens;      // [T] int64, on the model's device
  at::Tensor positions;   // [T] int64, on the model's device (trie depths)
  at::Tensor head_rows;   // [N] int64: packed rows scored, ascending, distinct
  at::Tensor pair_head;   // [M] int64: index into head_rows of each pair
  at::Tensor labels;      // [M] int64
  // Host bookkeeping (kernels::PackedForest's): the packed row of token j of
  // sequence s is seq_positions[seq_offsets[s] + j].
  std::vector<int32_t> seq_offsets;   // [S + 1]
  std::vector<int32_t> seq_positions;
  std::vector<int64_t> pair_offsets;  // [S + 1] into the pairs
  std::vector<int64_t> pair_rows;     // [M] packed row of each pair (host copy)

  int64_t num_tokens() const { return tokens.defined() ? tokens.size(0) : 0; }
  int64_t num_pairs() const { return labels.defined() ? labels.size(0) : 0; }
  int64_t num_sequences() const { return static_cast<int64_t>(seq_offsets.size()) - 1; }
};

// Packs `sequences` (each non-empty, every token in [0, vocab_size)) and
// selects the pairs: score_from[s] in [1, len(s)] (len(s) scores nothing);
// an empty score_from means 1 for every sequence (every next token).
// InvalidArgument naming the sequence and token on bad input.
StatusOr<ForestBatch> BuildForestBatch(const std::vector<std::vector<int32_t>>& sequences,
                                       const std::vector<int32_t>& score_from, int64_t vocab_size,
                                       at::Device device);

struct KvCache {
  std::vector<at::Tensor> keys;    // per layer [B, P, Hkv, D], model dtype and device
  std::vector<at::Tensor> values;  // per layer [B, P, Hkv, D]
  at::Tensor lengths;              // [B] int64 on the model's device

  // An empty cache (P = 0) for `batch` rows of `config`.
  static KvCache Empty(const ModelConfig& config, int64_t batch, at::Device device, at::ScalarType dtype);
  int64_t batch() const { return lengths.defined() ? lengths.size(0) : 0; }
  int64_t capacity() const { return keys.empty() ? 0 : keys[0].size(1); }

  // Writes one new entry per row at index lengths[b] (growing P by one when
  // some row is full) and increments lengths. new_keys/new_values: per layer
  // [B, Hkv, D] (DecodeOutput's); stored detached (the cache holds no
  // autograd history).
  void Append(const std::vector<at::Tensor>& new_keys, const std::vector<at::Tensor>& new_values);
};

}  // namespace tandem::model

// Forest builder: token sequences -> packed forest and back (issue #4, "Tree
// attention"; forest.h has the layout).
//
// Sequences that share a prefix share its tokens: the builder inserts every
// sequence into a trie, cuts it into maximal chains (segments) and lays the
// segments out in depth-first preorder, children in first-seen order. For each
// input sequence it records where each of its tokens lives in the packed
// layout, so per-token outputs (log-probs, hidden states) can be gathered back.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/tree_attention/forest.h"

namespace tandem::kernels {

struct PackedForest {
  Forest forest;
  std::vector<int32_t> tokens;          // [num_tokens] token id per packed position
  std::vector<int32_t> position_ids;    // [num_tokens] trie depth
  std::vector<int32_t> seq_offsets;     // [num_sequences + 1] into seq_positions
  std::vector<int32_t> seq_positions;   // packed index of every token of every sequence
  int64_t flat_tokens = 0;              // sum of sequence lengths
  int64_t flat_pairs = 0;               // sum of L(L+1)/2: causal pairs of the flat batch
  int64_t tree_pairs = 0;               // pairs the tree attention computes

  // Linear layers do flat_tokens / num_tokens less work on the forest.
  double TokenReduction() const;
  // Attention does flat_pairs / tree_pairs less work.
  double PairReduction() const;
};

// Every sequence must be non-empty. Sequences with equal first tokens share a
// root; fully equal sequences share every token. With share_prefixes false
// every sequence is a root chain of its own (the flat batch as a forest:
// the same layout the flat baselines compute, through the same kernels).
StatusOr<PackedForest> BuildPackedForest(const std::vector<std::vector<int32_t>>& sequences,
                                         bool share_prefixes = true);

// The token sequences back from the forest (inverse of the builder).
std::vector<std::vector<int32_t>> UnpackSequences(const PackedForest& packed);

// Gathers rows of `width` floats from packed order into the flat batch order
// (sequence after sequence): dst[i] = src[seq_positions[i]].
void GatherFlatRows(const PackedForest& packed, const float* src, int64_t width, float* dst);

}  // namespace tandem::kernels

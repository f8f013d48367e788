// Packed forest: the compact description of a trie-packed batch (issue #4,
// "Tree attention"; docs/architecture.md "Native workers").
//
// Tokens of several tries (plain sequences are tries without branches) are
// stored once, in depth-first preorder. A segment is a run of consecutive
// tokens on one root-to-leaf path; each segment names its parent segment
// (-1 for a root). A query token sees the keys of its ancestors' segments and
// the keys of its own segment up to itself. Because the layout is preorder,
// the subtree of a segment is one contiguous token range, so the whole mask
// is carried by one integer per key: key k is visible to query q iff
//   k <= q < kend[k],   kend[k] = end of the subtree of k's segment.
// No T x T mask is ever built. Position ids are trie depths.
//
// The tile plan lists, per query tile, the key tiles it must visit (merged
// intervals of tile indices, from the ancestor chain of every segment the
// tile touches), and the transpose, per key tile, the query tiles that see it
// (for the dK/dV pass of the backward).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tandem::kernels {

struct Segment {
  int32_t start = 0;   // first token (packed index)
  int32_t length = 0;  // >= 1
  int32_t parent = -1; // parent segment index, -1 for a root; < own index
};

struct Forest {
  int32_t num_tokens = 0;
  std::vector<Segment> segments;  // in token order, covering [0, num_tokens)
};

// Checks that segments tile [0, num_tokens) in order, lengths >= 1, and the
// order is a depth-first preorder (each parent is an ancestor-or-self of the
// previous segment). Every other function here assumes a valid forest.
Status ValidateForest(const Forest& forest);

// Position id (trie depth, 0 at a root's first token) of every token.
std::vector<int32_t> PositionIds(const Forest& forest);

// kend[k] for every key token (see the file comment).
std::vector<int32_t> KeyVisibleEnd(const Forest& forest);

// Segment index of every token.
std::vector<int32_t> TokenSegments(const Forest& forest);

// Number of (query, key) pairs the tree attention computes: sum of depth+1.
int64_t TreePairs(const Forest& forest);

// Tiles are kTreeTile tokens; the CUDA kernels and the CPU implementation use
// this one size.
inline constexpr int32_t kTreeTile = 64;

struct TreeAttentionPlan {
  int32_t num_tokens = 0;
  int32_t num_tiles = 0;                 // ceil(num_tokens / kTreeTile)
  std::vector<int32_t> kend;             // [num_tokens]
  // min kend over the tile's keys: a key tile [k0, k0+64) with k0+64 <= T is
  // visible to every query of [q0, q0+64) iff k0+64 <= q0 and this >= q0+64,
  // so the kernels skip the per-element mask on such tiles.
  std::vector<int32_t> tile_kend_min;    // [num_tiles]
  // Forward / dQ: for query tile i, key-tile intervals
  // kv_ranges[2j], kv_ranges[2j+1] (half-open) for j in [q_ptr[i], q_ptr[i+1]).
  std::vector<int32_t> q_ptr;            // [num_tiles + 1]
  std::vector<int32_t> kv_ranges;
  // dK/dV: for key tile i, query-tile intervals, same encoding.
  std::vector<int32_t> k_ptr;            // [num_tiles + 1]
  std::vector<int32_t> q_ranges;
  int64_t tile_pairs = 0;                // (query tile, key tile) pairs visited
};

// Builds the plan from the segment table, O(tiles x segments-per-tile x depth
// + tile pairs). The forest must be valid.
StatusOr<TreeAttentionPlan> BuildTreeAttentionPlan(const Forest& forest);

}  // namespace tandem::kernels

// The micro-batch planner's cost model (docs/rl.md "Micro-batch planning";
// issue #16 item 3). Torch-free: the planner sees lengths, never tokens.
//
// An item is what the trainer packs as one unit: a plain sequence, or a
// group's trie (one prompt, G responses; kernels/tree_attention/
// forest_builder.h). A trie is described by its sequences listed in a
// depth-first order of the trie (lexicographic order of the token sequences
// is one) with, for each sequence, the length of the prefix it shares with
// the one before it. In such an order the common prefix of any two sequences
// i < j is the minimum of shared_prefix over (i, j], so the compact token
// count (the trie's node count, what the forest builder stores) of any subset
// of the sequences follows exactly from these two lists:
//   sum of lengths - sum over neighbours (a, b) in the subset of
//   min(shared_prefix[a+1 .. b]).
// A contiguous run [begin, end) of that order is a sub-trie cut at forks: its
// tokens are sum(lengths) - sum(shared_prefix[begin+1 .. end)), and cutting
// the item between i-1 and i stores shared_prefix[i] tokens twice.
//
// Cost is tokens as the kernels pay for them: with packing on, a unit (a
// trie, a part of a split trie, a plain sequence) occupies its compact tokens
// rounded up to `alignment`; with packing off every sequence is laid out flat
// and rounded up on its own. A micro-batch costs the sum of its units.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tandem::data {

struct PlanItem {
  std::vector<int32_t> lengths;        // per sequence, >= 1, in a DFS order of the trie
  std::vector<int32_t> shared_prefix;  // [i]: common prefix of sequences i-1 and i; [0] = 0

  // A plain sequence of `length` tokens (a trie without branches).
  static PlanItem Sequence(int32_t length);
  int32_t num_sequences() const { return static_cast<int32_t>(lengths.size()); }
};

// The item of a group given its token sequences (each non-empty): sequences
// sorted lexicographically (a DFS order), shared prefixes measured.
// order[k] is the index in `sequences` of the item's k-th sequence.
struct TrieItem {
  PlanItem item;
  std::vector<int32_t> order;
};
StatusOr<TrieItem> TrieItemFromTokens(const std::vector<std::vector<int32_t>>& sequences);

// InvalidArgument naming item `index` (and the sequence) when a list is empty,
// the lists differ in size, a length is < 1, shared_prefix[0] != 0, or a
// shared prefix is negative or longer than either neighbour.
Status ValidatePlanItem(const PlanItem& item, size_t index);

// Compact tokens of the sequences at `positions` (ascending, distinct) of a
// valid item: the node count of the trie of just those sequences.
int64_t CompactTokens(const PlanItem& item, const std::vector<int32_t>& positions);

inline int64_t RoundUp(int64_t tokens, int64_t alignment) {
  return (tokens + alignment - 1) / alignment * alignment;
}

struct CostModel {
  int32_t alignment = 1;  // >= 1; 1 = no padding
  bool packing = true;    // false: sequences flat, each rounded up on its own

  // Tokens the run [begin, end) of `item` computes (compact when packing).
  int64_t Tokens(const PlanItem& item, int32_t begin, int32_t end) const;
  // Tokens with alignment padding: what the run occupies in a micro-batch.
  int64_t Cost(const PlanItem& item, int32_t begin, int32_t end) const;
};

// A unit of placement: the run [begin, end) of item `item`'s sequences.
struct ItemPart {
  int32_t item = 0;
  int32_t begin = 0;
  int32_t end = 0;
  int64_t tokens = 0;  // CostModel::Tokens
  int64_t cost = 0;    // CostModel::Cost, <= the cap
};

// The item whole when its cost fits `cap`; otherwise cut at forks into the
// fewest runs that each fit, and among those the fewest duplicated tokens
// (padding included); ties go to the longest last run, so the result is
// deterministic. InvalidArgument naming the
// item and sequence when one sequence alone does not fit: nothing is dropped.
StatusOr<std::vector<ItemPart>> SplitItem(const PlanItem& item, int32_t index, const CostModel& model,
                                          int64_t cap);

}  // namespace tandem::data

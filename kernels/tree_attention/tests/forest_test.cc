// Packed forest and builder: validation, depths, the kend visibility rule
// against the ancestor definition, the tile plan's coverage, and the builder's
// round trip and reduction ratios; the varlen plan's blocks against the
// forest's mask.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <set>

#include "kernels/testing/compare.h"
#include "kernels/tree_attention/forest.h"
#include "kernels/tree_attention/forest_builder.h"
#include "kernels/tree_attention/tests/random_forest.h"
#include "kernels/tree_attention/varlen_plan.h"

namespace tandem::kernels {
namespace {

using testing::FreshSeed;

// Ancestor-or-self walk: the definition the kend rule must equal.
bool VisibleByDefinition(const Forest& f, const std::vector<int32_t>& seg_of, int32_t q, int32_t k) {
  if (k > q) return false;
  for (int32_t s = seg_of[q]; s >= 0; s = f.segments[s].parent) {
    if (s == seg_of[k]) return true;
  }
  return false;
}

TEST(Forest, RejectsMalformedTables) {
  EXPECT_FALSE(ValidateForest(Forest{5, {{0, 3, -1}, {4, 1, 0}}}).ok());  // gap
  EXPECT_FALSE(ValidateForest(Forest{4, {{0, 3, -1}, {3, 0, 0}}}).ok());  // empty segment
  EXPECT_FALSE(ValidateForest(Forest{4, {{0, 3, 1}, {3, 1, -1}}}).ok());  // parent after child
  // Not preorder: segment 3's parent 1 is not on the path of segment 2.
  EXPECT_FALSE(ValidateForest(Forest{8, {{0, 2, -1}, {2, 2, 0}, {4, 2, 0}, {6, 2, 1}}}).ok());
  EXPECT_FALSE(ValidateForest(Forest{9, {{0, 3, -1}}}).ok());  // wrong total
  EXPECT_TRUE(ValidateForest(Forest{8, {{0, 2, -1}, {2, 2, 0}, {4, 2, 1}, {6, 2, 0}}}).ok());
  EXPECT_TRUE(ValidateForest(Forest{0, {}}).ok());
  EXPECT_FALSE(BuildTreeAttentionPlan(Forest{5, {{0, 3, -1}}}).ok());
}

TEST(Forest, PositionIdsAreTrieDepths) {
  // prompt(3) -> a(2), b(1) -> b1(2)
  Forest f{8, {{0, 3, -1}, {3, 2, 0}, {5, 1, 0}, {6, 2, 2}}};
  ASSERT_TRUE(ValidateForest(f).ok());
  EXPECT_EQ(PositionIds(f), (std::vector<int32_t>{0, 1, 2, 3, 4, 3, 4, 5}));
  EXPECT_EQ(KeyVisibleEnd(f), (std::vector<int32_t>{8, 8, 8, 5, 5, 8, 8, 8}));
  EXPECT_EQ(TreePairs(f), 1 + 2 + 3 + 4 + 5 + 4 + 5 + 6);
}

TEST(Forest, KeyVisibleEndEqualsAncestorDefinitionAndPlanCoversEveryPair) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    testing::ForestParams p;
    p.max_depth = 1 + trial * 2;
    p.max_fanout = 1 + trial % 16;
    p.max_seg_len = trial % 3 == 0 ? 1 : 70;  // one-token segments, or segments across tiles
    p.roots = 1 + trial % 3;
    p.max_tokens = 300;
    const Forest f = testing::RandomForest(rng, p);
    ASSERT_TRUE(ValidateForest(f).ok()) << ValidateForest(f).ToString();
    const std::vector<int32_t> seg_of = TokenSegments(f);
    const std::vector<int32_t> kend = KeyVisibleEnd(f);
    auto plan_or = BuildTreeAttentionPlan(f);
    ASSERT_TRUE(plan_or.ok());
    const TreeAttentionPlan& plan = *plan_or;
    std::set<std::pair<int, int>> fwd, bwd;
    for (int32_t qt = 0; qt < plan.num_tiles; ++qt) {
      for (int32_t j = plan.q_ptr[qt]; j < plan.q_ptr[qt + 1]; ++j) {
        for (int32_t kt = plan.kv_ranges[2 * j]; kt < plan.kv_ranges[2 * j + 1]; ++kt) fwd.insert({qt, kt});
      }
    }
    for (int32_t kt = 0; kt < plan.num_tiles; ++kt) {
      for (int32_t j = plan.k_ptr[kt]; j < plan.k_ptr[kt + 1]; ++j) {
        for (int32_t qt = plan.q_ranges[2 * j]; qt < plan.q_ranges[2 * j + 1]; ++qt) bwd.insert({qt, kt});
      }
    }
    EXPECT_EQ(fwd, bwd) << "transposed plan differs";
    EXPECT_EQ(static_cast<int64_t>(fwd.size()), plan.tile_pairs);
    std::set<std::pair<int, int>> needed;
    int64_t pairs = 0;
    for (int32_t q = 0; q < f.num_tokens; ++q) {
      for (int32_t k = 0; k < f.num_tokens; ++k) {
        const bool def = VisibleByDefinition(f, seg_of, q, k);
        ASSERT_EQ(def, k <= q && q < kend[k]) << "q=" << q << " k=" << k;
        if (def) {
          ++pairs;
          needed.insert({q / kTreeTile, k / kTreeTile});
        }
      }
    }
    EXPECT_EQ(pairs, TreePairs(f));
    // A tile the kernels treat as wholly visible has every pair visible.
    for (int32_t kt = 0; kt < plan.num_tiles; ++kt) {
      int32_t mn = INT32_MAX;
      for (int32_t k = kt * kTreeTile; k < std::min(f.num_tokens, (kt + 1) * kTreeTile); ++k) mn = std::min(mn, kend[k]);
      ASSERT_EQ(plan.tile_kend_min[kt], mn);
      for (int32_t qt = 0; qt < plan.num_tiles; ++qt) {
        const int32_t q0 = qt * kTreeTile, k0 = kt * kTreeTile;
        if (!(k0 + kTreeTile <= q0 && k0 + kTreeTile <= f.num_tokens && mn >= q0 + kTreeTile)) continue;
        for (int32_t q = q0; q < q0 + kTreeTile; ++q) {
          for (int32_t k = k0; k < k0 + kTreeTile; ++k) ASSERT_TRUE(VisibleByDefinition(f, seg_of, q, k));
        }
      }
    }
    // The plan visits every tile pair holding a visible pair, and no others.
    EXPECT_EQ(needed, fwd);
  }
}

TEST(ForestBuilder, RoundTripsAndReportsReductions) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int P = 37, R = 11, G = 6;
  auto seqs = testing::RandomGroup(rng, P, R, G);
  // Plus a sequence that is a prefix of another and a duplicate, and an unrelated one.
  seqs.push_back(std::vector<int32_t>(seqs[0].begin(), seqs[0].begin() + P + 3));
  seqs.push_back(seqs[1]);
  seqs.push_back({5000, 5001, 5002});
  auto packed_or = BuildPackedForest(seqs);
  ASSERT_TRUE(packed_or.ok());
  const PackedForest& pk = *packed_or;
  EXPECT_EQ(UnpackSequences(pk), seqs);
  EXPECT_EQ(pk.forest.num_tokens, P + G * R + 3);
  // Position ids are the index inside each original sequence.
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t i = pk.seq_offsets[s]; i < pk.seq_offsets[s + 1]; ++i) {
      ASSERT_EQ(pk.position_ids[pk.seq_positions[i]], i - pk.seq_offsets[s]);
    }
  }
  EXPECT_EQ(pk.forest.segments.size(), 1u + G + 1u);

  // Unshared: every sequence its own root chain, nothing stored once.
  auto flat_or = BuildPackedForest(seqs, /*share_prefixes=*/false);
  ASSERT_TRUE(flat_or.ok());
  EXPECT_EQ(UnpackSequences(*flat_or), seqs);
  EXPECT_EQ(flat_or->forest.num_tokens, flat_or->flat_tokens);
  EXPECT_EQ(flat_or->forest.segments.size(), seqs.size());
  EXPECT_EQ(flat_or->tree_pairs, flat_or->flat_pairs);
  EXPECT_DOUBLE_EQ(flat_or->TokenReduction(), 1.0);

  // A pure group: the formulas of docs/benchmarks.md.
  auto group = BuildPackedForest(testing::RandomGroup(rng, 512, 256, 8));
  ASSERT_TRUE(group.ok());
  const double T = 512 + 256;
  EXPECT_DOUBLE_EQ(group->TokenReduction(), 8 * T / (512 + 8 * 256));
  const double flat = 8 * T * (T + 1) / 2;
  const double tree = 512.0 * 513 / 2 + 8 * (256.0 * 512 + 256.0 * 257 / 2);
  EXPECT_DOUBLE_EQ(group->PairReduction(), flat / tree);

  // Gather back to the flat order.
  std::vector<float> rows(pk.forest.num_tokens * 2);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  std::vector<float> flat_rows(pk.seq_positions.size() * 2);
  GatherFlatRows(pk, rows.data(), 2, flat_rows.data());
  for (size_t i = 0; i < pk.seq_positions.size(); ++i) ASSERT_EQ(flat_rows[2 * i + 1], 2.f * pk.seq_positions[i] + 1);

  EXPECT_FALSE(BuildPackedForest({{1, 2}, {}}).ok());
}

// Marks every (query, key) pair a varlen chunk computes in `seen` (T x T),
// checking each is a pair of the forest's mask and marked once; returns how
// many it marked.
int64_t MarkPairs(const VarlenChunk& c, const std::vector<int32_t>& kend, int32_t T, std::vector<uint8_t>& seen) {
  int64_t pairs = 0;
  const size_t blocks = c.cu_q.size() - 1;
  EXPECT_EQ(c.cu_k.size(), blocks + 1);
  int32_t max_q = 0, max_k = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const int32_t lq = c.cu_q[b + 1] - c.cu_q[b], lk = c.cu_k[b + 1] - c.cu_k[b];
    max_q = std::max(max_q, lq);
    max_k = std::max(max_k, lk);
    for (int32_t i = 0; i < lq; ++i) {
      const int32_t qi = c.cu_q[b] + i;
      const int32_t q = c.q_rows.empty() ? c.q_begin + qi : c.q_rows[static_cast<size_t>(qi)];
      for (int32_t j = 0; j < (c.causal ? lk - lq + i + 1 : lk); ++j) {
        const int32_t kj = c.cu_k[b] + j;
        const int32_t k = c.key_rows.empty() ? c.q_begin + kj : c.key_rows[static_cast<size_t>(kj)];
        EXPECT_TRUE(k <= q && q < kend[static_cast<size_t>(k)]) << "block " << b << " pair " << q << "," << k;
        EXPECT_EQ(seen[static_cast<size_t>(q) * T + k]++, 0) << "pair " << q << "," << k << " twice";
        ++pairs;
      }
    }
  }
  EXPECT_EQ(c.max_q, max_q);
  EXPECT_EQ(c.max_k, max_k);
  return pairs;
}

// The single form: consecutive chunks of bottom-right causal blocks over the
// packed query rows compute exactly the mask's pairs, each once, and keep to
// their budget.
void CheckVarlenPlan(const Forest& f, int64_t budget) {
  auto plan = BuildVarlenTreePlan(f, budget);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int32_t T = f.num_tokens;
  const std::vector<int32_t> kend = KeyVisibleEnd(f);
  std::vector<uint8_t> seen(static_cast<size_t>(T) * static_cast<size_t>(T), 0);
  int32_t next_segment = 0, next_row = 0;
  int64_t pairs = 0, gathered = 0;
  for (const VarlenChunk& c : plan->chunks) {
    ASSERT_EQ(c.q_begin, next_row);
    ASSERT_TRUE(c.causal && c.q_rows.empty());
    const size_t blocks = c.cu_q.size() - 1;
    ASSERT_GE(blocks, 1u);
    if (blocks > 1) EXPECT_LE(static_cast<int64_t>(c.key_rows.size()), budget);
    for (size_t b = 0; b < blocks; ++b)
      ASSERT_EQ(c.cu_q[b + 1] - c.cu_q[b], f.segments[static_cast<size_t>(next_segment) + b].length);
    pairs += MarkPairs(c, kend, T, seen);
    EXPECT_EQ(c.q_end, c.q_begin + c.cu_q.back());
    next_segment += static_cast<int32_t>(blocks);
    next_row = c.q_end;
    gathered += static_cast<int64_t>(c.key_rows.size());
  }
  EXPECT_EQ(next_segment, static_cast<int32_t>(f.segments.size()));
  EXPECT_EQ(next_row, T);
  EXPECT_EQ(pairs, TreePairs(f));  // every pair of the mask, once
  EXPECT_EQ(plan->pairs, pairs);
  EXPECT_EQ(plan->gathered_keys, gathered);
}

// The split form: the self part and the ancestor part together compute
// exactly the mask's pairs, each once; a row is in at most one ancestor
// chunk; chunks keep to their budget.
void CheckVarlenSplitPlan(const Forest& f, int64_t budget) {
  auto plan = BuildVarlenSplitPlan(f, budget);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int32_t T = f.num_tokens;
  const std::vector<int32_t> kend = KeyVisibleEnd(f);
  std::vector<uint8_t> seen(static_cast<size_t>(T) * static_cast<size_t>(T), 0);
  ASSERT_TRUE(plan->self.causal && plan->self.q_rows.empty() && plan->self.key_rows.empty());
  EXPECT_EQ(plan->self.q_end, T);
  int64_t pairs = MarkPairs(plan->self, kend, T, seen);
  std::vector<int> rows_seen(static_cast<size_t>(T), 0);
  for (const VarlenChunk& c : plan->ancestors) {
    ASSERT_FALSE(c.causal);
    if (c.cu_q.size() > 2) EXPECT_LE(static_cast<int64_t>(c.key_rows.size()), budget);
    for (const int32_t r : c.q_rows) EXPECT_EQ(rows_seen[static_cast<size_t>(r)]++, 0) << "row " << r;
    pairs += MarkPairs(c, kend, T, seen);
  }
  EXPECT_EQ(pairs, TreePairs(f));
  EXPECT_EQ(plan->pairs, pairs);
}

TEST(VarlenPlan, BothFormsComputeExactlyTheMasksPairs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const testing::ForestParams shapes[] = {
      {},                                                        // default
      {.max_depth = 64, .max_fanout = 1, .max_seg_len = 3},      // a deep chain of 1-3-token segments
      {.max_depth = 3, .max_fanout = 12, .max_seg_len = 3, .roots = 3, .max_tokens = 600},  // many leaves
      {.max_depth = 4, .max_fanout = 3, .max_seg_len = 70, .roots = 2, .max_tokens = 700},  // long segments
  };
  for (const testing::ForestParams& p : shapes) {
    for (int rep = 0; rep < 3; ++rep) {
      const Forest f = testing::RandomForest(rng, p);
      ASSERT_TRUE(ValidateForest(f).ok());
      for (int64_t budget : {int64_t{1}, int64_t{37}, int64_t{500}, int64_t{1} << 30}) {
        SCOPED_TRACE("budget " + std::to_string(budget));
        CheckVarlenPlan(f, budget);
        CheckVarlenSplitPlan(f, budget);
      }
    }
  }
  auto group = BuildPackedForest(testing::RandomGroup(rng, 50, 20, 8));
  ASSERT_TRUE(group.ok());
  CheckVarlenPlan(group->forest, 1 << 20);
  CheckVarlenSplitPlan(group->forest, 1 << 20);
  auto one = BuildVarlenTreePlan(group->forest, 1 << 20);
  EXPECT_EQ(one->chunks.size(), 1u);
  EXPECT_EQ(one->gathered_keys, 50 + 8 * (50 + 20));  // the prompt's own block, then the flat batch's keys
  auto split = BuildVarlenSplitPlan(group->forest, 1 << 20);
  ASSERT_EQ(split->ancestors.size(), 1u);
  EXPECT_EQ(split->gathered_keys, 50);  // the prompt, once for all 8 responses
  EXPECT_EQ(split->gathered_queries, 8 * 20);
  EXPECT_FALSE(BuildVarlenTreePlan(group->forest, 0).ok());
  EXPECT_FALSE(BuildVarlenSplitPlan(group->forest, 0).ok());
  CheckVarlenPlan(Forest{0, {}}, 10);
  CheckVarlenSplitPlan(Forest{0, {}}, 10);
}

}  // namespace
}  // namespace tandem::kernels

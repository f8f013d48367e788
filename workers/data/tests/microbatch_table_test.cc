// The micro-batch planner by hand-checked tables: the cost model (compact
// trie tokens, alignment, packing off), splitting a trie at forks, plans over
// ranks, equal micro-batch counts, and the errors (docs/rl.md "Micro-batch
// planning").
#include <gtest/gtest.h>

#include "workers/data/microbatch_cost.h"
#include "workers/data/microbatch_planner.h"
#include "workers/data/microbatch_search.h"

namespace tandem::data {
namespace {

// lengths [10, 12, 8], shared [0, 6, 3]: 10 + 6 + 5 = 21 compact tokens.
PlanItem SmallTrie() { return PlanItem{{10, 12, 8}, {0, 6, 3}}; }

// Four responses of 100 tokens: 0 and 1 share 90, 1 and 2 share 50, 2 and 3
// share 90. Whole: 400 - 230 = 170 tokens.
PlanItem WideTrie() { return PlanItem{{100, 100, 100, 100}, {0, 90, 50, 90}}; }

MicroBatchOptions Options(int64_t cap, int32_t ranks = 1, int32_t alignment = 1, bool packing = true) {
  MicroBatchOptions o;
  o.token_cap = cap;
  o.ranks = ranks;
  o.cost.alignment = alignment;
  o.cost.packing = packing;
  return o;
}

TEST(MicroBatchCost, CompactTokensOfSubsets) {
  const PlanItem t = SmallTrie();
  EXPECT_EQ(CompactTokens(t, {0, 1, 2}), 21);
  EXPECT_EQ(CompactTokens(t, {0, 2}), 10 + 8 - 3);   // common prefix of 0 and 2: min(6, 3)
  EXPECT_EQ(CompactTokens(t, {1, 2}), 12 + 8 - 3);
  EXPECT_EQ(CompactTokens(t, {1}), 12);
  const CostModel packed{1, true}, aligned{8, true}, flat{8, false};
  EXPECT_EQ(packed.Tokens(t, 0, 3), 21);
  EXPECT_EQ(packed.Cost(t, 0, 3), 21);
  EXPECT_EQ(aligned.Cost(t, 0, 3), 24);
  EXPECT_EQ(aligned.Cost(t, 1, 3), 24);            // 12 + 8 - 3 = 17 -> 24
  EXPECT_EQ(flat.Tokens(t, 0, 3), 30);
  EXPECT_EQ(flat.Cost(t, 0, 3), 16 + 16 + 8);      // each sequence rounded on its own
}

TEST(MicroBatchCost, TrieItemFromTokensSortsAndMeasures) {
  // Inputs out of order: {1,2,3,4}, {1,2}, {1,2,5}, {7}.
  StatusOr<TrieItem> t = TrieItemFromTokens({{1, 2, 3, 4}, {7}, {1, 2}, {1, 2, 5}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->order, (std::vector<int32_t>{2, 0, 3, 1}));
  EXPECT_EQ(t->item.lengths, (std::vector<int32_t>{2, 4, 3, 1}));
  EXPECT_EQ(t->item.shared_prefix, (std::vector<int32_t>{0, 2, 2, 0}));
  EXPECT_EQ(CompactTokens(t->item, {0, 1, 2, 3}), 2 + 2 + 1 + 1);  // 1-2, 3-4, 5, 7
  EXPECT_FALSE(TrieItemFromTokens({}).ok());
  EXPECT_FALSE(TrieItemFromTokens({{1}, {}}).ok());
}

TEST(MicroBatchCost, SplitAtForks) {
  const CostModel model{1, true};
  // Fits: whole.
  StatusOr<std::vector<ItemPart>> whole = SplitItem(WideTrie(), 3, model, 170);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ((*whole)[0].item, 3);
  EXPECT_EQ((*whole)[0].tokens, 170);
  // Cap 120: [0,3) is 160 and [1,4) is 160, so two parts; cutting at the
  // 50-token fork (110 + 110) beats cutting at a 90-token one.
  StatusOr<std::vector<ItemPart>> two = SplitItem(WideTrie(), 3, model, 120);
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].begin, 0);
  EXPECT_EQ((*two)[0].end, 2);
  EXPECT_EQ((*two)[0].tokens, 110);
  EXPECT_EQ((*two)[1].begin, 2);
  EXPECT_EQ((*two)[1].end, 4);
  EXPECT_EQ((*two)[1].tokens, 110);
  // Cap 100: one response per part.
  StatusOr<std::vector<ItemPart>> four = SplitItem(WideTrie(), 0, model, 100);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->size(), 4u);
  // Alignment 64: a 100-token response alone is 128 > 120, an error; with
  // cap 128 the 50-cut fits (110 -> 128).
  EXPECT_FALSE(SplitItem(WideTrie(), 0, CostModel{64, true}, 120).ok());
  EXPECT_EQ(SplitItem(WideTrie(), 0, CostModel{16, true}, 120)->size(), 2u);  // 110 -> 112
  StatusOr<std::vector<ItemPart>> aligned = SplitItem(WideTrie(), 0, CostModel{64, true}, 128);
  ASSERT_EQ(aligned->size(), 2u);
  EXPECT_EQ((*aligned)[0].cost, 128);
  EXPECT_EQ((*aligned)[0].tokens, 110);
}

TEST(MicroBatchPlanner, AlignmentDecidesWhatFits) {
  const std::vector<PlanItem> items = {PlanItem::Sequence(65), PlanItem::Sequence(10)};
  StatusOr<MicroBatchPlan> none = PlanMicroBatches(items, Options(128));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->micro_batches_per_rank, 1);
  EXPECT_EQ(none->ranks[0].micro_batches[0].cost, 75);
  // Rounded to 64: 128 + 64 > 128.
  StatusOr<MicroBatchPlan> aligned = PlanMicroBatches(items, Options(128, 1, 64));
  ASSERT_TRUE(aligned.ok());
  ASSERT_EQ(aligned->micro_batches_per_rank, 2);
  EXPECT_EQ(aligned->ranks[0].micro_batches[0].cost, 128);
  EXPECT_EQ(aligned->ranks[0].micro_batches[0].tokens, 65);
  EXPECT_EQ(aligned->ranks[0].micro_batches[1].cost, 64);
  EXPECT_EQ(aligned->total_cost, 192);
}

TEST(MicroBatchPlanner, PackingOffCostsEverySequence) {
  // Packed the trie is 21 tokens; flat 30, and with alignment 8: 40.
  EXPECT_EQ(PlanMicroBatches({SmallTrie()}, Options(21))->micro_batches_per_rank, 1);
  StatusOr<MicroBatchPlan> flat = PlanMicroBatches({SmallTrie()}, Options(24, 1, 8, false));
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_EQ(flat->micro_batches_per_rank, 2);  // 16 + 16 + 8 = 40: [16][16 + 8]
  EXPECT_EQ(flat->split_items, 1);
  EXPECT_EQ(flat->total_cost, 40);
}

TEST(MicroBatchPlanner, TwoRanksHandChecked) {
  // 210 tokens, cap 100, 2 ranks: at least 3 bins, so 2 per rank; loads are
  // multiples of 10, so the best max is 110 ({60, 50} against {40, 30, 20, 10}).
  std::vector<PlanItem> items;
  for (int32_t len : {60, 50, 40, 30, 20, 10}) items.push_back(PlanItem::Sequence(len));
  StatusOr<MicroBatchPlan> plan = PlanMicroBatches(items, Options(100, 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->algorithm, PlanAlgorithm::kExact);
  EXPECT_TRUE(plan->proven_optimal);
  EXPECT_EQ(plan->micro_batches_per_rank, 2);
  EXPECT_EQ(plan->lower_bound_cost, 105);
  EXPECT_EQ(std::max(plan->ranks[0].cost, plan->ranks[1].cost), 110);
  EXPECT_EQ(std::min(plan->ranks[0].cost, plan->ranks[1].cost), 100);
  for (const RankPlan& r : plan->ranks) {
    ASSERT_EQ(r.micro_batches.size(), 2u);
    for (const MicroBatch& mb : r.micro_batches) EXPECT_FALSE(mb.parts.empty());  // filled, not padded
    EXPECT_GE(r.micro_batches[0].cost, r.micro_batches[1].cost);                 // largest first
  }
}

TEST(MicroBatchPlanner, SplitTrieAcrossMicroBatches) {
  // The wide trie (170) under cap 120 becomes two 110-token parts; with a
  // 10-token sequence beside them, two micro-batches: [110 + 10][110].
  StatusOr<MicroBatchPlan> plan = PlanMicroBatches({WideTrie(), PlanItem::Sequence(10)}, Options(120));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->split_items, 1);
  EXPECT_EQ(plan->units, 3);
  ASSERT_EQ(plan->micro_batches_per_rank, 2);
  const MicroBatch& first = plan->ranks[0].micro_batches[0];
  ASSERT_EQ(first.parts.size(), 2u);
  EXPECT_EQ(first.cost, 120);
  EXPECT_EQ(first.parts[0].item, 0);
  EXPECT_EQ(first.parts[1].item, 1);
  EXPECT_EQ(plan->ranks[0].micro_batches[1].cost, 110);
  EXPECT_EQ(plan->ranks[0].tokens, 230);  // 170 + 50 duplicated at the fork + 10
}

TEST(MicroBatchPlanner, RanksWithTooFewUnitsGetEmptyMicroBatches) {
  // 2 ranks, units 90, 80, 70 under cap 100: three bins, so M = 2; the best
  // max load is 150 ({90} against {80}{70}), and the rank with one unit pads
  // with an empty micro-batch, last.
  std::vector<PlanItem> items;
  for (int32_t len : {90, 80, 70}) items.push_back(PlanItem::Sequence(len));
  StatusOr<MicroBatchPlan> plan = PlanMicroBatches(items, Options(100, 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->micro_batches_per_rank, 2);
  EXPECT_TRUE(plan->proven_optimal);
  int empty = 0;
  for (const RankPlan& r : plan->ranks) {
    ASSERT_EQ(r.micro_batches.size(), 2u);
    EXPECT_FALSE(r.micro_batches[0].parts.empty());
    if (r.micro_batches[1].parts.empty()) {
      ++empty;
      EXPECT_EQ(r.cost, 90);
    } else {
      EXPECT_EQ(r.cost, 150);
    }
  }
  EXPECT_EQ(empty, 1);
}

TEST(MicroBatchPlanner, NoItemsIsAnEmptyPlan) {
  StatusOr<MicroBatchPlan> plan = PlanMicroBatches({}, Options(100, 2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->micro_batches_per_rank, 0);
  ASSERT_EQ(plan->ranks.size(), 2u);
  EXPECT_TRUE(plan->ranks[0].micro_batches.empty());
}

TEST(MicroBatchPlanner, ChoosesTheAlgorithmBySize) {
  std::vector<PlanItem> items;
  for (int32_t i = 0; i < 40; ++i) items.push_back(PlanItem::Sequence(10 + (i * 37) % 90));
  StatusOr<MicroBatchPlan> large = PlanMicroBatches(items, Options(256, 2));
  ASSERT_TRUE(large.ok());
  EXPECT_TRUE(large->algorithm == PlanAlgorithm::kFirstFitDecreasing ||
              large->algorithm == PlanAlgorithm::kKarmarkarKarp);
  EXPECT_EQ(large->search_nodes, 0);
  MicroBatchOptions o = Options(256, 2);
  o.exact_max_units = 40;
  StatusOr<MicroBatchPlan> exact = PlanMicroBatches(items, o);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->algorithm, PlanAlgorithm::kExact);
  for (PlanAlgorithm a : {PlanAlgorithm::kFirstFitDecreasing, PlanAlgorithm::kKarmarkarKarp}) {
    o.algorithm = a;
    EXPECT_EQ(PlanMicroBatches(items, o)->algorithm, a);
  }
  EXPECT_NE(large->Summary().find("algorithm="), std::string::npos);
}

TEST(MicroBatchPlanner, ASequenceOverTheCapIsAnErrorNamingIt) {
  const std::vector<PlanItem> items = {PlanItem::Sequence(10), PlanItem{{50, 130, 40}, {0, 20, 20}}};
  StatusOr<MicroBatchPlan> plan = PlanMicroBatches(items, Options(128));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("item 1 sequence 1: 130 tokens"), std::string::npos)
      << plan.status().message();
  // Alignment pushes a 100-token sequence to 128 > 120.
  StatusOr<MicroBatchPlan> aligned = PlanMicroBatches({PlanItem::Sequence(100)}, Options(120, 1, 64));
  ASSERT_FALSE(aligned.ok());
  EXPECT_NE(aligned.status().message().find("(128 with alignment 64)"), std::string::npos)
      << aligned.status().message();
}

TEST(MicroBatchPlanner, BadOptionsAndItemsAreErrors) {
  const std::vector<PlanItem> one = {PlanItem::Sequence(10)};
  EXPECT_FALSE(PlanMicroBatches(one, Options(0)).ok());
  EXPECT_FALSE(PlanMicroBatches(one, Options(100, 0)).ok());
  EXPECT_FALSE(PlanMicroBatches(one, Options(100, 1, 0)).ok());
  struct Case { PlanItem item; std::string says; };
  const std::vector<Case> cases = {
      {PlanItem{{}, {}}, "item 0: no sequences"},
      {PlanItem{{5, 5}, {0}}, "2 lengths but 1 shared prefixes"},
      {PlanItem{{5, 0}, {0, 0}}, "item 0 sequence 1: length 0 < 1"},
      {PlanItem{{5, 5}, {1, 0}}, "expected 0 for the first"},
      {PlanItem{{5, 3}, {0, 4}}, "item 0 sequence 1: shared prefix 4 outside [0, 3]"},
      {PlanItem{{5, 3}, {0, -1}}, "shared prefix -1"},
  };
  for (const Case& c : cases) {
    StatusOr<MicroBatchPlan> plan = PlanMicroBatches({c.item}, Options(100));
    ASSERT_FALSE(plan.ok()) << c.says;
    EXPECT_NE(plan.status().message().find(c.says), std::string::npos) << plan.status().message();
  }
}

TEST(MicroBatchSearch, LargestDifferencingTable) {
  // The classic 2-way example {8, 7, 6, 5, 4}: differencing gives 16 / 14.
  std::vector<std::vector<int32_t>> two = LargestDifferencing({8, 7, 6, 5, 4}, 2);
  int64_t a = 0, b = 0;
  for (int32_t u : two[0]) a += std::vector<int64_t>{8, 7, 6, 5, 4}[u];
  for (int32_t u : two[1]) b += std::vector<int64_t>{8, 7, 6, 5, 4}[u];
  EXPECT_EQ(std::max(a, b), 16);
  EXPECT_EQ(std::min(a, b), 14);
  // Fewer units than subsets: one each, the rest empty.
  std::vector<std::vector<int32_t>> wide = LargestDifferencing({3, 1}, 4);
  int nonempty = 0;
  for (const auto& s : wide) nonempty += s.empty() ? 0 : 1;
  EXPECT_EQ(nonempty, 2);
}

}  // namespace
}  // namespace tandem::data

// Group-relative advantages (advantages.h) and groups (groups.h): values
// worked out by hand, GRPO against Dr. GRPO, runs against ids, the exact
// zeros of one-sample and all-equal groups, bf16 rewards, refusals.
#include "workers/rl/advantages.h"

#include <gtest/gtest.h>

#include <ATen/ops/std.h>

#include <cmath>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::Ints;
using testing::T;

GroupAdvantages Advantages(const at::Tensor& rewards, const Groups& g, AdvantageOptions o = {}) {
  StatusOr<GroupAdvantages> a = ComputeGroupAdvantages(rewards, g, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? *a : GroupAdvantages{};
}

Groups Runs(const std::vector<int64_t>& sizes, int64_t n) {
  StatusOr<Groups> g = Groups::FromRuns(sizes, n);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : Groups{};
}

// Group 0 = {1, 0, 0, 1}: mean 0.5, squared deviations 4 x 0.25 = 1,
//   unbiased std sqrt(1/3) = 0.5773503, A = +-0.5 / (0.5773503 + 1e-6) = +-0.8660239;
//   biased std sqrt(1/4) = 0.5,         A = +-0.5 / 0.500001            = +-0.9999980.
// Group 1 = {0.5, 0.5}: all equal, A = 0. Group 2 = {2}: one sample, A = 0.
TEST(AdvantagesTest, HandComputedGrpo) {
  const at::Tensor r = T({1, 0, 0, 1, 0.5, 0.5, 2}, at::kFloat);
  const Groups g = Runs({4, 2, 1}, 7);
  const GroupAdvantages unbiased = Advantages(r, g);
  EXPECT_EQ(unbiased.advantages.scalar_type(), at::kFloat);
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  EXPECT_NEAR(a, 0.8660239, 1e-6);
  EXPECT_EQ(Close(unbiased.advantages, T({a, -a, -a, a, 0, 0, 0})), "");
  EXPECT_EQ(Close(unbiased.group_mean, T({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 2})), "");
  EXPECT_EQ(Close(unbiased.group_std, T({0.5773503, 0.5773503, 0.5773503, 0.5773503, 0, 0, 0})), "");

  AdvantageOptions biased;
  biased.std_unbiased = false;
  const double b = 0.5 / 0.500001;
  EXPECT_EQ(Close(Advantages(r, g, biased).advantages, T({b, -b, -b, b, 0, 0, 0})), "");
}

// The default std is torch.std's (Bessel-corrected), which verl and TRL use.
TEST(AdvantagesTest, StdIsTorchStd) {
  std::mt19937_64 rng(kernels::testing::FreshSeed());
  const at::Tensor r = testing::Random(rng, {8});
  const GroupAdvantages a = Advantages(r, Runs({8}, 8));
  EXPECT_EQ(Close(a.group_std[0], at::std(r, /*unbiased=*/true)), "");
  EXPECT_EQ(Close(a.advantages, (r - r.mean()) / (at::std(r, /*unbiased=*/true) + 1e-6)), "");
}

TEST(AdvantagesTest, DrGrpoDiffersOnlyByTheStdDivision) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor r = testing::Random(rng, {24}, 0, 1);
  const Groups g = Runs({8, 8, 8}, 24);
  AdvantageOptions dr;
  dr.estimator = AdvantageEstimator::kDrGrpo;
  const GroupAdvantages grpo = Advantages(r, g), drgrpo = Advantages(r, g, dr);
  EXPECT_EQ(Close(drgrpo.advantages, r - grpo.group_mean), "");
  EXPECT_EQ(Close(drgrpo.advantages, grpo.advantages * (grpo.group_std + 1e-6)), "");
  // Dr. GRPO's advantages sum to zero in each group; GRPO's have unit (unbiased) std.
  for (int64_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(testing::D(drgrpo.advantages.slice(0, 8 * k, 8 * k + 8).sum()), 0.0, 1e-9);
    EXPECT_NEAR(testing::D(at::std(grpo.advantages.slice(0, 8 * k, 8 * k + 8), true)), 1.0, 1e-4);
  }
}

TEST(AdvantagesTest, IdsGiveTheSameAsRuns) {
  // Samples of groups 7, 3, 5 interleaved; the same rewards laid out in runs.
  const at::Tensor ids = Ints({7, 3, 7, 5, 3, 7, 5, 3});
  const at::Tensor r = T({1, 0, 0, 2, 1, 1, 2, 0.5});
  StatusOr<Groups> g = Groups::FromIds(ids);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->num_groups(), 3);
  EXPECT_EQ(g->names, (std::vector<int64_t>{7, 3, 5}));  // first appearance
  EXPECT_EQ(g->sizes, (std::vector<int64_t>{3, 3, 2}));
  const GroupAdvantages by_ids = Advantages(r, *g);
  // Runs: group 7 = samples 0, 2, 5; group 3 = 1, 4, 7; group 5 = 3, 6.
  const at::Tensor order = Ints({0, 2, 5, 1, 4, 7, 3, 6});
  const GroupAdvantages by_runs = Advantages(r.index_select(0, order), Runs({3, 3, 2}, 8));
  EXPECT_EQ(Close(by_ids.advantages.index_select(0, order), by_runs.advantages), "");
  // Group 5 has equal rewards: zero.
  EXPECT_EQ(testing::D(by_ids.advantages[3]), 0.0);
  EXPECT_EQ(testing::D(by_ids.advantages[6]), 0.0);
}

TEST(AdvantagesTest, OneSampleAndAllEqualGroupsAreExactlyZero) {
  // 0.1 + 0.1 + 0.1 != 0.3: the mean is not exactly 0.1, the advantage still is 0.
  const at::Tensor r = T({0.1, 0.1, 0.1, 0.7, 3.0, 3.0});
  for (const AdvantageEstimator e : {AdvantageEstimator::kGrpo, AdvantageEstimator::kDrGrpo}) {
    AdvantageOptions o;
    o.estimator = e;
    o.eps = 0;  // no eps to hide a rounding error behind
    const GroupAdvantages a = Advantages(r, Runs({3, 1, 0, 2}, 6), o);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(testing::D(a.advantages[i]), 0.0) << "sample " << i;
  }
}

TEST(AdvantagesTest, EmptyBatchAndEmptyRuns) {
  const GroupAdvantages a = Advantages(T({}), Runs({0, 0}, 0));
  EXPECT_EQ(a.advantages.numel(), 0);
  const GroupAdvantages b = Advantages(T({1, 2}), Runs({0, 2, 0}, 2));
  EXPECT_EQ(Close(b.advantages, T({-0.5 / (std::sqrt(0.5) + 1e-6), 0.5 / (std::sqrt(0.5) + 1e-6)})), "");
}

TEST(AdvantagesTest, Bf16RewardsComputeInFloat) {
  const at::Tensor r = T({0.3, 0.9, 0.1, 0.7}).to(at::kBFloat16);
  const GroupAdvantages a = Advantages(r, Runs({4}, 4));
  EXPECT_EQ(a.advantages.scalar_type(), at::kFloat);
  const at::Tensor rounded = r.to(at::kDouble);  // the values bf16 holds
  EXPECT_EQ(Close(a.advantages, (rounded - rounded.mean()) / (at::std(rounded, true) + 1e-6)), "");
}

TEST(AdvantagesTest, Refusals) {
  const Groups g = Runs({2, 2}, 4);
  auto message = [&](const at::Tensor& r, const Groups& groups, AdvantageOptions o = {}) {
    StatusOr<GroupAdvantages> a = ComputeGroupAdvantages(r, groups, o);
    EXPECT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    return a.status().message();
  };
  EXPECT_EQ(message(T({1, 2, NAN, 0}), g), "rewards: sample 2 is nan (rewards must be finite)");
  EXPECT_EQ(message(T({1, 2, 3}), g), "rewards: expected shape [4], got [3]");
  EXPECT_EQ(message(Ints({1, 2, 3, 4}), g).rfind("rewards: expected float32", 0), 0u);
  AdvantageOptions neg;
  neg.eps = -1;
  EXPECT_EQ(message(T({1, 2, 3, 4}), g, neg).rfind("advantage eps", 0), 0u);
  EXPECT_EQ(Groups::FromRuns({2, 3}, 4).status().message(), "group runs: sizes sum to 5, the batch has 4 samples");
  EXPECT_EQ(Groups::FromRuns({-1, 5}, 4).status().message(), "group runs: run 0 has negative size -1");
  EXPECT_EQ(Groups::FromIds(T({1, 2})).status().message().rfind("group ids: expected an integer type", 0), 0u);
  EXPECT_EQ(Groups::FromIds(Ints({1, 2}, {1, 2})).status().message(),
            "group ids: expected a 1-D tensor, got shape [1, 2]");
  Groups hand;  // assembled by hand, inconsistent
  hand.group_of_sample = {0, 1, 1, 2};
  hand.sizes = {1, 2};
  hand.names = {0, 1};
  EXPECT_EQ(message(T({1, 2, 3, 4}), hand), "groups: sample 3 is in group 2, there are 2");
  hand.group_of_sample = {0, 1, 1, 1};
  EXPECT_EQ(message(T({1, 2, 3, 4}), hand), "groups: group 1 has size 2 but 3 samples");
  EXPECT_EQ(ParseAdvantageEstimator("gae").status().message(),
            "unknown advantage estimator \"gae\" (known: grpo, dr_grpo)");
}

}  // namespace
}  // namespace tandem::rl

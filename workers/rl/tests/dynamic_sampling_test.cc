// Dynamic sampling's filter (dynamic_sampling.h): which groups survive.
#include "workers/rl/dynamic_sampling.h"

#include <gtest/gtest.h>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Ints;
using testing::T;

std::vector<int64_t> Samples(const KeptGroups& k) {
  const at::Tensor s = k.samples.to(at::kCPU).contiguous();
  return std::vector<int64_t>(s.data_ptr<int64_t>(), s.data_ptr<int64_t>() + s.numel());
}

TEST(DynamicSamplingTest, DropsGroupsWhoseRewardsAreAllEqual) {
  // Runs: {1, 1, 1} all correct, {0, 1, 0} mixed, {0, 0, 0} all wrong, {1} alone, {} empty, {0.5, 0.25}.
  const at::Tensor r = T({1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0.5, 0.25});
  StatusOr<Groups> g = Groups::FromRuns({3, 3, 3, 1, 0, 2}, 12);
  ASSERT_TRUE(g.ok());
  StatusOr<KeptGroups> k = GroupsWithVariedRewards(r, *g);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->groups, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(Samples(*k), (std::vector<int64_t>{3, 4, 5, 10, 11}));
}

TEST(DynamicSamplingTest, GroupIdsKeepBatchOrder) {
  StatusOr<Groups> g = Groups::FromIds(Ints({4, 9, 4, 9, 2, 2}));
  ASSERT_TRUE(g.ok());
  StatusOr<KeptGroups> k = GroupsWithVariedRewards(T({1, 0, 0, 0, 1, 0}, at::kBFloat16), *g);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->groups, (std::vector<int64_t>{0, 2}));  // ids 4 and 2; id 9 is all zeros
  EXPECT_EQ(g->names[0], 4);
  EXPECT_EQ(g->names[2], 2);
  EXPECT_EQ(Samples(*k), (std::vector<int64_t>{0, 2, 4, 5}));
}

TEST(DynamicSamplingTest, EmptyAndRefusals) {
  StatusOr<Groups> none = Groups::FromRuns({}, 0);
  ASSERT_TRUE(none.ok());
  StatusOr<KeptGroups> k = GroupsWithVariedRewards(T({}), *none);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->groups.empty());
  EXPECT_EQ(k->samples.numel(), 0);

  StatusOr<Groups> g = Groups::FromRuns({2}, 2);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(GroupsWithVariedRewards(T({1, INFINITY}), *g).status().message(),
            "rewards: sample 1 is inf (rewards must be finite)");
  EXPECT_EQ(GroupsWithVariedRewards(T({1, 2, 3}), *g).status().message(), "rewards: expected shape [2], got [3]");
}

}  // namespace
}  // namespace tandem::rl

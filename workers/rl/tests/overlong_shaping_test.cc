// DAPO's soft overlong punishment (overlong_shaping.h): the three pieces of
// R_length at and around their joints, the shaped rewards, refusals.
#include "workers/rl/overlong_shaping.h"

#include <gtest/gtest.h>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::Ints;
using testing::T;

// L = 20, c = 5: no penalty up to 15 tokens, then -(n - 15) / 5:
//   n = 10 -> 0, 15 -> 0, 16 -> -0.2, 18 -> -0.6, 20 -> -1, 25 -> -1 (past L), 0 -> 0.
TEST(OverlongShapingTest, HandComputedPenalty) {
  const OverlongShaping s{20, 5, 1.0};
  StatusOr<at::Tensor> p = OverlongPenalty(Ints({10, 15, 16, 18, 20, 25, 0}), s);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->scalar_type(), at::kFloat);
  EXPECT_EQ(Close(*p, T({0, 0, -0.2, -0.6, -1, -1, 0})), "");

  // penalty 0.5 halves it; the rewards are shifted by it.
  StatusOr<at::Tensor> shaped =
      ShapeOverlongRewards(T({1, 1, 1, 0, 1, 0, 1}, at::kBFloat16), Ints({10, 15, 16, 18, 20, 25, 0}), {20, 5, 0.5});
  ASSERT_TRUE(shaped.ok()) << shaped.status().ToString();
  EXPECT_EQ(shaped->scalar_type(), at::kFloat);
  EXPECT_EQ(Close(*shaped, T({1, 1, 0.9, -0.3, 0.5, -0.5, 1})), "");
}

TEST(OverlongShapingTest, CacheAsLongAsTheLimit) {
  // c = L: the penalty grows from the first token, -n / L.
  StatusOr<at::Tensor> p = OverlongPenalty(Ints({0, 1, 4, 8}), {8, 8, 2.0});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Close(*p, T({0, -0.25, -1, -2})), "");
}

TEST(OverlongShapingTest, Refusals) {
  const at::Tensor len = Ints({1, 2});
  EXPECT_EQ(OverlongPenalty(len, {0, 4, 1}).status().message(),
            "overlong shaping: max_length must be > 0 (the rollout's max response tokens), got 0");
  EXPECT_EQ(OverlongPenalty(len, {8, 9, 1}).status().message(),
            "overlong shaping: cache must be in (0, max_length = 8], got 9");
  EXPECT_EQ(OverlongPenalty(len, {8, 0, 1}).status().message(),
            "overlong shaping: cache must be in (0, max_length = 8], got 0");
  EXPECT_EQ(OverlongPenalty(len, {8, 4, -1}).status().message().rfind("overlong shaping: penalty", 0), 0u);
  EXPECT_EQ(OverlongPenalty(Ints({3, -1}), {8, 4, 1}).status().message(),
            "lengths: a response length is negative (-1)");
  EXPECT_EQ(OverlongPenalty(T({3, 1}), {8, 4, 1}).status().message().rfind("lengths: expected an integer type", 0),
            0u);
  EXPECT_EQ(ShapeOverlongRewards(T({1, 2, 3}), len, {8, 4, 1}).status().message(),
            "rewards: expected shape [2], got [3]");
}

}  // namespace
}  // namespace tandem::rl

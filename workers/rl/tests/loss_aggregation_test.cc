// Loss aggregation (loss_aggregation.h): the three modes by hand, the
// token-mean identity, padding rows, NaN in masked positions, micro-batches
// that sum to the batch, the empty mask, refusals.
#include "workers/rl/loss_aggregation.h"

#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::Ints;
using testing::T;

constexpr LossAggregation kModes[] = {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                      LossAggregation::kSeqMeanTokenSumNorm};

double Agg(const at::Tensor& l, const at::Tensor& m, LossAggregation mode, AggregationScale s = {}) {
  StatusOr<at::Tensor> out = AggregateLoss(l, m, mode, s);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? testing::D(*out) : NAN;
}

// l = [[1, 2, 3], [4, 5, 6]], m = [[1, 1, 1], [1, 0, 0]]:
//   token-mean              (1 + 2 + 3 + 4) / 4          = 2.5
//   seq-mean-token-mean     (6 / 3 + 4 / 1) / 2          = 3
//   seq-mean-token-sum-norm 10 / (2 x 3)  (L = T = 3)    = 1.6666667
//                           10 / (2 x 5)  (L = 5)        = 1
TEST(LossAggregationTest, HandComputed) {
  const at::Tensor l = T({1, 2, 3, 4, 5, 6}, {2, 3}), m = Ints({1, 1, 1, 1, 0, 0}, {2, 3});
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kTokenMean), 2.5), "");
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kSeqMeanTokenMean), 3.0), "");
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kSeqMeanTokenSumNorm), 10.0 / 6.0), "");
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kSeqMeanTokenSumNorm, {0, 0, 5}), 1.0), "");
  // Given N and S replace the mask's.
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kTokenMean, {8, 0, 0}), 10.0 / 8.0), "");
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kSeqMeanTokenMean, {0, 4, 0}), 6.0 / 4.0), "");
}

TEST(LossAggregationTest, TokenMeanIsTheMaskedSumOverTheCount) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor l = testing::Random(rng, {6, 11}), m = testing::RandomMask(rng, 6, 11);
  const double expected = testing::D((l * m.to(at::kDouble)).sum() / m.sum());
  EXPECT_EQ(Close(Agg(l, m, LossAggregation::kTokenMean), expected), "");
}

TEST(LossAggregationTest, PaddingRowsAndNanInMaskedPositionsChangeNothing) {
  std::mt19937_64 rng(kernels::testing::FreshSeed());
  const at::Tensor l = testing::Random(rng, {3, 5}), m = testing::RandomMask(rng, 3, 5);
  // A padding row (all masked) full of NaN, and NaN in every masked slot.
  at::Tensor lp = at::cat({l, T({NAN, NAN, NAN, NAN, NAN}, {1, 5})}, 0);
  lp = at::where(at::cat({m, at::zeros({1, 5}, m.options())}, 0), lp, NAN);
  const at::Tensor mp = at::cat({m, at::zeros({1, 5}, m.options())}, 0);
  for (const LossAggregation mode : kModes)
    EXPECT_EQ(Close(Agg(lp, mp, mode), Agg(l, m, mode)), "") << LossAggregationName(mode);
}

// Split a batch into micro-batches of different widths; with the batch's N,
// S and a fixed L, the micro-batch losses add up to the batch's.
TEST(LossAggregationTest, MicroBatchesSumToTheBatch) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor l = testing::Random(rng, {7, 9}), m = testing::RandomMask(rng, 7, 9);
  const double n = testing::D(m.sum()), s = 7;
  for (const LossAggregation mode : kModes) {
    const double whole = Agg(l, m, mode, {0, 0, 16});
    // Rows 0..2 trimmed to their longest response, rows 3..6 as they are.
    const int64_t w = static_cast<int64_t>(testing::D(m.slice(0, 0, 3).sum(1).max()));
    const double parts = Agg(l.slice(0, 0, 3).slice(1, 0, w), m.slice(0, 0, 3).slice(1, 0, w), mode, {n, s, 16}) +
                         Agg(l.slice(0, 3, 7), m.slice(0, 3, 7), mode, {n, s, 16});
    EXPECT_EQ(Close(parts, whole), "") << LossAggregationName(mode);
  }
}

TEST(LossAggregationTest, EmptyMaskIsZeroAndBackpropagates) {
  for (const LossAggregation mode : kModes) {
    const at::Tensor l = T({1, 2, 3, 4}, {2, 2}).requires_grad_(true);
    StatusOr<at::Tensor> out = AggregateLoss(l, at::zeros({2, 2}, at::kBool), mode);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(testing::D(*out), 0.0);
    EXPECT_EQ(Close(testing::Grad(*out, l), at::zeros({2, 2}, at::kDouble)), "");
    StatusOr<at::Tensor> none = AggregateLoss(at::zeros({0, 3}, at::kFloat), at::zeros({0, 3}, at::kBool), mode);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(testing::D(*none), 0.0);
  }
}

TEST(LossAggregationTest, Bf16ComputesInFloat) {
  const at::Tensor l = T({1.5, 2.25, 3, 4}, {2, 2}, at::kBFloat16);
  StatusOr<at::Tensor> out = AggregateLoss(l, at::ones({2, 2}, at::kBool), LossAggregation::kTokenMean);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->scalar_type(), at::kFloat);
  EXPECT_EQ(Close(testing::D(*out), 10.75 / 4), "");
}

TEST(LossAggregationTest, Refusals) {
  const at::Tensor l = T({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(AggregateLoss(l, Ints({1, 1, 1}, {1, 3}), LossAggregation::kTokenMean).status().message(),
            "mask: expected shape [2, 2], got [1, 3]");
  EXPECT_EQ(AggregateLoss(l, l, LossAggregation::kTokenMean).status().message(),
            "mask: expected bool or an integer type (nonzero = counted), got Double");
  EXPECT_EQ(AggregateLoss(T({1, 2}), Ints({1, 1}), LossAggregation::kTokenMean).status().message(),
            "per_token: expected 2 dimensions, got shape [2]");
  EXPECT_EQ(AggregateLoss(l, Ints({1, 1, 1, 1}, {2, 2}), LossAggregation::kTokenMean, {-1, 0, 0}).status().message(),
            "aggregation tokens: expected a finite number >= 0, got -1.000000");
  EXPECT_EQ(ParseLossAggregation("seq-mean").status().message(),
            "unknown loss aggregation \"seq-mean\" (known: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm)");
  for (const LossAggregation mode : kModes) EXPECT_EQ(*ParseLossAggregation(LossAggregationName(mode)), mode);
}

}  // namespace
}  // namespace tandem::rl

// The warmup + cosine schedule: warmup is linear, the cosine runs from peak
// at progress 0 to final_ratio * peak at progress 1 (docs/model.md, "sft").
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "workers/train/lr_schedule.h"

namespace tandem::train {
namespace {

TEST(WarmupCosine, Shape) {
  std::mt19937 rng(std::random_device{}());
  const double peak = std::uniform_real_distribution<double>(1e-4, 1e-2)(rng);
  const WarmupCosine s{peak, 10, 0.1};
  ASSERT_TRUE(s.Validate().ok());
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-12 + 1e-9 * std::abs(b); };
  EXPECT_TRUE(near(s.At(0, 0), peak / 10));
  EXPECT_TRUE(near(s.At(4, 0), peak / 2));
  EXPECT_TRUE(near(s.At(9, 0), peak));
  EXPECT_TRUE(near(s.At(100, 0.5), peak * (0.1 + 0.9 * 0.5)));
  EXPECT_TRUE(near(s.At(100, 1.0), peak * 0.1));
  EXPECT_TRUE(near(s.At(100, 7.0), peak * 0.1));  // clamped
  EXPECT_TRUE(near(s.At(100, -1.0), peak));
  double prev = s.At(10, 0);
  for (int i = 1; i <= 100; ++i) {
    const double lr = s.At(10 + i, i / 100.0);
    EXPECT_LE(lr, prev + 1e-15);
    prev = lr;
  }
  EXPECT_TRUE(near(WarmupCosine{peak, 0, 0}.At(0, 0), peak));
}

TEST(WarmupCosine, Validate) {
  EXPECT_FALSE((WarmupCosine{0, 0, 0.1}).Validate().ok());
  EXPECT_FALSE((WarmupCosine{NAN, 0, 0.1}).Validate().ok());
  EXPECT_FALSE((WarmupCosine{1e-3, -1, 0.1}).Validate().ok());
  EXPECT_FALSE((WarmupCosine{1e-3, 0, 1.5}).Validate().ok());
}

}  // namespace
}  // namespace tandem::train

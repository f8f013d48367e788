// The fused AdamW update on the CPU: the first step's known answer, the CPU
// implementation against the fp64 oracle over sizes and settings (one step
// from random state, and 50 chained steps), the same bits on one thread and
// on several, and bad arguments refused naming what was wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/adamw/adamw.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::RandomVector;

struct State {
  std::vector<float> grad, w, m, v;
};

State RandomState(std::mt19937_64& rng, size_t n) {
  State s{RandomVector(rng, n), RandomVector(rng, n), RandomVector(rng, n, -0.1f, 0.1f), RandomVector(rng, n, 0, 0.01f)};
  return s;
}

TEST(AdamWCpu, TheFirstStepMovesEachWeightByLrAgainstItsGradientsSign) {
  // m_hat = g and v_hat = g^2 after one step: the update is lr * g / (|g| + eps).
  std::vector<float> grad = {0.5f, -2.0f, 1e-3f}, w = {1, 1, 1}, m(3, 0), v(3, 0);
  AdamWStep s;
  s.lr = 0.1;
  s.eps = 1e-12;
  ASSERT_TRUE(AdamWCpu(s, 3, grad.data(), w.data(), m.data(), v.data()).ok());
  EXPECT_NEAR(w[0], 0.9f, 1e-6);
  EXPECT_NEAR(w[1], 1.1f, 1e-6);
  EXPECT_NEAR(w[2], 0.9f, 1e-5);
  EXPECT_FLOAT_EQ(m[0], 0.05f);
  EXPECT_FLOAT_EQ(v[1], 0.004f);
}

TEST(AdamWCpu, MatchesTheOracleOverSizesAndSettings) {
  const uint64_t seed = testing::FreshSeed();
  std::mt19937_64 rng(seed);
  for (size_t n : {size_t{1}, size_t{7}, size_t{4096}, size_t{(1 << 17) + 5}}) {
    for (int64_t step : {int64_t{1}, int64_t{10}, int64_t{1000}}) {
      for (double weight_decay : {0.0, 0.1}) {
        for (double grad_scale : {1.0, 0.25}) {
          AdamWStep s{3e-3, weight_decay, 0.9, 0.95, 1e-8, step, grad_scale};
          State cpu = RandomState(rng, n);
          State ref = cpu;
          ASSERT_TRUE(AdamWCpu(s, static_cast<int64_t>(n), cpu.grad.data(), cpu.w.data(), cpu.m.data(), cpu.v.data(), 2).ok());
          AdamWRef(s, static_cast<int64_t>(n), ref.grad.data(), ref.w.data(), ref.m.data(), ref.v.data());
          const std::string where = "n " + std::to_string(n) + " step " + std::to_string(step) + " wd " +
                                    std::to_string(weight_decay) + " scale " + std::to_string(grad_scale) +
                                    " seed " + std::to_string(seed);
          EXPECT_EQ(CheckClose(cpu.w, ref.w, {3e-7, 2e-6}), "") << "w, " << where;
          EXPECT_EQ(CheckClose(cpu.m, ref.m, {5e-8, 2e-6}), "") << "m, " << where;
          EXPECT_EQ(CheckClose(cpu.v, ref.v, {1e-10, 2e-6}), "") << "v, " << where;
        }
      }
    }
  }
}

TEST(AdamWCpu, FiftyChainedStepsStayWithTheOracle) {
  const uint64_t seed = testing::FreshSeed();
  std::mt19937_64 rng(seed);
  const int64_t n = 3000;
  State cpu = RandomState(rng, static_cast<size_t>(n));
  std::fill(cpu.m.begin(), cpu.m.end(), 0.f);
  std::fill(cpu.v.begin(), cpu.v.end(), 0.f);
  State ref = cpu;
  for (int64_t t = 1; t <= 50; ++t) {
    const std::vector<float> grad = RandomVector(rng, static_cast<size_t>(n));
    const AdamWStep s{1e-2, 0.1, 0.9, 0.999, 1e-8, t, 1.0};
    ASSERT_TRUE(AdamWCpu(s, n, grad.data(), cpu.w.data(), cpu.m.data(), cpu.v.data()).ok());
    AdamWRef(s, n, grad.data(), ref.w.data(), ref.m.data(), ref.v.data());
  }
  EXPECT_EQ(CheckClose(cpu.w, ref.w, {1e-6, 1e-5}), "") << "seed " << seed;
}

TEST(AdamWCpu, OneThreadAndSeveralGiveTheSameBits) {
  std::mt19937_64 rng(testing::FreshSeed());
  const int64_t n = (1 << 18) + 3;
  State one = RandomState(rng, static_cast<size_t>(n));
  State many = one;
  const AdamWStep s{1e-3, 0.1, 0.9, 0.95, 1e-8, 7, 0.5};
  ASSERT_TRUE(AdamWCpu(s, n, one.grad.data(), one.w.data(), one.m.data(), one.v.data(), 1).ok());
  ASSERT_TRUE(AdamWCpu(s, n, many.grad.data(), many.w.data(), many.m.data(), many.v.data(), 4).ok());
  EXPECT_EQ(one.w, many.w);
  EXPECT_EQ(one.m, many.m);
  EXPECT_EQ(one.v, many.v);
}

TEST(SumSquaresCpu, IsTheDoubleSumOnAnyThreadCount) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{(1 << 17) + 9}}) {
    const std::vector<float> x = RandomVector(rng, static_cast<size_t>(n), -3, 3);
    double plain = 0;
    for (float f : x) plain += static_cast<double>(f) * f;
    double one = -1, many = -1;
    ASSERT_TRUE(SumSquaresCpu(n, x.data(), &one, 1).ok());
    ASSERT_TRUE(SumSquaresCpu(n, x.data(), &many, 3).ok());
    EXPECT_EQ(one, many) << "n " << n;
    EXPECT_NEAR(one, plain, 1e-12 * plain) << "n " << n;
  }
  double out = 0;
  EXPECT_FALSE(SumSquaresCpu(-1, nullptr, &out).ok());
  EXPECT_FALSE(SumSquaresCpu(3, nullptr, &out).ok());
}

TEST(AdamWCpu, BadArgumentsAreRefusedNamingThem) {
  std::vector<float> x(4, 0.f);
  auto run = [&](const AdamWStep& s, int64_t n = 4) { return AdamWCpu(s, n, x.data(), x.data(), x.data(), x.data()).message(); };
  AdamWStep s;
  s.lr = -1;
  EXPECT_NE(run(s).find("lr"), std::string::npos);
  s = {};
  s.weight_decay = NAN;
  EXPECT_NE(run(s).find("weight_decay"), std::string::npos);
  s = {};
  s.beta1 = 1;
  EXPECT_NE(run(s).find("beta1"), std::string::npos);
  s = {};
  s.beta2 = -0.1;
  EXPECT_NE(run(s).find("beta2"), std::string::npos);
  s = {};
  s.eps = 0;
  EXPECT_NE(run(s).find("eps"), std::string::npos);
  s = {};
  s.step = 0;
  EXPECT_NE(run(s).find("step"), std::string::npos);
  s = {};
  s.grad_scale = INFINITY;
  EXPECT_NE(run(s).find("grad_scale"), std::string::npos);
  EXPECT_NE(run({}, -1).find("negative"), std::string::npos);
  EXPECT_TRUE(AdamWCpu({}, 0, nullptr, nullptr, nullptr, nullptr).ok()) << "nothing to update";
  EXPECT_NE(AdamWCpu({}, 4, x.data(), nullptr, x.data(), x.data()).message().find("null"), std::string::npos);
}

}  // namespace
}  // namespace tandem::kernels

// KL estimators (kl.h): a value worked out by hand, the exact expectation
// identity over a small vocabulary (both estimators are unbiased), k3 >= 0,
// the gradient, refusals.
#include "workers/rl/kl.h"

#include <gtest/gtest.h>

#include <ATen/ops/log.h>
#include <ATen/ops/log_softmax.h>

#include <cmath>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::T;

// p = 0.5, p_ref = 0.25: d = log(0.25 / 0.5) = -ln 2,
//   k1 = ln 2 = 0.6931472, k3 = 0.5 + ln 2 - 1 = 0.1931472.
TEST(KlTest, HandComputed) {
  const at::Tensor logp = T({std::log(0.5), std::log(0.5)}), ref = T({std::log(0.25), std::log(0.5)});
  StatusOr<at::Tensor> k1 = TokenKl(logp, ref, KlEstimator::kK1), k3 = TokenKl(logp, ref, KlEstimator::kK3);
  ASSERT_TRUE(k1.ok() && k3.ok());
  EXPECT_EQ(Close(*k1, T({0.6931472, 0})), "");
  EXPECT_EQ(Close(*k3, T({0.1931472, 0})), "");
}

// Over a vocabulary, sum_v p(v) k(v) = KL(p || q) exactly for both: the
// estimators are unbiased for tokens sampled from the policy.
TEST(KlTest, ExpectationUnderThePolicyIsTheKl) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor logp = at::log_softmax(testing::Random(rng, {50}, -2, 2), 0);
  const at::Tensor logq = at::log_softmax(testing::Random(rng, {50}, -2, 2), 0);
  const at::Tensor p = logp.exp();
  const double kl = testing::D((p * (logp - logq)).sum());
  for (const KlEstimator e : {KlEstimator::kK1, KlEstimator::kK3}) {
    StatusOr<at::Tensor> k = TokenKl(logp, logq, e);
    ASSERT_TRUE(k.ok());
    EXPECT_NEAR(testing::D((p * *k).sum()), kl, 1e-12) << KlEstimatorName(e);
    if (e == KlEstimator::kK3) EXPECT_GE(testing::D(k->min()), 0.0);
  }
}

// d k3 / d logp = 1 - exp(ref - logp); d k1 / d logp = 1; nothing to ref.
TEST(KlTest, GradientFlowsToLogprobsOnly) {
  const at::Tensor logp = T({-0.5, -1.0, -2.0}).requires_grad_(true);
  const at::Tensor ref = T({-1.0, -1.0, -0.5}).requires_grad_(true);
  StatusOr<at::Tensor> k3 = TokenKl(logp, ref, KlEstimator::kK3);
  ASSERT_TRUE(k3.ok());
  const at::Tensor loss = k3->sum();
  EXPECT_EQ(Close(testing::Grad(loss, logp), 1.0 - (ref - logp).detach().exp()), "");
  EXPECT_FALSE(testing::Grad(loss, ref).defined());
  StatusOr<at::Tensor> k1 = TokenKl(logp, ref, KlEstimator::kK1);
  ASSERT_TRUE(k1.ok());
  EXPECT_EQ(Close(testing::Grad(k1->sum(), logp), T({1, 1, 1})), "");
}

TEST(KlTest, Refusals) {
  EXPECT_EQ(TokenKl(T({1, 2}), T({1, 2, 3}), KlEstimator::kK3).status().message(),
            "ref_logprobs: expected shape [2], got [3]");
  EXPECT_EQ(ParseKlEstimator("k2").status().message(), "unknown KL estimator \"k2\" (known: k1, k3)");
  EXPECT_EQ(TokenKl(at::Tensor(), T({1}), KlEstimator::kK1).status().message(),
            "logprobs: missing (an undefined tensor)");
}

}  // namespace
}  // namespace tandem::rl

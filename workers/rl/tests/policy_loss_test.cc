// The PPO clipped policy loss (policy_loss.h): a case worked out by hand
// with its metrics and gradient, dual clip, the ratio-1 gradient identity
// in every aggregation, finite differences in float64, where gradients
// go, NaN padding, micro-batches, empty batches, bf16, refusals.
#include "workers/rl/policy_loss.h"

#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <map>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::Ints;
using testing::T;

PolicyLossOutput Loss(const PolicyLossInputs& in, const PolicyLossOptions& o) {
  StatusOr<PolicyLossOutput> out = ComputePolicyLoss(in, o);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : PolicyLossOutput{};
}

std::map<std::string, double> Metrics(const PolicyLossOutput& out) {
  std::map<std::string, double> m;
  for (const auto& [k, v] : out.metrics.ToHost()) m[k] = v;
  return m;
}

PolicyLossOptions Dapo() {
  PolicyLossOptions o;
  o.clip_ratio_low = 0.2;
  o.clip_ratio_high = 0.28;
  return o;
}

// One response, 5 tokens, ratios r = (1.1, 1.5, 0.5, 0.9, 1.4),
// A = (1, 1, -1, -1, -1), clip range [0.8, 1.28]:
//   token 0: max(-1.1, -1.1)  = -1.1   (inside)
//   token 1: max(-1.5, -1.28) = -1.28  (clipped high: no gradient)
//   token 2: max( 0.5,  0.8)  =  0.8   (clipped low: no gradient)
//   token 3: max( 0.9,  0.9)  =  0.9   (inside)
//   token 4: max( 1.4,  1.28) =  1.4   (A < 0 above the range: not clipped, PPO is pessimistic)
//   token-mean = (-1.1 - 1.28 + 0.8 + 0.9 + 1.4) / 5 = 0.144
//   d/dlogp = -A r / 5 where not clipped: (-0.22, 0, 0, 0.18, 0.28)
//   clip fractions: high 1/5 (token 1), low 1/5 (token 2);
//   ratio mean 5.4 / 5 = 1.08, max 1.5;
//   approx_kl = -mean(ln r) = -(0.0953102 + 0.4054651 - 0.6931472 - 0.1053605 + 0.3364722) / 5 = -0.0077480
TEST(PolicyLossTest, HandComputed) {
  const at::Tensor old = T({-1, -1, -1, -1, -1}, {1, 5});
  const at::Tensor logp = (old + at::log(T({1.1, 1.5, 0.5, 0.9, 1.4}, {1, 5}))).requires_grad_(true);
  PolicyLossInputs in{logp, old, T({1, 1, -1, -1, -1}, {1, 5}), at::ones({1, 5}, at::kBool)};
  const PolicyLossOutput out = Loss(in, Dapo());
  EXPECT_EQ(out.loss.scalar_type(), at::kDouble);
  EXPECT_EQ(Close(testing::D(out.loss), 0.144), "");
  EXPECT_EQ(Close(testing::Grad(out.loss, logp), T({-0.22, 0, 0, 0.18, 0.28}, {1, 5})), "");
  auto m = Metrics(out);
  EXPECT_EQ(Close(m["pg_loss"], 0.144), "");
  EXPECT_EQ(Close(m["clip_frac_high"], 0.2), "");
  EXPECT_EQ(Close(m["clip_frac_low"], 0.2), "");
  EXPECT_EQ(m["dual_clip_frac"], 0.0);
  EXPECT_EQ(Close(m["ratio_mean"], 1.08), "");
  EXPECT_EQ(Close(m["ratio_max"], 1.5), "");
  EXPECT_EQ(Close(m["approx_kl"], -0.0077480), "");
  EXPECT_EQ(m["tokens"], 5.0);
  EXPECT_EQ(m.count("kl_loss"), 0u);  // no reference given
  EXPECT_EQ(m.count("entropy_mean"), 0u);
}

// A = -1, r = 5, c = 3: l_clip = max(5, 1.2) = 5, dual clip min(5, 3) = 3,
// and the token's gradient is gone. For A = +1 the dual clip changes nothing.
TEST(PolicyLossTest, DualClipOnlyBitesForNegativeAdvantages) {
  const at::Tensor old = T({-2, -2}, {1, 2});
  const at::Tensor logp = (old + std::log(5.0)).requires_grad_(true);
  PolicyLossOptions dual = Dapo();
  dual.clip_ratio_c = 3.0;
  PolicyLossInputs neg{logp, old, T({-1}), at::ones({1, 2}, at::kBool)};
  const PolicyLossOutput off = Loss(neg, Dapo()), on = Loss(neg, dual);
  EXPECT_EQ(Close(testing::D(off.loss), 5.0), "");
  EXPECT_EQ(Close(testing::D(on.loss), 3.0), "");
  EXPECT_EQ(Close(testing::Grad(on.loss, logp), at::zeros({1, 2}, at::kDouble)), "");
  EXPECT_EQ(Close(Metrics(on)["dual_clip_frac"], 1.0), "");

  // Random positive advantages and ratios up to 20: identical with and without.
  std::mt19937_64 rng(kernels::testing::FreshSeed());
  const at::Tensor old2 = testing::Random(rng, {4, 6}, -3, -1);
  const at::Tensor lp2 = old2 + testing::Random(rng, {4, 6}, -3, 3);
  PolicyLossInputs pos{lp2, old2, testing::Random(rng, {4}, 0.1, 2), testing::RandomMask(rng, 4, 6)};
  EXPECT_EQ(testing::D(Loss(pos, dual).loss), testing::D(Loss(pos, Dapo()).loss));
  EXPECT_EQ(Metrics(Loss(pos, dual))["dual_clip_frac"], 0.0);
}

// With logp = old (ratio 1) and no KL or entropy, the gradient per counted
// token is -A / (the aggregation's weight of that token):
//   token-mean: -A / N; seq-mean-token-mean: -A / (S n_i); seq-mean-token-sum-norm: -A / (S L).
TEST(PolicyLossTest, RatioOneGradientIsMinusAdvantageOverTheNormaliser) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t b = 5, t = 8, l = 12;
  const at::Tensor old = testing::Random(rng, {b, t}, -4, -0.1);
  const at::Tensor adv = testing::Random(rng, {b, t});
  const at::Tensor m = testing::RandomMask(rng, b, t);
  const at::Tensor mf = m.to(at::kDouble);
  const double n = testing::D(m.sum());
  const at::Tensor n_i = mf.sum(1, /*keepdim=*/true);
  const std::pair<LossAggregation, at::Tensor> cases[] = {
      {LossAggregation::kTokenMean, -adv * mf / n},
      {LossAggregation::kSeqMeanTokenMean, -adv * mf / (n_i * b)},
      {LossAggregation::kSeqMeanTokenSumNorm, -adv * mf / static_cast<double>(b * l)}};
  for (const auto& [mode, expected] : cases) {
    const at::Tensor logp = old.clone().requires_grad_(true);
    PolicyLossOptions o;
    o.aggregation = mode;
    o.max_response_length = l;
    const PolicyLossOutput out = Loss({logp, old, adv, m}, o);
    EXPECT_EQ(Close(testing::Grad(out.loss, logp), expected), "") << LossAggregationName(mode);
  }
}

// Ratios log-uniform in [e^-0.6, e^0.6] but at least 0.01 away from every
// kink (1 - eps_low, 1 + eps_high, c), so central differences with step
// 1e-6 see a smooth function.
at::Tensor LogRatiosAwayFromKinks(std::mt19937_64& rng, at::IntArrayRef sizes, const PolicyLossOptions& o) {
  at::Tensor lr = testing::Random(rng, sizes, -0.6, 0.6);
  double* p = lr.data_ptr<double>();
  std::uniform_real_distribution<double> u(-0.6, 0.6);
  auto near_kink = [&](double x) {
    const double r = std::exp(x);
    return std::fabs(r - (1 - o.clip_ratio_low)) < 0.01 || std::fabs(r - (1 + o.clip_ratio_high)) < 0.01 ||
           (o.clip_ratio_c && std::fabs(r - *o.clip_ratio_c) < 0.01);
  };
  for (int64_t i = 0; i < lr.numel(); ++i)
    while (near_kink(p[i])) p[i] = u(rng);
  return lr;
}

TEST(PolicyLossTest, GradientsMatchFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const LossAggregation mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                     LossAggregation::kSeqMeanTokenSumNorm}) {
    for (const KlEstimator kl : {KlEstimator::kK1, KlEstimator::kK3}) {
      SCOPED_TRACE(std::string(LossAggregationName(mode)) + " " + std::string(KlEstimatorName(kl)));
      PolicyLossOptions o = Dapo();
      o.clip_ratio_c = 1.5;  // inside the sampled ratios: the dual clip is exercised
      o.aggregation = mode;
      o.kl_coef = 0.3;
      o.kl_estimator = kl;
      o.entropy_coef = 0.05;
      const int64_t b = 3, t = 5;
      const at::Tensor old = testing::Random(rng, {b, t}, -3, -0.5);
      const at::Tensor logp = (old + LogRatiosAwayFromKinks(rng, {b, t}, o)).detach().requires_grad_(true);
      const at::Tensor ref = old + testing::Random(rng, {b, t}, -0.5, 0.5);
      const at::Tensor adv = testing::Random(rng, {b, t}, -2, 2);
      const at::Tensor ent = testing::Random(rng, {b, t}, 0, 3).requires_grad_(true);
      const at::Tensor m = testing::RandomMask(rng, b, t, 2);
      const PolicyLossOutput out = Loss({logp, old, adv, m, ref, ent}, o);
      const at::Tensor g_logp = testing::Grad(out.loss, logp), g_ent = testing::Grad(out.loss, ent);
      auto loss_at = [&](const at::Tensor& lp, const at::Tensor& e) {
        return testing::D(Loss({lp, old, adv, m, ref, e}, o).loss);
      };
      const at::Tensor fd_logp = testing::FiniteDifferences([&](const at::Tensor& x) { return loss_at(x, ent); }, logp);
      const at::Tensor fd_ent = testing::FiniteDifferences([&](const at::Tensor& x) { return loss_at(logp, x); }, ent);
      EXPECT_EQ(Close(g_logp, fd_logp, {1e-7, 1e-5}), "") << "d logprobs";
      EXPECT_EQ(Close(g_ent, fd_ent, {1e-7, 1e-5}), "") << "d entropy";
    }
  }
}

TEST(PolicyLossTest, GradientsFlowToThePolicyOnly) {
  std::mt19937_64 rng(kernels::testing::FreshSeed());
  const at::Tensor logp = testing::Random(rng, {2, 3}, -2, -1).requires_grad_(true);
  const at::Tensor old = testing::Random(rng, {2, 3}, -2, -1).requires_grad_(true);
  const at::Tensor adv = testing::Random(rng, {2}).requires_grad_(true);
  const at::Tensor ref = testing::Random(rng, {2, 3}, -2, -1).requires_grad_(true);
  PolicyLossOptions o;
  o.kl_coef = 0.1;
  const PolicyLossOutput out = Loss({logp, old, adv, at::ones({2, 3}, at::kBool), ref}, o);
  EXPECT_TRUE(testing::Grad(out.loss, logp).defined());
  EXPECT_FALSE(testing::Grad(out.loss, old).defined());
  EXPECT_FALSE(testing::Grad(out.loss, adv).defined());
  EXPECT_FALSE(testing::Grad(out.loss, ref).defined());
  for (const auto& [name, v] : out.metrics.ToHost()) EXPECT_TRUE(std::isfinite(v)) << name;
}

// NaN and inf in every masked slot of every input: the loss and metrics are
// those of the clean batch, the padding's gradient is exactly zero.
TEST(PolicyLossTest, PaddingHoldingNanChangesNothing) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t b = 4, t = 6;
  const at::Tensor m = testing::RandomMask(rng, b, t);
  auto poison = [&](const at::Tensor& x, double v) { return at::where(m, x, v); };
  const at::Tensor old = testing::Random(rng, {b, t}, -3, -0.5), lp = old + testing::Random(rng, {b, t}, -0.4, 0.4);
  const at::Tensor adv = testing::Random(rng, {b, t}), ref = testing::Random(rng, {b, t}, -3, -0.5);
  const at::Tensor ent = testing::Random(rng, {b, t}, 0, 2);
  PolicyLossOptions o = Dapo();
  o.clip_ratio_c = 3.0;
  o.kl_coef = 0.1;
  o.entropy_coef = 0.01;
  for (const LossAggregation mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                     LossAggregation::kSeqMeanTokenSumNorm}) {
    o.aggregation = mode;
    const at::Tensor clean_lp = lp.clone().requires_grad_(true);
    const at::Tensor dirty_lp = poison(lp, NAN).requires_grad_(true);
    const PolicyLossOutput clean = Loss({clean_lp, old, adv, m, ref, ent}, o);
    const PolicyLossOutput dirty =
        Loss({dirty_lp, poison(old, INFINITY), poison(adv, NAN), m, poison(ref, -INFINITY), poison(ent, NAN)}, o);
    EXPECT_EQ(Close(testing::D(dirty.loss), testing::D(clean.loss)), "") << LossAggregationName(mode);
    const at::Tensor g_dirty = testing::Grad(dirty.loss, dirty_lp);
    EXPECT_EQ(Close(g_dirty, at::where(m, testing::Grad(clean.loss, clean_lp), 0.0)), "");
    const auto cm = Metrics(clean), dm = Metrics(dirty);
    for (const auto& [k, v] : cm) EXPECT_EQ(Close(dm.at(k), v), "") << k;
  }
}

TEST(PolicyLossTest, MicroBatchesSumToTheBatch) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t b = 6, t = 7;
  const at::Tensor old = testing::Random(rng, {b, t}, -3, -0.5), lp = old + testing::Random(rng, {b, t}, -0.5, 0.5);
  const at::Tensor adv = testing::Random(rng, {b}), m = testing::RandomMask(rng, b, t);
  const at::Tensor ref = testing::Random(rng, {b, t}, -3, -0.5);
  for (const LossAggregation mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                     LossAggregation::kSeqMeanTokenSumNorm}) {
    PolicyLossOptions o = Dapo();
    o.aggregation = mode;
    o.max_response_length = t;
    o.kl_coef = 0.2;
    const double whole = testing::D(Loss({lp, old, adv, m, ref}, o).loss);
    double parts = 0;
    for (int64_t start = 0; start < b; start += 2) {
      PolicyLossInputs in{lp.slice(0, start, start + 2), old.slice(0, start, start + 2), adv.slice(0, start, start + 2),
                          m.slice(0, start, start + 2), ref.slice(0, start, start + 2)};
      in.batch_tokens = testing::D(m.sum());
      in.batch_sequences = b;
      parts += testing::D(Loss(in, o).loss);
    }
    EXPECT_EQ(Close(parts, whole), "") << LossAggregationName(mode);
  }
}

TEST(PolicyLossTest, EmptyBatchesGiveZeroLossAndGradients) {
  PolicyLossOptions o;
  o.kl_coef = 0.1;
  const at::Tensor logp = T({-1, -2, -3, -4}, {2, 2}).requires_grad_(true);
  const PolicyLossOutput out = Loss({logp, T({-1, -1, -1, -1}, {2, 2}), T({1, -1}), at::zeros({2, 2}, at::kBool),
                                     T({-1, -1, -1, -1}, {2, 2})},
                                    o);
  EXPECT_EQ(testing::D(out.loss), 0.0);
  EXPECT_EQ(Close(testing::Grad(out.loss, logp), at::zeros({2, 2}, at::kDouble)), "");
  for (const auto& [name, v] : out.metrics.ToHost()) EXPECT_EQ(v, 0.0) << name;

  const at::Tensor none = at::zeros({0, 5}, at::kFloat).requires_grad_(true);
  const PolicyLossOutput zero = Loss({none, at::zeros({0, 5}), at::zeros({0}), at::zeros({0, 5}, at::kBool)}, {});
  EXPECT_EQ(testing::D(zero.loss), 0.0);
  for (const auto& [name, v] : zero.metrics.ToHost()) EXPECT_EQ(v, 0.0) << name;
}

// bf16 log-probs (as the CUDA path delivers them): float32 arithmetic on the
// bf16 values, the gradient back in bf16.
TEST(PolicyLossTest, Bf16InputsComputeInFloat) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor old = testing::Random(rng, {3, 4}, -3, -0.5).to(at::kBFloat16);
  const at::Tensor lp = (old.to(at::kDouble) + testing::Random(rng, {3, 4}, -0.5, 0.5)).to(at::kBFloat16);
  const at::Tensor adv = testing::Random(rng, {3}).to(at::kBFloat16);
  const at::Tensor m = testing::RandomMask(rng, 3, 4);
  const at::Tensor ent = testing::Random(rng, {3, 4}, 0, 2).to(at::kBFloat16);
  PolicyLossOptions o = Dapo();
  o.entropy_coef = 0.01;
  const at::Tensor lp16 = lp.clone().requires_grad_(true);
  const PolicyLossOutput out = Loss({lp16, old, adv, m, at::Tensor(), ent}, o);
  EXPECT_EQ(out.loss.scalar_type(), at::kFloat);
  const at::Tensor lp64 = lp.to(at::kDouble).requires_grad_(true);
  const PolicyLossOutput ref =
      Loss({lp64, old.to(at::kDouble), adv.to(at::kDouble), m, at::Tensor(), ent.to(at::kDouble)}, o);
  EXPECT_EQ(Close(testing::D(out.loss), testing::D(ref.loss), kernels::testing::kFp32), "");
  const at::Tensor g = testing::Grad(out.loss, lp16);
  EXPECT_EQ(g.scalar_type(), at::kBFloat16);
  EXPECT_EQ(Close(g, testing::Grad(ref.loss, lp64), kernels::testing::kBf16), "");
}

TEST(PolicyLossTest, Refusals) {
  const at::Tensor x = T({-1, -1, -1, -1, -1, -1}, {2, 3});
  const at::Tensor m = at::ones({2, 3}, at::kBool);
  auto message = [](const PolicyLossInputs& in, const PolicyLossOptions& o = {}) {
    StatusOr<PolicyLossOutput> out = ComputePolicyLoss(in, o);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    return out.status().message();
  };
  EXPECT_EQ(message({x, T({-1, -1}, {1, 2}), T({1, 1}), m}), "old_logprobs: expected shape [2, 3], got [1, 2]");
  EXPECT_EQ(message({x, x, T({1, 1, 1}), m}), "advantages: expected shape [2], got [3]");
  EXPECT_EQ(message({x, x, T({1, 1, 1, 1}, {2, 2}), m}),
            "advantages ([B] or [B, T]): advantages: expected shape [2, 3], got [2, 2]");
  EXPECT_EQ(message({x, x, T({1, 1}), x}), "mask: expected bool or an integer type (nonzero = counted), got Double");
  EXPECT_EQ(message({Ints({1, 2, 3, 4, 5, 6}, {2, 3}), x, T({1, 1}), m}).rfind("logprobs: expected float32", 0), 0u);
  EXPECT_EQ(message({T({-1, -1}), T({-1, -1}), T({1, 1}), Ints({1, 1})}),
            "logprobs: expected 2 dimensions, got shape [2]");
  PolicyLossOptions kl;
  kl.kl_coef = 0.1;
  EXPECT_EQ(message({x, x, T({1, 1}), m}, kl), "ref_logprobs: required when kl_coef > 0 (kl_coef = 0.100000)");
  PolicyLossOptions ent;
  ent.entropy_coef = 0.1;
  EXPECT_EQ(message({x, x, T({1, 1}), m}, ent).rfind("entropy: required when entropy_coef > 0", 0), 0u);
  PolicyLossOptions bad;
  bad.clip_ratio_low = 1.0;
  EXPECT_EQ(message({x, x, T({1, 1}), m}, bad), "clip_ratio_low: expected a number in [0.000000, 1.000000), got 1.000000");
  bad = {};
  bad.clip_ratio_c = 0.5;
  EXPECT_EQ(message({x, x, T({1, 1}), m}, bad).rfind("clip_ratio_c: expected a number in (1.000000, inf)", 0), 0u);
}

}  // namespace
}  // namespace tandem::rl

// The algorithm registry and its JSON options (algorithm_registry.h,
// algorithm_config.h): the built-ins' defaults, options over them, every
// refusal naming its key, the round trip, registering a new algorithm with
// its own loss (as MOPD will), the job's limits.
#include "workers/rl/algorithm_registry.h"

#include <gtest/gtest.h>

#include <ATen/ops/ones.h>

#include <cmath>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using nlohmann::json;

Algorithm MustResolve(const AlgorithmRegistry& r, const json& spec) {
  StatusOr<Algorithm> a = r.Resolve(spec);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? *a : Algorithm{};
}

std::string Refusal(const json& spec) {
  StatusOr<Algorithm> a = AlgorithmRegistry::WithBuiltins().Resolve(spec);
  EXPECT_FALSE(a.ok()) << spec.dump();
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << a.status().ToString();
  return a.status().message();
}

TEST(AlgorithmRegistryTest, BuiltinDefaults) {
  const AlgorithmRegistry r = AlgorithmRegistry::WithBuiltins();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"dapo", "dr_grpo", "grpo", "mopd"}));

  const Algorithm grpo = MustResolve(r, "grpo");
  EXPECT_EQ(grpo.config.advantage.estimator, AdvantageEstimator::kGrpo);
  EXPECT_TRUE(grpo.config.advantage.std_unbiased);
  EXPECT_EQ(grpo.config.advantage.eps, 1e-6);
  EXPECT_EQ(grpo.config.loss.aggregation, LossAggregation::kSeqMeanTokenMean);
  EXPECT_EQ(grpo.config.loss.kl_coef, 0.04);
  EXPECT_EQ(grpo.config.loss.kl_estimator, KlEstimator::kK3);
  EXPECT_FALSE(grpo.config.loss.clip_ratio_c.has_value());
  EXPECT_FALSE(grpo.config.dynamic_sampling);

  const Algorithm dr = MustResolve(r, "dr_grpo");
  EXPECT_EQ(dr.config.advantage.estimator, AdvantageEstimator::kDrGrpo);
  EXPECT_EQ(dr.config.loss.aggregation, LossAggregation::kSeqMeanTokenSumNorm);
  EXPECT_EQ(dr.config.loss.kl_coef, 0.0);

  const Algorithm dapo = MustResolve(r, json{{"name", "dapo"}});
  EXPECT_EQ(dapo.config.loss.clip_ratio_low, 0.2);
  EXPECT_EQ(dapo.config.loss.clip_ratio_high, 0.28);
  EXPECT_EQ(dapo.config.loss.clip_ratio_c, 10.0);
  EXPECT_EQ(dapo.config.loss.aggregation, LossAggregation::kTokenMean);
  EXPECT_TRUE(dapo.config.dynamic_sampling);
  ASSERT_TRUE(dapo.config.overlong.has_value());
  EXPECT_EQ(dapo.config.overlong->cache, 4096);
  EXPECT_EQ(dapo.config.overlong->penalty, 1.0);
  EXPECT_FALSE(dapo.config.distill.has_value());

  const Algorithm mopd = MustResolve(r, json{{"name", "mopd"}, {"options", {{"distill", {{"rl_coef", 0}}}}}});
  EXPECT_EQ(mopd.config.loss.aggregation, LossAggregation::kTokenMean);
  EXPECT_EQ(mopd.config.loss.kl_coef, 0.0);
  ASSERT_TRUE(mopd.config.distill.has_value());
  EXPECT_EQ(mopd.config.distill->rl_coef, 0.0);
  EXPECT_EQ(mopd.config.distill->distill_coef, 1.0);
  EXPECT_EQ(mopd.config.distill->loss.ratio_cap, 5.0);
  EXPECT_EQ(mopd.config.distill->top_k, 0) << "the top-k term is off unless asked for";
  const Algorithm topk = MustResolve(r, json{{"name", "mopd"}, {"options", {{"distill", {{"top_k", 8}, {"top_k_coef", 0.5}}}}}});
  EXPECT_EQ(topk.config.distill->top_k, 8);
  EXPECT_EQ(topk.config.distill->top_k_coef, 0.5);
  EXPECT_EQ(dapo.config.overlong->max_length, 0);  // the job's
}

TEST(AlgorithmRegistryTest, OptionsOverTheDefaults) {
  const Algorithm a = MustResolve(AlgorithmRegistry::WithBuiltins(),
                                  json::parse(R"({"name": "dapo", "options": {
                                    "clip_ratio_high": 0.3, "clip_ratio_c": null, "kl_coef": 0.001,
                                    "kl_estimator": "k1", "std_unbiased": false, "max_response_length": 512,
                                    "overlong_shaping": {"cache": 64}, "entropy_coef": 0, "advantage_eps": 1e-4}})"));
  EXPECT_EQ(a.config.loss.clip_ratio_high, 0.3);
  EXPECT_EQ(a.config.loss.clip_ratio_low, 0.2);  // untouched
  EXPECT_FALSE(a.config.loss.clip_ratio_c.has_value());
  EXPECT_EQ(a.config.loss.kl_coef, 0.001);
  EXPECT_EQ(a.config.loss.kl_estimator, KlEstimator::kK1);
  EXPECT_FALSE(a.config.advantage.std_unbiased);
  EXPECT_EQ(a.config.advantage.eps, 1e-4);
  EXPECT_EQ(a.config.loss.max_response_length, 512);
  EXPECT_EQ(a.config.overlong->cache, 64);
  EXPECT_EQ(a.config.overlong->penalty, 1.0);  // untouched
  EXPECT_TRUE(a.config.dynamic_sampling);

  const Algorithm off = MustResolve(AlgorithmRegistry::WithBuiltins(),
                                    json::parse(R"({"name": "dapo", "options": {"overlong_shaping": null,
                                                    "dynamic_sampling": false}})"));
  EXPECT_FALSE(off.config.overlong.has_value());
  EXPECT_FALSE(off.config.dynamic_sampling);
}

TEST(AlgorithmRegistryTest, RefusalsNameTheKey) {
  auto with = [](const char* options) { return json{{"name", "dapo"}, {"options", json::parse(options)}}; };
  EXPECT_EQ(Refusal("ppo"), "unknown algorithm \"ppo\" (known: dapo, dr_grpo, grpo, mopd)");
  EXPECT_EQ(Refusal(json{{"name", "ppo"}}), "algorithm.name: unknown algorithm \"ppo\" (known: dapo, dr_grpo, grpo, mopd)");
  EXPECT_EQ(Refusal(json::object()), "algorithm.name: required (known: dapo, dr_grpo, grpo, mopd)");
  EXPECT_EQ(Refusal(json{{"name", 3}}), "algorithm.name: expected a string, got 3");
  EXPECT_EQ(Refusal(json{{"name", "grpo"}, {"option", json::object()}}),
            "algorithm: unknown key \"option\" (known: name, options)");
  EXPECT_EQ(Refusal(json::array()), "algorithm: expected a name or {\"name\": ..., \"options\": {...}}, got []");
  EXPECT_EQ(Refusal(json{{"name", "grpo"}, {"options", 1}}), "algorithm grpo: options: expected an object, got 1");
  EXPECT_EQ(Refusal(with(R"({"clip_ratio_hgih": 0.3})")).rfind(
                "algorithm dapo: options: unknown key \"clip_ratio_hgih\" (known: advantage_estimator, ", 0),
            0u);
  EXPECT_EQ(Refusal(with(R"({"clip_ratio_high": "0.3"})")),
            "algorithm dapo: options.clip_ratio_high: expected a number >= 0, got \"0.3\"");
  EXPECT_EQ(Refusal(with(R"({"clip_ratio_high": true})")),
            "algorithm dapo: options.clip_ratio_high: expected a number >= 0, got true");
  EXPECT_EQ(Refusal(with(R"({"clip_ratio_low": 1})")),
            "algorithm dapo: options.clip_ratio_low: expected a number in [0, 1), got 1");
  EXPECT_EQ(Refusal(with(R"({"clip_ratio_c": 1.0})")),
            "algorithm dapo: options.clip_ratio_c: expected a number > 1 (or null: off), got 1.0");
  EXPECT_EQ(Refusal(with(R"({"kl_coef": -0.1})")), "algorithm dapo: options.kl_coef: expected a number >= 0, got -0.1");
  // JSON text cannot hold inf (the parser refuses 1e999), a DOM built in code can.
  EXPECT_EQ(Refusal(json{{"name", "dapo"}, {"options", {{"kl_coef", INFINITY}}}})
                .rfind("algorithm dapo: options.kl_coef: expected a number >= 0", 0),
            0u);
  EXPECT_EQ(Refusal(with(R"({"std_unbiased": 1})")),
            "algorithm dapo: options.std_unbiased: expected true or false, got 1");
  EXPECT_EQ(Refusal(with(R"({"max_response_length": 1.5})")),
            "algorithm dapo: options.max_response_length: expected an integer >= 1, got 1.5");
  EXPECT_EQ(Refusal(with(R"({"max_response_length": 0})")),
            "algorithm dapo: options.max_response_length: expected an integer >= 1, got 0");
  EXPECT_EQ(Refusal(with(R"({"kl_estimator": "k2"})")),
            "algorithm dapo: options.kl_estimator: unknown KL estimator \"k2\" (known: k1, k3)");
  EXPECT_EQ(Refusal(with(R"({"kl_estimator": 3})")), "algorithm dapo: options.kl_estimator: expected a string, got 3");
  EXPECT_EQ(Refusal(with(R"({"loss_agg_mode": "token_mean"})")).rfind(
                "algorithm dapo: options.loss_agg_mode: unknown loss aggregation \"token_mean\"", 0),
            0u);
  EXPECT_EQ(Refusal(with(R"({"advantage_estimator": "gae"})")),
            "algorithm dapo: options.advantage_estimator: unknown advantage estimator \"gae\" (known: grpo, dr_grpo)");
  EXPECT_EQ(Refusal(with(R"({"overlong_shaping": {"cach": 4}})")),
            "algorithm dapo: options.overlong_shaping: unknown key \"cach\" (known: cache, penalty, max_length)");
  EXPECT_EQ(Refusal(with(R"({"overlong_shaping": {"cache": 64, "max_length": 32}})")),
            "algorithm dapo: options.overlong_shaping.cache: 64 is longer than max_length 32");
  EXPECT_EQ(Refusal(with(R"({"overlong_shaping": {"penalty": -1}})")),
            "algorithm dapo: options.overlong_shaping.penalty: expected a number >= 0, got -1");
  EXPECT_EQ(Refusal(with(R"({"overlong_shaping": 5})")),
            "algorithm dapo: options.overlong_shaping: expected null or an object {cache, penalty, max_length}, got 5");
  EXPECT_EQ(Refusal(with(R"({"distill": {"ratio_cap": 0.5}})")),
            "algorithm dapo: options.distill.ratio_cap: expected a number >= 1, got 0.5");
  EXPECT_EQ(Refusal(with(R"({"distill": {"teachers": 2}})")),
            "algorithm dapo: options.distill: unknown key \"teachers\" (known: rl_coef, distill_coef, ratio_cap, top_k, "
            "top_k_coef)");
  EXPECT_EQ(Refusal(with(R"({"distill": {"top_k": 65}})")),
            "algorithm dapo: options.distill.top_k: expected an integer in [0, 64], got 65");
  EXPECT_EQ(Refusal(with(R"({"distill": {"top_k": 2.5}})")),
            "algorithm dapo: options.distill.top_k: expected an integer >= 0, got 2.5");
  EXPECT_EQ(Refusal(with(R"({"distill": {"top_k_coef": -1}})")),
            "algorithm dapo: options.distill.top_k_coef: expected a number >= 0, got -1");
  EXPECT_EQ(Refusal(with(R"({"distill": true})")),
            "algorithm dapo: options.distill: expected null or an object {rl_coef, distill_coef, ratio_cap, top_k, "
            "top_k_coef}, got true");
  EXPECT_EQ(Refusal(json{{"name", "grpo"}, {"options", {{"overlong_shaping", {{"penalty", 1}}}}}}),
            "algorithm grpo: options.overlong_shaping.cache: required (the tokens before max_length where the "
            "penalty grows)");
}

TEST(AlgorithmRegistryTest, OptionsJsonRoundTrips) {
  for (const std::string& name : AlgorithmRegistry::WithBuiltins().Names()) {
    const Algorithm a = MustResolve(AlgorithmRegistry::WithBuiltins(), name);
    const json j = AlgorithmOptionsJson(a.config);
    StatusOr<AlgorithmConfig> back = ApplyAlgorithmOptions(AlgorithmConfig{}, j, "round trip");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(AlgorithmOptionsJson(*back), j) << name;
  }
}

TEST(AlgorithmRegistryTest, RegisterAnAlgorithmWithItsOwnLoss) {
  AlgorithmRegistry r = AlgorithmRegistry::WithBuiltins();
  int calls = 0;
  Algorithm mine{"mopd_test", "a test loss: the mean of the log-probs", {},
                 [&calls](const PolicyLossInputs& in, const AlgorithmConfig&) -> StatusOr<PolicyLossOutput> {
                   ++calls;
                   return PolicyLossOutput{in.logprobs.mean(), {}};
                 }};
  ASSERT_TRUE(r.Register(mine).ok());
  EXPECT_EQ(r.Register(mine).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"dapo", "dr_grpo", "grpo", "mopd", "mopd_test"}));
  const Algorithm a = MustResolve(r, json{{"name", "mopd_test"}, {"options", {{"kl_coef", 0.5}}}});
  EXPECT_EQ(a.config.loss.kl_coef, 0.5);
  const at::Tensor x = testing::T({1, 2, 3, 6}, {2, 2});
  StatusOr<PolicyLossOutput> out = a.loss({x, x, testing::T({1, 1}), at::ones({2, 2}, at::kBool)}, a.config);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(testing::D(out->loss), 3.0);
  EXPECT_EQ(calls, 1);

  Algorithm bad = mine;
  bad.name = "Bad-Name";
  EXPECT_EQ(r.Register(bad).message(), "algorithm name \"Bad-Name\": expected [a-z0-9_]+");
  bad = mine;
  bad.name = "no_loss";
  bad.loss = nullptr;
  EXPECT_EQ(r.Register(bad).message(), "algorithm no_loss: no loss function");
  bad = mine;
  bad.name = "bad_clip";
  bad.config.loss.clip_ratio_low = 2;
  EXPECT_EQ(r.Register(bad).code(), StatusCode::kInvalidArgument);
}

// The built-in dr_grpo loss is seq-mean-token-sum-norm of the PPO loss.
TEST(AlgorithmRegistryTest, BuiltinLossIsThePpoLossOfItsConfig) {
  const Algorithm dr = MustResolve(AlgorithmRegistry::WithBuiltins(), "dr_grpo");
  StatusOr<AlgorithmConfig> limited = WithJobLimits(dr.config, 10);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->loss.max_response_length, 10);
  // Ratio 1: the loss is -sum(A m) / (S L) = -(2 x 1 + 1 x -3) / (2 x 10) = 0.05.
  const at::Tensor x = testing::T({-1, -1, -1, -1}, {2, 2});
  StatusOr<PolicyLossOutput> out =
      dr.loss({x, x, testing::T({1, -3}), testing::Ints({1, 1, 1, 0}, {2, 2})}, *limited);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(testing::Close(testing::D(out->loss), 0.05), "");
}

TEST(AlgorithmRegistryTest, JobLimitsFillWhatWasLeftToTheJob) {
  const Algorithm dapo = MustResolve(AlgorithmRegistry::WithBuiltins(), "dapo");
  StatusOr<AlgorithmConfig> c = WithJobLimits(dapo.config, 20480);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->overlong->max_length, 20480);
  EXPECT_EQ(c->loss.max_response_length, 20480);
  // The default cache (4096) does not fit 128-token responses: say so.
  EXPECT_EQ(WithJobLimits(dapo.config, 128).status().message(),
            "overlong shaping: cache must be in (0, max_length = 128], got 4096");
  EXPECT_EQ(WithJobLimits(dapo.config, 0).status().message(), "max response tokens: expected > 0, got 0");
}

}  // namespace
}  // namespace tandem::rl

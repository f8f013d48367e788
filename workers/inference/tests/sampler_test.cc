// The sampler (sampler.h): greedy is the argmax with ties to the lowest id;
// a seeded row gives the same token whatever batch it is in; top-k, top-p
// and min-p keep exactly the support their definitions give on constructed
// logits; token frequencies pass a chi-square test against the filtered
// softmax (and a test against a perturbed distribution fails, so the test
// has power); the log-prob is log_softmax at the row's temperature; bad input is a
// Status. On CUDA (when present) the same draws give the same tokens.
#include <ATen/core/ivalue.h>  // first, for clang
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "workers/inference/sampler.h"

namespace tandem::inference {
namespace {

SampleSpec Spec(double t, int64_t k, double p, double min_p, uint64_t seed, int64_t index, int64_t step) {
  SampleSpec s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  s.seed = seed;
  s.sample_index = index;
  s.step = step;
  return s;
}

std::vector<int64_t> Tokens(const SamplerOutput& o) {
  const at::Tensor t = o.tokens.to(at::kCPU).contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// The filtered distribution of sampler.h's definition, in double.
std::vector<double> Filtered(const std::vector<float>& logits, const SampleSpec& s) {
  const size_t v = logits.size();
  std::vector<double> p(v);
  const double mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (size_t i = 0; i < v; ++i) z += p[i] = std::exp((logits[i] - mx) / s.temperature);
  for (double& x : p) x /= z;
  std::vector<size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> q(v, 0.0);
  double before = 0, total = 0;
  for (size_t r = 0; r < v; ++r) {
    const size_t i = order[r];
    const bool keep = r == 0 || ((s.top_k < 1 || static_cast<int64_t>(r) < s.top_k) &&
                                 (s.top_p >= 1 || before < s.top_p) && p[i] >= s.min_p * p[order[0]]);
    if (keep) total += q[i] = p[i];
    before += p[i];
  }
  for (double& x : q) x /= total;
  return q;
}

// Q(a, x), the regularised upper incomplete gamma function (Numerical
// Recipes' gammq): the chi-square p-value is Q(df / 2, stat / 2).
double UpperGamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {  // series for P
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;  // continued fraction for Q
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

double ChiSquarePValue(const std::vector<int64_t>& counts, const std::vector<double>& expected_p, int64_t n) {
  double stat = 0;
  int64_t df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected_p[i] <= 0) continue;
    const double e = expected_p[i] * static_cast<double>(n);
    stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++df;
  }
  return UpperGamma(static_cast<double>(df) / 2, stat / 2);
}

TEST(Sampler, ChiSquareHelperMatchesKnownQuantiles) {
  // chi2(df=1) at 3.841: p = 0.05; chi2(df=10) at 23.209: p = 0.01.
  EXPECT_NEAR(UpperGamma(0.5, 3.841 / 2), 0.05, 1e-3);
  EXPECT_NEAR(UpperGamma(5.0, 23.209 / 2), 0.01, 1e-4);
}

TEST(Sampler, GreedyIsTheArgmaxWithTiesToTheLowestId) {
  const at::Tensor logits = at::tensor(std::vector<float>{0.5F, 2.0F, 2.0F, -1.0F, 1.0F, 3.0F, 3.0F, 0.0F}).reshape({2, 4});
  auto out = Sample(logits, {Spec(0, -1, 1, 0, 1, 0, 0), Spec(0, -1, 1, 0, 1, 0, 0)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Tokens(*out), (std::vector<int64_t>{1, 1}));
  // Fresh random logits: argmax, and the log-prob at temperature 1.
  const at::Tensor r = at::randn({16, 100});
  auto g = Sample(r, std::vector<SampleSpec>(16, Spec(0, 5, 0.5, 0.1, 3, 0, 0)));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(at::equal(g->tokens, r.argmax(-1)));
  const at::Tensor want = at::log_softmax(r, -1).gather(1, g->tokens.unsqueeze(1)).squeeze(1);
  EXPECT_TRUE(at::allclose(g->logprobs, want, /*rtol=*/1e-6, /*atol=*/1e-6));
}

TEST(Sampler, LogProbsAreOfTheTemperedDistribution) {
  // Rows at temperature 0.5, 1 and 2 (no filters), and a greedy row (T = 1).
  const at::Tensor r = at::randn({4, 50}) * 2;
  auto out = Sample(r, {Spec(0.5, -1, 1, 0, 1, 0, 0), Spec(1, -1, 1, 0, 2, 0, 0), Spec(2, -1, 1, 0, 3, 0, 0),
                        Spec(0, -1, 1, 0, 4, 0, 0)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<double> t = {0.5, 1, 2, 1};
  for (int64_t b = 0; b < 4; ++b) {
    const at::Tensor lp = at::log_softmax(r[b] / t[static_cast<size_t>(b)], -1);
    EXPECT_NEAR(out->logprobs[b].item<float>(), lp[out->tokens[b].item<int64_t>()].item<float>(), 1e-5) << "row " << b;
  }
}

TEST(Sampler, ASeededRowIgnoresItsBatch) {
  const at::Tensor row = at::randn({1, 500}) * 2;
  const SampleSpec spec = Spec(0.9, 50, 0.95, 0.01, 1234, 2, 7);
  auto alone = Sample(row, {spec});
  ASSERT_TRUE(alone.ok());
  for (int trial = 0; trial < 5; ++trial) {
    const int64_t b = 2 + trial * 7;
    const int64_t at_row = trial % b;
    at::Tensor batch = at::randn({b, 500}) * 3;
    batch[at_row] = row[0];
    std::vector<SampleSpec> specs;
    for (int64_t i = 0; i < b; ++i) specs.push_back(Spec(0.5 + 0.1 * static_cast<double>(i % 5), i % 3 == 0 ? -1 : 10,
                                                      0.9, 0.0, 99 + static_cast<uint64_t>(i), i, i));
    specs[static_cast<size_t>(at_row)] = spec;
    auto out = Sample(batch, specs);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(Tokens(*out)[static_cast<size_t>(at_row)], Tokens(*alone)[0]) << "batch " << b;
    EXPECT_FLOAT_EQ(out->logprobs[at_row].item<float>(), alone->logprobs[0].item<float>());
  }
  // Same key, same token; the draws differ across steps and samples.
  auto again = Sample(row, {spec});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Tokens(*again), Tokens(*alone));
  EXPECT_EQ(SampleUniform(1, 2, 3), SampleUniform(1, 2, 3));
  EXPECT_NE(SampleUniform(1, 2, 3), SampleUniform(1, 2, 4));
  EXPECT_NE(SampleUniform(1, 2, 3), SampleUniform(1, 3, 3));
  EXPECT_NE(SampleUniform(1, 2, 3), SampleUniform(2, 2, 3));
}

// Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 (shuffled over ids) at
// temperature 1: every filter's support, as a set of ids.
TEST(Sampler, FiltersKeepExactlyTheirSupport) {
  const std::vector<int64_t> id_of_rank{3, 0, 4, 1, 2};  // rank r's probability sits at id id_of_rank[r]
  const std::vector<double> probs{0.4, 0.3, 0.15, 0.1, 0.05};
  std::vector<float> logits(5);
  for (size_t r = 0; r < 5; ++r) logits[static_cast<size_t>(id_of_rank[r])] = static_cast<float>(std::log(probs[r]));
  struct Case {
    const char* name;
    int64_t top_k;
    double top_p;
    double min_p;
    size_t kept_ranks;
  } cases[] = {
      {"all", -1, 1.0, 0.0, 5},       {"top_k 2", 2, 1.0, 0.0, 2},      {"top_k 1", 1, 1.0, 0.0, 1},
      {"top_p 0.5", -1, 0.5, 0.0, 2}, {"top_p 0.75", -1, 0.75, 0.0, 3}, {"top_p 0.05", -1, 0.05, 0.0, 1},
      {"min_p 0.3", -1, 1.0, 0.3, 3}, {"min_p 0.2", -1, 1.0, 0.2, 4},   {"min_p 1", -1, 1.0, 1.0, 1},
      {"top_k 4, top_p 0.8, min_p 0.3", 4, 0.8, 0.3, 3}, {"top_k 2, min_p 0.2", 2, 1.0, 0.2, 2},
  };
  const int64_t n = 2000;
  for (const Case& c : cases) {
    const at::Tensor batch = at::tensor(logits).unsqueeze(0).expand({n, 5}).contiguous();
    std::vector<SampleSpec> specs;
    for (int64_t i = 0; i < n; ++i) specs.push_back(Spec(1.0, c.top_k, c.top_p, c.min_p, 42, 0, i));
    auto out = Sample(batch, specs);
    ASSERT_TRUE(out.ok());
    std::set<int64_t> seen;
    for (const int64_t t : Tokens(*out)) seen.insert(t);
    std::set<int64_t> want;
    for (size_t r = 0; r < c.kept_ranks; ++r) want.insert(id_of_rank[r]);
    EXPECT_EQ(seen, want) << c.name;  // n draws see every kept token (p >= 0.05 / 0.95)
  }
}

// Equal probabilities: the filters keep the lowest ids, on the top-k path
// (top_k <= 1024) and on the full sort (top_p, min_p).
TEST(Sampler, FiltersBreakTiesTowardsTheLowestId) {
  const std::vector<float> logits{0.0F, 1.0F, 1.0F, 1.0F, 0.0F, 1.0F};
  struct Case {
    int64_t top_k;
    double top_p;
    std::set<int64_t> want;
  } cases[] = {{1, 1.0, {1}}, {2, 1.0, {1, 2}}, {-1, 0.2, {1}}, {-1, 0.3, {1, 2}}, {3, 0.3, {1, 2}}};
  const int64_t n = 400;
  for (const Case& c : cases) {
    const at::Tensor batch = at::tensor(logits).unsqueeze(0).expand({n, 6}).contiguous();
    std::vector<SampleSpec> specs;
    for (int64_t i = 0; i < n; ++i) specs.push_back(Spec(1.0, c.top_k, c.top_p, 0.0, 5, 0, i));
    auto out = Sample(batch, specs);
    ASSERT_TRUE(out.ok());
    const std::vector<int64_t> got = Tokens(*out);
    EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), c.want) << "top_k " << c.top_k << " top_p " << c.top_p;
  }
}

TEST(Sampler, FrequenciesPassAChiSquareTestAgainstTheFilteredSoftmax) {
  std::mt19937 rng(2024);  // fixed: the test is deterministic
  std::normal_distribution<float> normal(0.0F, 1.5F);
  std::vector<float> logits(24);
  for (float& x : logits) x = normal(rng);
  struct Case {
    SampleSpec spec;
  } cases[] = {
      {Spec(1.0, -1, 1.0, 0.0, 7, 0, 0)},
      {Spec(0.7, 12, 1.0, 0.0, 8, 1, 0)},
      {Spec(1.3, -1, 0.8, 0.0, 9, 2, 0)},
      {Spec(1.0, 16, 0.9, 0.02, 10, 3, 0)},
  };
  constexpr double kMinPValue = 1e-3;  // a correct sampler fails 1 run in 1000 (fixed seeds: never)
  const int64_t n = 20000;
  for (const Case& c : cases) {
    const at::Tensor batch = at::tensor(logits).unsqueeze(0).expand({n, 24}).contiguous();
    std::vector<SampleSpec> specs(static_cast<size_t>(n), c.spec);
    for (int64_t i = 0; i < n; ++i) specs[static_cast<size_t>(i)].step = i;
    auto out = Sample(batch, specs);
    ASSERT_TRUE(out.ok());
    std::vector<int64_t> counts(24, 0);
    for (const int64_t t : Tokens(*out)) ++counts[static_cast<size_t>(t)];
    const std::vector<double> q = Filtered(logits, c.spec);
    for (size_t i = 0; i < 24; ++i) {
      if (q[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "token " << i << " is filtered out";
      }
    }
    const double p = ChiSquarePValue(counts, q, n);
    EXPECT_GT(p, kMinPValue) << "temperature " << c.spec.temperature << " top_k " << c.spec.top_k;
    // Power: the same counts against the distribution with its two most
    // likely tokens swapped are rejected.
    std::vector<double> wrong = q;
    const auto top = std::max_element(wrong.begin(), wrong.end()) - wrong.begin();
    std::vector<double> rest = wrong;
    rest[static_cast<size_t>(top)] = -1;
    const auto second = std::max_element(rest.begin(), rest.end()) - rest.begin();
    std::swap(wrong[static_cast<size_t>(top)], wrong[static_cast<size_t>(second)]);
    if (std::fabs(q[static_cast<size_t>(top)] - q[static_cast<size_t>(second)]) > 0.02) {
      EXPECT_LT(ChiSquarePValue(counts, wrong, n), kMinPValue);
    }
  }
}

TEST(Sampler, BadInputIsAStatus) {
  EXPECT_EQ(Sample(at::zeros({3}), {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sample(at::zeros({2, 4}, at::kDouble), {{}, {}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sample(at::zeros({2, 4}), {{}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sample(at::zeros({2, 0}), {{}, {}}).status().code(), StatusCode::kInvalidArgument);
  auto empty = Sample(at::zeros({0, 4}), {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->tokens.numel(), 0);
  // Non-finite logits give some token in range, never a crash.
  at::Tensor bad = at::zeros({2, 4});
  bad[0][1] = std::numeric_limits<float>::quiet_NaN();
  bad[1].fill_(-std::numeric_limits<float>::infinity());
  auto out = Sample(bad, {Spec(1, -1, 0.9, 0.1, 1, 0, 0), Spec(1, -1, 1, 0, 1, 0, 0)});
  ASSERT_TRUE(out.ok());
  for (const int64_t t : Tokens(*out)) EXPECT_TRUE(t >= 0 && t < 4);
}

TEST(Sampler, CudaDrawsTheSameTokensAsTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const at::Tensor logits = at::randn({64, 1000}) * 2;
  std::vector<SampleSpec> specs;
  for (int64_t i = 0; i < 64; ++i) specs.push_back(Spec(i % 4 == 0 ? 0.0 : 0.8, i % 2 ? 40 : -1, 0.9, 0.01, 5, i, 3));
  auto cpu = Sample(logits, specs);
  auto cuda = Sample(logits.to(at::kCUDA), specs);
  ASSERT_TRUE(cpu.ok() && cuda.ok());
  const std::vector<int64_t> a = Tokens(*cpu), b = Tokens(*cuda);
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i] ? 1 : 0;
  EXPECT_GE(same, 63);  // a last-bit difference may move one draw across a CDF boundary
  EXPECT_TRUE(at::allclose(cpu->logprobs, cuda->logprobs.to(at::kCPU), 1e-4, 1e-4));
}

}  // namespace
}  // namespace tandem::inference

// The MOPD loss (distill_loss.h): a table of hand-checked tokens (routes,
// the ratio cap, padding and unscored teachers holding NaN, a sequence
// routed to no teacher), micro-batches summing to the batch, its gradient
// against finite differences of the exact weighted reverse KL it
// estimates, bf16 inputs, and bad inputs named.
#include "workers/rl/distill_loss.h"

#include <ATen/ops/log_softmax.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>
#include <map>

#include "workers/rl/tests/rl_test_util.h"

namespace tandem::rl {
namespace {

using testing::Close;
using testing::T;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DistillLossOutput Loss(const DistillLossInputs& in, const DistillLossOptions& o = {}) {
  StatusOr<DistillLossOutput> out = ComputeDistillLoss(in, o);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *std::move(out) : DistillLossOutput{};
}

std::map<std::string, double> Metrics(const DistillLossOutput& out) {
  std::map<std::string, double> m;
  for (const auto& [k, v] : out.metrics.ToHost()) m[k] = v;
  return m;
}

// Three sequences of three tokens, two teachers:
//   seq 0 routed to teacher 0 alone (w = 1; teacher 1 did not score it: NaN),
//         its third token padding (NaN everywhere);
//   seq 1 routed to both, weights 0.3 and 0.7 (not renormalised: W = 1);
//         its first token's ratio e^3 is capped at c = 5;
//   seq 2 routed to no teacher (an RL-only prompt): not counted.
// Per counted token, r = S - W logp, rho = min(e^(logp - old), 5), l = -rho r:
//   (0,0): r = -1.0 - (-2.0) = 1.0,  rho = 1          l = -1.0
//   (0,1): r = -0.5 - (-1.0) = 0.5,  rho = e^-0.5     l = -0.5 e^-0.5
//   (1,0): S = 0.3(-1) + 0.7(-3) = -2.4; r = -2.4 - (-1.0) = -1.4, rho = 5   l = 7.0
//   (1,1): S = 0.3(-2) + 0.7(-2) = -2.0; r = -2.0 - (-2.0) = 0,    rho = 1   l = 0
//   (1,2): S = 0.3(-1) + 0.7(-0.5) = -0.65; r = -0.65 - (-0.5) = -0.15, rho = e^0.2  l = 0.15 e^0.2
// L = sum / 5; dL/dlogp = -rho r / 5 on counted tokens, 0 elsewhere.
TEST(DistillLossTest, HandComputedTable) {
  const at::Tensor logp = T({-2.0, -1.0, kNaN, -1.0, -2.0, -0.5, -1.0, -1.0, -1.0}, {3, 3}).requires_grad_(true);
  const at::Tensor old = T({-2.0, -0.5, kNaN, -4.0, -2.0, -0.7, -1.0, -1.0, -1.0}, {3, 3});
  const at::Tensor teachers = T({-1.0, -0.5, kNaN, -1.0, -2.0, -1.0, 9, 9, 9,          // teacher 0
                                 kNaN, kNaN, kNaN, -3.0, -2.0, -0.5, kNaN, kNaN, kNaN},  // teacher 1
                                {2, 3, 3});
  const at::Tensor route = T({1.0, 0.0, 0.3, 0.7, 0.0, 0.0}, {3, 2});
  const at::Tensor mask = testing::Ints({1, 1, 0, 1, 1, 1, 1, 1, 1}, {3, 3});
  const DistillLossOutput out = Loss({logp, old, teachers, route, mask});
  const double l[] = {-1.0, -0.5 * std::exp(-0.5), 7.0, 0.0, 0.15 * std::exp(0.2)};
  const double want = (l[0] + l[1] + l[2] + l[3] + l[4]) / 5;
  EXPECT_EQ(Close(testing::D(out.loss), want), "");
  const at::Tensor grad = testing::Grad(out.loss, logp);
  EXPECT_EQ(Close(grad, T({-1.0 / 5, -0.5 * std::exp(-0.5) / 5, 0, 7.0 / 5, 0, 0.15 * std::exp(0.2) / 5, 0, 0, 0},
                          {3, 3})),
            "");
  auto m = Metrics(out);
  EXPECT_EQ(m["tokens"], 5.0) << "the padding and the unrouted sequence are not counted";
  EXPECT_EQ(Close(m["distill_loss"], want), "");
  EXPECT_EQ(Close(m["ratio_capped_frac"], 0.2), "");
  EXPECT_EQ(Close(m["teacher_log_ratio"], -(1.0 + 0.5 - 1.4 + 0 - 0.15) / 5), "");
}

TEST(DistillLossTest, MicroBatchesSumToTheBatch) {
  std::mt19937_64 rng(5);
  const int64_t b = 4, t = 6, k = 2;
  const at::Tensor logp = testing::Random(rng, {b, t}, -3, -0.1).requires_grad_(true);
  const at::Tensor old = logp.detach() + testing::Random(rng, {b, t}, -0.3, 0.3);
  const at::Tensor teachers = testing::Random(rng, {k, b, t}, -3, -0.1);
  const at::Tensor route = testing::Random(rng, {b, k}, 0, 1);
  const at::Tensor mask = testing::RandomMask(rng, b, t, 2);
  const DistillLossOutput whole = Loss({logp, old, teachers, route, mask});
  const double n = testing::D(mask.sum());
  double parts = 0;
  for (int64_t i = 0; i < b; i += 2) {
    auto rows = [&](const at::Tensor& x) { return x.narrow(0, i, 2); };
    parts += testing::D(Loss({rows(logp), rows(old), teachers.narrow(1, i, 2), rows(route), rows(mask), n}).loss);
  }
  EXPECT_EQ(Close(parts, testing::D(whole.loss), {1e-12, 1e-10}), "");
}

// The estimator's meaning: one position of a vocabulary of V, every token
// sampled once (sequence y = token y), each routed with the student's own
// probability pi(y) times the objective's teacher weights, on-policy
// (old = logp). Then V times the gradient of L with respect to the logits
// is the gradient of sum_j a_j KL(pi || pi_Tj), which finite differences
// of the exact KL give.
TEST(DistillLossTest, GradientIsTheWeightedReverseKlsByFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t v = 7;
  const std::vector<double> a = {0.3, 0.7};
  const at::Tensor z = testing::Random(rng, {v}, -2, 2).requires_grad_(true);
  std::vector<at::Tensor> teacher;  // log pi_Tj over the vocabulary
  for (size_t j = 0; j < a.size(); ++j) teacher.push_back(at::log_softmax(testing::Random(rng, {v}, -2, 2), 0));

  const at::Tensor logp_all = at::log_softmax(z, 0);
  const at::Tensor pi = logp_all.detach().exp();
  const at::Tensor logp = logp_all.unsqueeze(1);  // [V, 1]: sequence y, its one token y
  at::Tensor teachers = at::zeros({2, v, 1}, at::kDouble), route = at::zeros({v, 2}, at::kDouble);
  for (size_t j = 0; j < a.size(); ++j) {
    teachers.select(0, static_cast<int64_t>(j)).copy_(teacher[j].unsqueeze(1));
    route.select(1, static_cast<int64_t>(j)).copy_(pi * a[j]);
  }
  const DistillLossOutput out =
      Loss({logp, logp.detach(), teachers, route, at::ones({v, 1}, at::kBool)});
  const at::Tensor grad = testing::Grad(out.loss, z) * static_cast<double>(v);

  auto kl = [&](const at::Tensor& logits) {
    const at::Tensor lp = at::log_softmax(logits, 0);
    double sum = 0;
    for (size_t j = 0; j < a.size(); ++j) sum += a[j] * testing::D((lp.exp() * (lp - teacher[j])).sum());
    return sum;
  };
  const at::Tensor fd = testing::FiniteDifferences(kl, z);
  EXPECT_EQ(Close(grad, fd, {1e-8, 1e-6}), "");
}

// The top-k term against a direct computation: two sequences of two
// tokens, two teachers, k = 2. Seq 0 routed to teacher 0 (w 1; teacher 1's
// entries NaN), its second token padding (NaN); seq 1 to both (0.3 / 0.7).
// d = sum_j w_j sum_i exp(lq_ji) (lq_ji - lp_ji); L_k = sum d / 3 tokens.
TEST(DistillLossTest, TopKTermIsTheTruncatedForwardKlTokenMean) {
  const at::Tensor logp = T({-1.0, kNaN, -0.5, -0.7}, {2, 2});
  const at::Tensor teachers = T({-1.0, kNaN, -0.4, -0.6, kNaN, kNaN, -0.8, -0.2}, {2, 2, 2});
  const at::Tensor route = T({1.0, 0.0, 0.3, 0.7}, {2, 2});
  const at::Tensor mask = testing::Ints({1, 0, 1, 1}, {2, 2});
  // [K, B, T, k]
  const std::vector<double> lq = {-0.2, -1.9, kNaN, kNaN, -0.3, -1.5, -0.1, -2.5,    // teacher 0
                                  kNaN, kNaN, kNaN, kNaN, -0.05, -3.2, -0.4, -1.2};  // teacher 1
  const std::vector<double> lp = {-1.2, -0.6, kNaN, kNaN, -0.9, -0.8, -0.3, -1.4,
                                  kNaN, kNaN, kNaN, kNaN, -0.6, -2.0, -1.1, -0.5};
  const at::Tensor student = T(lp, {2, 2, 2, 2}).requires_grad_(true);
  DistillLossInputs in{logp, logp, teachers, route, mask};
  in.teacher_top_logprobs = T(lq, {2, 2, 2, 2});
  in.top_logprobs = student;
  const DistillLossOutput out = Loss(in);
  const double w[2][2] = {{1.0, 0.0}, {0.3, 0.7}};  // [b][j]
  const int cells[3][2] = {{0, 0}, {1, 0}, {1, 1}};  // the counted (b, t)
  double sum = 0, tmass = 0, smass = 0;
  std::vector<double> grad(16, 0.0);
  for (const auto& [b, t] : cells) {
    for (int j = 0; j < 2; ++j) {
      if (w[b][j] == 0) continue;
      for (int i = 0; i < 2; ++i) {
        const size_t at = static_cast<size_t>(((j * 2 + b) * 2 + t) * 2 + i);
        sum += w[b][j] * std::exp(lq[at]) * (lq[at] - lp[at]);
        tmass += w[b][j] * std::exp(lq[at]);
        smass += w[b][j] * std::exp(lp[at]);
        grad[at] = -w[b][j] * std::exp(lq[at]) / 3;
      }
    }
  }
  ASSERT_TRUE(out.topk_loss.defined());
  EXPECT_EQ(Close(testing::D(out.topk_loss), sum / 3), "");
  EXPECT_EQ(Close(testing::Grad(out.topk_loss, student), T(grad, {2, 2, 2, 2})), "") << "NaN never reaches a gradient";
  auto m = Metrics(out);
  EXPECT_EQ(Close(m["topk_loss"], sum / 3), "");
  EXPECT_EQ(Close(m["topk_teacher_mass"], tmass / 3), "") << "W = 1 for both sequences";
  EXPECT_EQ(Close(m["topk_student_mass"], smass / 3), "");
  EXPECT_FALSE(Loss({logp, logp, teachers, route, mask}).topk_loss.defined());
  EXPECT_EQ(Metrics(Loss({logp, logp, teachers, route, mask})).count("topk_loss"), 0u);
}

// The top-k term's meaning: at one position, with the student's
// log-probs of each teacher's top-k tokens taken from its log_softmax, the
// gradient with respect to the logits is that of sum_j a_j sum_{i in top_j}
// q_ji (log q_ji - log p_i), by finite differences: every token the teacher
// ranks high is pulled up, sampled or not.
TEST(DistillLossTest, TopKGradientIsTheTruncatedForwardKlsByFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t v = 9, top = 3;
  const std::vector<double> a = {0.3, 0.7};
  const at::Tensor z = testing::Random(rng, {v}, -2, 2).requires_grad_(true);
  std::vector<at::Tensor> teacher_top, teacher_ids;
  for (size_t j = 0; j < a.size(); ++j) {
    auto [values, ids] = at::log_softmax(testing::Random(rng, {v}, -2, 2), 0).topk(top);
    teacher_top.push_back(values);
    teacher_ids.push_back(ids);
  }
  const at::Tensor logp_all = at::log_softmax(z, 0);
  const at::Tensor lq = at::stack(teacher_top).view({2, 1, 1, top});
  const at::Tensor lp = at::stack({logp_all.index_select(0, teacher_ids[0]), logp_all.index_select(0, teacher_ids[1])})
                            .view({2, 1, 1, top});
  DistillLossInputs in{logp_all.detach().narrow(0, 0, 1).view({1, 1}), logp_all.detach().narrow(0, 0, 1).view({1, 1}),
                       at::zeros({2, 1, 1}, at::kDouble), T({a[0], a[1]}, {1, 2}), at::ones({1, 1}, at::kBool)};
  in.teacher_top_logprobs = lq;
  in.top_logprobs = lp;
  const DistillLossOutput out = Loss(in);
  const at::Tensor grad = testing::Grad(out.topk_loss, z);
  auto kl = [&](const at::Tensor& logits) {
    const at::Tensor l = at::log_softmax(logits, 0);
    double sum = 0;
    for (size_t j = 0; j < a.size(); ++j)
      sum += a[j] * testing::D((teacher_top[j].exp() * (teacher_top[j] - l.index_select(0, teacher_ids[j]))).sum());
    return sum;
  };
  EXPECT_EQ(Close(grad, testing::FiniteDifferences(kl, z), {1e-8, 1e-6}), "");
}

TEST(DistillLossTest, Bf16InputsComputeInFloat32) {
  const at::Tensor logp = T({-1.0, -2.0}, {1, 2}, at::kBFloat16).requires_grad_(true);
  const DistillLossOutput out =
      Loss({logp, logp.detach(), T({-1.5, -1.0}, {1, 1, 2}, at::kBFloat16), T({1.0}, {1, 1}, at::kBFloat16),
            at::ones({1, 2}, at::kBool)});
  EXPECT_EQ(out.loss.scalar_type(), at::kFloat);
  EXPECT_EQ(Close(testing::D(out.loss), -((-1.5 + 1.0) + (-1.0 + 2.0)) / 2), "");
}

TEST(DistillLossTest, BadInputsAreNamed) {
  const at::Tensor logp = at::zeros({2, 3}, at::kDouble), mask = at::ones({2, 3}, at::kBool);
  const at::Tensor teachers = at::zeros({1, 2, 3}, at::kDouble), route = at::ones({2, 1}, at::kDouble);
  auto error = [](const DistillLossInputs& in, const DistillLossOptions& o = {}) {
    StatusOr<DistillLossOutput> out = ComputeDistillLoss(in, o);
    EXPECT_FALSE(out.ok());
    return out.ok() ? std::string() : std::string(out.status().message());
  };
  EXPECT_NE(error({logp, logp, at::zeros({2, 3}, at::kDouble), route, mask}).find("teacher_logprobs"), std::string::npos);
  EXPECT_NE(error({logp, logp, at::zeros({1, 2, 4}, at::kDouble), route, mask}).find("teacher_logprobs"), std::string::npos);
  EXPECT_NE(error({logp, logp, teachers, at::ones({2, 2}, at::kDouble), mask}).find("route"), std::string::npos);
  EXPECT_NE(error({logp, logp, teachers, -route, mask}).find("route: expected finite weights >= 0"), std::string::npos);
  EXPECT_NE(error({logp, at::zeros({3, 2}, at::kDouble), teachers, route, mask}).find("old_logprobs"), std::string::npos);
  EXPECT_NE(error({logp, logp, teachers, route, mask}, {0.5}).find("ratio_cap"), std::string::npos);
  DistillLossInputs top{logp, logp, teachers, route, mask};
  top.teacher_top_logprobs = at::zeros({1, 2, 3, 4}, at::kDouble);
  EXPECT_NE(error(top).find("top_logprobs"), std::string::npos) << "the student's top log-probs are missing";
  top.top_logprobs = at::zeros({1, 2, 3, 5}, at::kDouble);
  EXPECT_NE(error(top).find("top_logprobs"), std::string::npos);
  top.top_logprobs = at::zeros({1, 2, 3, 4}, at::kDouble);
  top.teacher_top_logprobs = at::zeros({1, 2, 3}, at::kDouble);
  EXPECT_NE(error(top).find("teacher_top_logprobs ([K, B, T, k])"), std::string::npos);
}

}  // namespace
}  // namespace tandem::rl

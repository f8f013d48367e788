// The actor's step (grpo_trainer.h) on a tiny random model: tree packing on
// or off and any micro-batch cap give the same loss and the same update;
// bad trajectories are dropped with their reason; rewarded responses gain
// probability step after step.
#include "workers/train/grpo_trainer.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "workers/model/model_input.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/train/sft_trainer.h"

namespace tandem::train {
namespace {

// A dense 2-layer model, tied embeddings (model_test_util.h), random weights.
std::unique_ptr<model::Transformer> TinyModel(uint64_t seed) {
  auto m = model::Transformer::Create(model::testing::TinyConfig(/*moe=*/false, 2, /*tied=*/true), at::kCPU, at::kFloat);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  (*m)->InitRandom(seed, 0.2);
  return std::move(*m);
}

// The model's log-probs of a trajectory's response tokens.
std::vector<float> ResponseLogprobs(const model::Transformer& m, const Trajectory& t) {
  at::NoGradGuard no_grad;
  std::vector<int32_t> s = t.prompt;
  s.insert(s.end(), t.response.begin(), t.response.end());
  auto batch = model::BuildForestBatch({s}, {static_cast<int32_t>(t.prompt.size())}, m.config().vocab_size, m.device());
  EXPECT_TRUE(batch.ok());
  const at::Tensor lp = m.Forward(*batch).logprob.contiguous();
  return {lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel()};
}

// The "rollout's" log-probs: the model's.
void FillOldLogprobs(const model::Transformer& m, std::vector<Trajectory>& ts) {
  for (Trajectory& t : ts) t.old_logprobs = ResponseLogprobs(m, t);
}

// Two groups of four: a shared prompt each, responses that share prefixes.
std::vector<Trajectory> Batch() {
  std::vector<Trajectory> ts;
  const std::vector<std::vector<int32_t>> r0 = {{5, 6, 7}, {5, 6, 8, 9}, {10}, {11, 12}};
  const std::vector<std::vector<int32_t>> r1 = {{20, 21}, {20, 22}, {20, 21, 23}, {24}};
  const std::vector<double> w0 = {1, 0, 1, 0}, w1 = {0, 1, 1, 0};
  for (size_t i = 0; i < 4; ++i) ts.push_back({{1, 2, 3, 4}, r0[i], {}, w0[i], 0});
  for (size_t i = 0; i < 4; ++i) ts.push_back({{1, 2, 9}, r1[i], {}, w1[i], 1});
  return ts;
}

GrpoTrainerOptions Options(const std::string& algorithm = "dr_grpo") {
  GrpoTrainerOptions o;
  auto a = rl::AlgorithmRegistry::WithBuiltins().Resolve(algorithm);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  o.algorithm = *a;
  auto limited = rl::WithJobLimits(o.algorithm.config, 8);
  EXPECT_TRUE(limited.ok()) << limited.status().ToString();
  o.algorithm.config = *limited;
  o.schedule = {1e-2, 0, 1.0};
  return o;
}

// One step from the same start; *grad: the gradient it applied (clipped).
// (Not the parameters after: AdamW's first step moves every parameter by
// about lr * sign(g), so a gradient of 1e-12 one way or the other, a
// rounding difference, moves it by lr.)
StatusOr<GrpoStepStats> OneStep(GrpoTrainerOptions o, std::vector<Trajectory> ts, at::Tensor* grad) {
  auto m = TinyModel(1);
  FillOldLogprobs(*m, ts);
  TANDEM_ASSIGN_OR_RETURN(auto trainer, GrpoTrainer::Create(*m, o));
  TANDEM_ASSIGN_OR_RETURN(GrpoStepStats st, trainer->Step(ts, 0.0));
  *grad = m->parameters().grad_buffers()[0].clone();
  return st;
}

TEST(GrpoTrainer, PackingAndMicroBatchesDoNotChangeTheUpdate) {
  at::Tensor whole, flat, split;
  GrpoTrainerOptions o = Options();
  auto a = OneStep(o, Batch(), &whole);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->updated);
  EXPECT_EQ(a->trajectories, 8);
  EXPECT_EQ(a->groups, 2);
  EXPECT_EQ(a->micro_batches, 1);
  EXPECT_LT(a->packed_tokens, a->sequence_tokens) << "shared prompts are stored once";
  o.tree_packing = false;
  auto b = OneStep(o, Batch(), &flat);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->packed_tokens, b->sequence_tokens);
  o.tree_packing = true;
  o.micro_batch_tokens = 8;  // group 0's trie (12 compact tokens) splits at a fork
  auto c = OneStep(o, Batch(), &split);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->micro_batches, 2);
  for (const auto* s : {&*b, &*c}) {
    EXPECT_NEAR(s->loss.at("pg_loss"), a->loss.at("pg_loss"), 1e-6);
    EXPECT_NEAR(s->grad_norm, a->grad_norm, 1e-5 * a->grad_norm);
  }
  EXPECT_GT(a->grad_norm, 0);
  const double scale = whole.abs().max().item<double>();
  EXPECT_GT(scale, 0);
  EXPECT_LT((flat - whole).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_LT((split - whole).abs().max().item<double>(), 1e-5 * scale);
}

TEST(GrpoTrainer, TheKlTermNeedsAReferenceAndStartsAtZero) {
  std::vector<Trajectory> ts = Batch();
  auto m = TinyModel(3);
  auto ref = TinyModel(3);  // the same start
  FillOldLogprobs(*m, ts);
  GrpoTrainerOptions o = Options("grpo");  // k3, kl_coef 0.04
  auto refused = GrpoTrainer::Create(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs a reference model"), std::string::npos) << refused.status().ToString();
  o.reference = ref.get();
  auto trainer = GrpoTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto first = (*trainer)->Step(ts, 0.0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NEAR(first->loss.at("ref_kl_mean"), 0.0, 1e-6);
  auto second = (*trainer)->Step(ts, 0.5);  // the policy has moved away from the reference
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GT(second->loss.at("ref_kl_mean"), 1e-6);
}

TEST(GrpoTrainer, DropsBadTrajectoriesWithTheirReason) {
  std::vector<Trajectory> ts = Batch();
  auto m = TinyModel(2);
  FillOldLogprobs(*m, ts);
  ts[1].response.push_back(300);      // out of the vocabulary (300)
  ts[2].old_logprobs[0] = NAN;        // a NaN log-prob
  ts[5].reward = INFINITY;            // a non-finite reward
  ts[6].response.clear();             // empty
  auto trainer = GrpoTrainer::Create(*m, Options());
  ASSERT_TRUE(trainer.ok());
  auto st = (*trainer)->Step(ts, 0.0);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->dropped.size(), 4u);
  EXPECT_NE(st->dropped[0].find("trajectory 1 (group 0): token id 300 outside [0, 300)"), std::string::npos) << st->dropped[0];
  EXPECT_NE(st->dropped[1].find("non-finite old log-prob"), std::string::npos) << st->dropped[1];
  EXPECT_NE(st->dropped[2].find("non-finite reward"), std::string::npos) << st->dropped[2];
  EXPECT_NE(st->dropped[3].find("empty response"), std::string::npos) << st->dropped[3];
  EXPECT_EQ(st->trajectories, 4);
  // Groups out of order are the caller's error.
  std::vector<Trajectory> mixed = Batch();
  FillOldLogprobs(*m, mixed);
  std::swap(mixed[0], mixed[5]);
  auto bad = (*trainer)->Step(mixed, 0.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not contiguous"), std::string::npos) << bad.status().message();
}

TEST(GrpoTrainer, RewardedResponsesGainProbability) {
  auto m = TinyModel(3);
  GrpoTrainerOptions o = Options("grpo");
  auto cfg = rl::ApplyAlgorithmOptions(o.algorithm.config, {{"kl_coef", 0.0}}, "test");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  o.algorithm.config = *cfg;
  auto trainer = GrpoTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  std::vector<Trajectory> ts = Batch();
  auto mean_logp = [&](double reward) {
    double sum = 0;
    int n = 0;
    for (const Trajectory& t : ts)
      if (t.reward == reward)
        for (const float lp : t.old_logprobs) sum += lp, ++n;
    return sum / n;
  };
  FillOldLogprobs(*m, ts);
  const double good0 = mean_logp(1), bad0 = mean_logp(0);
  for (int step = 0; step < 8; ++step) {
    FillOldLogprobs(*m, ts);
    auto st = (*trainer)->Step(ts, step / 8.0);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
  }
  FillOldLogprobs(*m, ts);
  EXPECT_GT(mean_logp(1), good0 + 0.5) << "rewarded tokens gain log-probability";
  EXPECT_LT(mean_logp(0), bad0) << "unrewarded ones lose it";
}

// Multi-turn episodes (Trajectory::trained): the environment's tokens
// between the model's turns are context only.
TEST(GrpoTrainer, MaskedResponseTokensAreContextOnly) {
  auto masked = [] {
    std::vector<Trajectory> ts = Batch();
    ts[1].trained = {1, 0, 0, 1};  // response {5, 6, 8, 9}: 6 and 8 the environment's
    ts[6].trained = {1, 0, 1};
    return ts;
  };
  GrpoTrainerOptions o = Options();
  at::Tensor all_ones, none, with_mask, flat, split, garbage;
  std::vector<Trajectory> ones = Batch();
  for (Trajectory& t : ones) t.trained.assign(t.response.size(), 1);
  ASSERT_TRUE(OneStep(o, ones, &all_ones).ok());
  ASSERT_TRUE(OneStep(o, Batch(), &none).ok());
  EXPECT_TRUE(at::equal(all_ones, none)) << "a mask of ones is no mask";

  auto a = OneStep(o, masked(), &with_mask);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->response_tokens, 15) << "18 response tokens, 3 masked";
  EXPECT_GT((with_mask - none).abs().max().item<double>(), 1e-6) << "masking changes the update";
  o.tree_packing = false;
  ASSERT_TRUE(OneStep(o, masked(), &flat).ok());
  o.tree_packing = true;
  o.micro_batch_tokens = 8;
  ASSERT_TRUE(OneStep(o, masked(), &split).ok());
  o.micro_batch_tokens = 0;
  const double scale = with_mask.abs().max().item<double>();
  EXPECT_LT((flat - with_mask).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_LT((split - with_mask).abs().max().item<double>(), 1e-5 * scale);

  // The old log-probs of masked tokens are not looked at (OneStep fills
  // them; a trainer sees garbage there and gives the same update).
  auto m = TinyModel(1);
  std::vector<Trajectory> ts = masked();
  FillOldLogprobs(*m, ts);
  ts[1].old_logprobs[1] = ts[1].old_logprobs[2] = -50;
  ts[6].old_logprobs[1] = -50;
  auto trainer = GrpoTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Step(ts, 0.0).ok());
  garbage = m->parameters().grad_buffers()[0].clone();
  EXPECT_LT((garbage - with_mask).abs().max().item<double>(), 1e-6 * scale);

  // A mask of another length, or with nothing to train, is dropped.
  std::vector<Trajectory> bad = Batch();
  bad[0].trained = {1, 1};
  bad[2].trained = {0};
  auto st = OneStep(Options(), bad, &garbage);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->dropped.size(), 2u);
  EXPECT_NE(st->dropped[0].find("a trained mask of 2 for 3 response tokens"), std::string::npos) << st->dropped[0];
  EXPECT_NE(st->dropped[1].find("no trained response token"), std::string::npos) << st->dropped[1];
}

// sft on a conversation (SftExample::trained): the loss is the mean
// negative log-prob of the counted tokens only.
TEST(SftTrainer, MaskedTokensAreContextOnly) {
  auto m = TinyModel(4);
  SftTrainerOptions o;
  o.schedule = {1e-2, 0, 1.0};
  auto trainer = SftTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  SftExample a{{1, 2, 3, 5, 6, 7, 8}, 3, {1, 1, 0, 1}};
  SftExample b{{1, 2, 9, 10}, 2, {}};
  double sum = 0;
  int n = 0;
  for (const SftExample* e : {&a, &b}) {
    const Trajectory t{{e->ids.begin(), e->ids.begin() + e->prompt_tokens}, {e->ids.begin() + e->prompt_tokens, e->ids.end()}};
    const std::vector<float> lp = ResponseLogprobs(*m, t);
    for (size_t j = 0; j < lp.size(); ++j)
      if (e->trained.empty() || e->trained[j]) sum -= lp[j], ++n;
  }
  auto loss = (*trainer)->Loss({a, b});
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_EQ(n, 5);
  EXPECT_NEAR(*loss, sum / n, 1e-5);
  auto st = (*trainer)->Step({a, b}, 0.0);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->response_tokens, 5);
  SftExample bad = a;
  bad.trained = {1, 0};
  auto refused = (*trainer)->Loss({bad});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("a trained mask of 2 for 4 response tokens"), std::string::npos);
  bad.trained = {0, 0, 0, 0};
  EXPECT_FALSE((*trainer)->Loss({bad}).ok()) << "nothing to train on";
}

// MOPD (docs/mopd.md): Batch() routed over two teachers: group 0 to teacher
// 0, group 1 half to teacher 1 and half to a 0.3 / 0.7 mix; trajectory 7
// to none. Teacher j's log-probs are those of `teachers[j]`.
// The model's `k` most likely tokens at each response position of `t`:
// ids and log-probs, row-major [response * k].
std::pair<std::vector<int32_t>, std::vector<float>> ResponseTopK(const model::Transformer& m, const Trajectory& t,
                                                                 int64_t k) {
  at::NoGradGuard no_grad;
  std::vector<int32_t> s = t.prompt;
  s.insert(s.end(), t.response.begin(), t.response.end());
  auto batch = model::BuildForestBatch({s}, {static_cast<int32_t>(t.prompt.size())}, m.config().vocab_size, m.device());
  EXPECT_TRUE(batch.ok());
  const model::ForestOutput out = m.Forward(*batch, {.top_k = k});
  const at::Tensor ids = out.top_ids.to(at::kInt).contiguous(), lps = out.top_logprobs.contiguous();
  return {{ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel()},
          {lps.data_ptr<float>(), lps.data_ptr<float>() + lps.numel()}};
}

// Batch() routed to two teachers (top_k > 0: with their top-k tokens).
std::vector<Trajectory> RoutedBatch(const std::vector<const model::Transformer*>& teachers, int64_t top_k = 0) {
  std::vector<Trajectory> ts = Batch();
  const std::vector<std::vector<float>> routes = {{1, 0}, {1, 0}, {1, 0}, {1, 0}, {0, 1}, {0, 1}, {0.3f, 0.7f}, {}};
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i].route = routes[i];
    ts[i].teacher_logprobs.resize(teachers.size());
    ts[i].teacher_top_ids.resize(teachers.size());
    ts[i].teacher_top_logprobs.resize(teachers.size());
    for (size_t j = 0; j < routes[i].size(); ++j) {
      if (!(routes[i][j] > 0)) continue;
      ts[i].teacher_logprobs[j] = ResponseLogprobs(*teachers[j], ts[i]);
      if (top_k > 0)
        std::tie(ts[i].teacher_top_ids[j], ts[i].teacher_top_logprobs[j]) = ResponseTopK(*teachers[j], ts[i], top_k);
    }
  }
  return ts;
}

GrpoTrainerOptions MopdOptions(const nlohmann::json& distill) {
  GrpoTrainerOptions o = Options("mopd");
  auto cfg = rl::ApplyAlgorithmOptions(o.algorithm.config, {{"distill", distill}}, "test");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  o.algorithm.config = *cfg;
  o.teachers = 2;
  return o;
}

TEST(GrpoTrainerMopd, PackingAndMicroBatchesDoNotChangeTheUpdate) {
  auto t0 = TinyModel(11), t1 = TinyModel(12);
  GrpoTrainerOptions o = MopdOptions({{"rl_coef", 0.5}, {"distill_coef", 2.0}});
  at::Tensor whole, flat, split;
  auto a = OneStep(o, RoutedBatch({t0.get(), t1.get()}), &whole);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // 7 routed sequences: 3 + 4 + 1 + 2 + 2 + 2 + 3 response tokens.
  EXPECT_EQ(a->distill.at("tokens"), 17);
  EXPECT_GT(std::abs(a->distill.at("teacher_log_ratio")), 1e-3) << "a random student is far from random teachers";
  o.tree_packing = false;
  auto b = OneStep(o, RoutedBatch({t0.get(), t1.get()}), &flat);
  o.tree_packing = true;
  o.micro_batch_tokens = 8;
  auto c = OneStep(o, RoutedBatch({t0.get(), t1.get()}), &split);
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_GT(c->micro_batches, 2);
  for (const auto* s : {&*b, &*c}) {
    EXPECT_NEAR(s->distill.at("distill_loss"), a->distill.at("distill_loss"), 1e-5);
    EXPECT_NEAR(s->distill.at("teacher_log_ratio"), a->distill.at("teacher_log_ratio"), 1e-5);
  }
  const double scale = whole.abs().max().item<double>();
  EXPECT_LT((flat - whole).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_LT((split - whole).abs().max().item<double>(), 1e-5 * scale);
}

TEST(GrpoTrainerMopd, CoefficientsWeighTheTwoLosses) {
  auto t0 = TinyModel(11), t1 = TinyModel(12);
  // distill_coef 0: GRPO's token-mean policy loss alone.
  at::Tensor mopd_rl, grpo, distill_only, distill_twice;
  ASSERT_TRUE(OneStep(MopdOptions({{"rl_coef", 1.0}, {"distill_coef", 0.0}}), RoutedBatch({t0.get(), t1.get()}), &mopd_rl).ok());
  GrpoTrainerOptions plain = Options("mopd");
  plain.algorithm.config.distill.reset();
  ASSERT_TRUE(OneStep(plain, Batch(), &grpo).ok());
  EXPECT_LT((mopd_rl - grpo).abs().max().item<double>(), 1e-6 * grpo.abs().max().item<double>());
  // rl_coef 0: the distill loss alone, linear in its coefficient (before clipping).
  GrpoTrainerOptions d1 = MopdOptions({{"rl_coef", 0.0}, {"distill_coef", 1.0}}), d2 = d1;
  d1.optimizer.adamw.max_grad_norm = d2.optimizer.adamw.max_grad_norm = 0;  // no clipping
  d2.algorithm.config.distill->distill_coef = 2.0;
  ASSERT_TRUE(OneStep(d1, RoutedBatch({t0.get(), t1.get()}), &distill_only).ok());
  ASSERT_TRUE(OneStep(d2, RoutedBatch({t0.get(), t1.get()}), &distill_twice).ok());
  EXPECT_GT(distill_only.abs().max().item<double>(), 0);
  EXPECT_LT((distill_twice - 2 * distill_only).abs().max().item<double>(), 1e-5 * distill_twice.abs().max().item<double>());
}

TEST(GrpoTrainerMopd, TheStudentMovesTowardItsTeachers) {
  auto m = TinyModel(3), t0 = TinyModel(11), t1 = TinyModel(12);
  GrpoTrainerOptions o = MopdOptions({{"rl_coef", 0.0}, {"distill_coef", 1.0}});
  auto trainer = GrpoTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  const std::vector<Trajectory> routed = RoutedBatch({t0.get(), t1.get()});
  // On these fixed tokens the loss is stationary where the student's
  // log-prob is the routed teachers' weighted mean: the mean gap falls.
  auto gap = [&] {
    double sum = 0;
    int n = 0;
    for (const Trajectory& t : routed) {
      if (t.route.empty()) continue;
      const std::vector<float> lp = ResponseLogprobs(*m, t);
      for (size_t i = 0; i < lp.size(); ++i) {
        double s = 0, w = 0;
        for (size_t j = 0; j < t.route.size(); ++j)
          if (t.route[j] > 0) s += t.route[j] * t.teacher_logprobs[j][i], w += t.route[j];
        sum += std::abs(lp[i] - s / w), ++n;
      }
    }
    return sum / n;
  };
  const double before = gap();
  for (int step = 0; step < 10; ++step) {
    std::vector<Trajectory> ts = routed;
    FillOldLogprobs(*m, ts);
    auto st = (*trainer)->Step(ts, step / 10.0);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
  }
  EXPECT_LT(gap(), 0.5 * before) << "the student's log-probs approach the routed teachers'";
}

// The top-k term: packing and micro-batches leave its update alone (the
// extra labels follow each response token's row through the forest), and
// top_k_coef weighs it linearly.
TEST(GrpoTrainerMopd, TopKTermIsTheSameUpdatePackedFlatOrSplit) {
  auto t0 = TinyModel(11), t1 = TinyModel(12);
  GrpoTrainerOptions o = MopdOptions({{"rl_coef", 0.0}, {"distill_coef", 0.0}, {"top_k", 4}});
  o.optimizer.adamw.max_grad_norm = 0;  // no clipping: the gradient is linear in the coefficient
  at::Tensor whole, flat, split, twice;
  auto a = OneStep(o, RoutedBatch({t0.get(), t1.get()}, 4), &whole);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GT(a->distill.at("topk_loss"), 1e-3) << "a random student is far from random teachers";
  EXPECT_GT(a->distill.at("topk_teacher_mass"), a->distill.at("topk_student_mass"));
  EXPECT_LE(a->distill.at("topk_teacher_mass"), 1.0 + 1e-6);
  EXPECT_GT(whole.abs().max().item<double>(), 0) << "the top-k term alone trains";
  o.tree_packing = false;
  ASSERT_TRUE(OneStep(o, RoutedBatch({t0.get(), t1.get()}, 4), &flat).ok());
  o.tree_packing = true;
  o.micro_batch_tokens = 8;
  auto c = OneStep(o, RoutedBatch({t0.get(), t1.get()}, 4), &split);
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->micro_batches, 2);
  EXPECT_NEAR(c->distill.at("topk_loss"), a->distill.at("topk_loss"), 1e-5);
  const double scale = whole.abs().max().item<double>();
  EXPECT_LT((flat - whole).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_LT((split - whole).abs().max().item<double>(), 1e-5 * scale);
  o.micro_batch_tokens = 0;
  o.algorithm.config.distill->top_k_coef = 2.0;
  ASSERT_TRUE(OneStep(o, RoutedBatch({t0.get(), t1.get()}, 4), &twice).ok());
  EXPECT_LT((twice - 2 * whole).abs().max().item<double>(), 1e-5 * scale);
}

// With the top-k term the student's distribution moves toward its teachers'
// at every position, also on tokens it never sampled: the teachers' top-1
// token gains probability on the fixed batch.
TEST(GrpoTrainerMopd, TopKTermRaisesTheTeachersTopTokens) {
  auto m = TinyModel(3), t0 = TinyModel(11), t1 = TinyModel(12);
  GrpoTrainerOptions o = MopdOptions({{"rl_coef", 0.0}, {"distill_coef", 0.0}, {"top_k", 4}});
  auto trainer = GrpoTrainer::Create(*m, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  const std::vector<Trajectory> routed = RoutedBatch({t0.get(), t1.get()}, 4);
  auto student_mass = [&] {  // the student's mean mass on the routed teachers' top-4 tokens
    double sum = 0;
    int n = 0;
    for (const Trajectory& t : routed) {
      for (size_t j = 0; j < t.route.size(); ++j) {
        if (!(t.route[j] > 0)) continue;
        at::NoGradGuard no_grad;
        std::vector<int32_t> s = t.prompt;
        s.insert(s.end(), t.response.begin(), t.response.end());
        auto batch = model::BuildForestBatch({s}, {static_cast<int32_t>(t.prompt.size())}, m->config().vocab_size,
                                             m->device());
        EXPECT_TRUE(batch.ok());
        const at::Tensor pairs = at::arange(static_cast<int64_t>(t.response.size())).repeat_interleave(4);
        const at::Tensor ids = at::tensor(std::vector<int64_t>(t.teacher_top_ids[j].begin(), t.teacher_top_ids[j].end()));
        const model::ForestOutput out = m->Forward(*batch, {.extra_pairs = pairs, .extra_labels = ids});
        sum += out.extra_logprob.exp().sum().item<double>();
        n += static_cast<int>(t.response.size());
      }
    }
    return sum / n;
  };
  const double before = student_mass();
  for (int step = 0; step < 10; ++step) {
    std::vector<Trajectory> ts = routed;
    FillOldLogprobs(*m, ts);
    auto st = (*trainer)->Step(ts, step / 10.0);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
  }
  EXPECT_GT(student_mass(), before + 0.2) << "the student's mass moves onto its teachers' top tokens (from " << before
                                         << ")";
}

TEST(GrpoTrainerMopd, BadTopKTokensAreDroppedWithTheirReason) {
  auto m = TinyModel(2), t0 = TinyModel(11), t1 = TinyModel(12);
  std::vector<Trajectory> ts = RoutedBatch({t0.get(), t1.get()}, 2);
  FillOldLogprobs(*m, ts);
  ts[0].teacher_top_ids[0].pop_back();          // one id short
  ts[1].teacher_top_ids[0][1] = 1 << 20;        // outside the vocabulary
  ts[2].teacher_top_logprobs[0][0] = INFINITY;  // not finite
  ts[4].teacher_top_ids[0] = {-7};              // garbage where not routed: ignored
  auto trainer = GrpoTrainer::Create(*m, MopdOptions({{"top_k", 2}}));
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto st = (*trainer)->Step(ts, 0.0);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->dropped.size(), 3u);
  EXPECT_NE(st->dropped[0].find("teacher 0 lacks its top 2 tokens at each of 3 response tokens"), std::string::npos)
      << st->dropped[0];
  EXPECT_NE(st->dropped[1].find("teacher 0's top token id 1048576 outside [0, "), std::string::npos) << st->dropped[1];
  EXPECT_NE(st->dropped[2].find("a non-finite top log-prob of teacher 0"), std::string::npos) << st->dropped[2];
  EXPECT_TRUE(std::isfinite(st->distill.at("topk_loss")));
}

TEST(GrpoTrainerMopd, BadRoutesAreDroppedWithTheirReason) {
  auto m = TinyModel(2), t0 = TinyModel(11), t1 = TinyModel(12);
  std::vector<Trajectory> ts = RoutedBatch({t0.get(), t1.get()});
  FillOldLogprobs(*m, ts);
  ts[0].route = {1};                         // one weight for two teachers
  ts[1].route = {-1, 0};                     // negative
  ts[3].teacher_logprobs[0].pop_back();      // one log-prob short
  ts[4].teacher_logprobs[1][0] = NAN;        // NaN where routed
  ts[5].teacher_logprobs[0] = {NAN};         // NaN where not routed: ignored
  GrpoTrainerOptions none = MopdOptions(nlohmann::json::object());
  none.teachers = 0;
  auto no_teachers = GrpoTrainer::Create(*m, none);
  ASSERT_FALSE(no_teachers.ok());
  EXPECT_NE(no_teachers.status().message().find("needs at least one teacher"), std::string::npos)
      << no_teachers.status().ToString();
  auto trainer = GrpoTrainer::Create(*m, MopdOptions(nlohmann::json::object()));
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto st = (*trainer)->Step(ts, 0.0);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->dropped.size(), 4u);
  EXPECT_NE(st->dropped[0].find("a route of 1 weights for 2 teachers"), std::string::npos) << st->dropped[0];
  EXPECT_NE(st->dropped[1].find("route weight 0 is not a finite number >= 0"), std::string::npos) << st->dropped[1];
  EXPECT_NE(st->dropped[2].find("teacher 0 has 1 log-probs for 2 response tokens"), std::string::npos) << st->dropped[2];
  EXPECT_NE(st->dropped[3].find("a non-finite log-prob of teacher 1"), std::string::npos) << st->dropped[3];
  EXPECT_TRUE(st->updated);
  EXPECT_TRUE(std::isfinite(st->distill.at("distill_loss")));
}

}  // namespace
}  // namespace tandem::train

// The transformer on the CPU (fp32) against an independent float64
// reference (model_test_util.h): log-probs, entropy, the loss with the
// load-balancing term and every parameter's gradient, dense and MoE, tied
// and untied; a forest of tries gives what each sequence gives alone; and
// incremental decoding (from an empty cache, and after a ragged prefill)
// gives the forest's logits at every position.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <random>

#include "workers/model/tests/model_test_util.h"

namespace tandem::model::testing {
namespace {

Tolerance OutTol(const at::Tensor& ref) { return {1e-4 * Rms(ref) + 1e-6, 1e-3}; }
// The entropy of a peaked row is a sum of terms that nearly cancel: fp32
// logits leave an absolute error of about 1e-6 times the logit range.
Tolerance EntropyTol(const at::Tensor& ref) { return {1e-4 * Rms(ref) + 2e-5, 1e-3}; }
Tolerance GradTol(const at::Tensor& ref) { return {3e-4 * Rms(ref) + 1e-7, 3e-3}; }

at::Tensor RandomCoefficients(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble));
}

struct RefCase {
  bool moe;
  bool tied;
  int64_t layers;
};

class TransformerReferenceTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(TransformerReferenceTest, LogProbsLossAndEveryGradientMatchFloat64Reference) {
  const RefCase p = GetParam();
  const ModelConfig c = TinyConfig(p.moe, p.layers, p.tied);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const double temperature = 0.8;
  // Distinct first tokens: no prefix is shared, so the aux loss counts the
  // same tokens as the reference's separate runs.
  std::vector<std::vector<int32_t>> seqs;
  std::map<std::string, at::Tensor> ref;
  std::vector<RefOutput> ref_out;
  uint64_t seed = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {  // redraw when routing is near a tie
    seed = kernels::testing::FreshSeed();
    std::mt19937_64 rng(seed);
    seqs = RandomSequences(rng, {9, 5, 12}, c.vocab_size);
    for (size_t s = 0; s < seqs.size(); ++s) seqs[s][0] = static_cast<int32_t>(7 * s + 1);
    ref = RandomizeParameters(*model, seed);
    ref_out.clear();
    double margin = INFINITY;
    for (const auto& s : seqs) {
      ref_out.push_back(ReferenceForward(c, ref, s));
      margin = std::min(margin, ref_out.back().min_margin);
    }
    if (margin > 1e-4) break;
  }
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed ^ 0x5eed);
  const std::vector<int32_t> score_from{3, 1, 6};
  auto batch = BuildForestBatch(seqs, score_from, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  model->parameters().EnableGrad();
  const ForestOutput out = model->Forward(*batch, {.temperature = temperature});

  // Reference pairs in the batch's order.
  std::vector<at::Tensor> ref_lp, ref_ent;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const at::Tensor logp = at::log_softmax(ref_out[s].logits / temperature, 1);
    const at::Tensor ent = -(logp.exp() * logp).sum(1);
    for (size_t i = static_cast<size_t>(score_from[s]); i < seqs[s].size(); ++i) {
      ref_lp.push_back(logp[static_cast<int64_t>(i) - 1][seqs[s][i]]);
      ref_ent.push_back(ent[static_cast<int64_t>(i) - 1]);
    }
  }
  const at::Tensor rlp = at::stack(ref_lp), rent = at::stack(ref_ent);
  ASSERT_EQ(out.logprob.size(0), rlp.size(0));
  EXPECT_EQ(Close(out.logprob, rlp, OutTol(rlp)), "");
  EXPECT_EQ(Close(out.entropy, rent, EntropyTol(rent)), "");
  EXPECT_EQ(static_cast<int64_t>(out.router.size()), p.moe ? (p.layers >= 3 ? p.layers - 1 : p.layers) : 0);

  const at::Tensor a = RandomCoefficients(rng, rlp.size(0)), b = RandomCoefficients(rng, rlp.size(0));
  const at::Tensor aux = LoadBalancingLoss(out.router, c.num_experts);
  const at::Tensor ref_aux = ReferenceAuxLoss(ref_out, c.num_experts);
  EXPECT_EQ(Close(aux, ref_aux, OutTol(ref_aux)), "");
  if (p.moe) {
    EXPECT_GT(ref_aux.item<double>(), 0.5);  // HF's aux is about top_k when balanced
  }
  const at::Tensor loss = (a.to(at::kFloat) * out.logprob).sum() + (b.to(at::kFloat) * out.entropy).sum() +
                          c.router_aux_loss_coef * aux;
  const at::Tensor ref_loss = (a * rlp).sum() + (b * rent).sum() + c.router_aux_loss_coef * ref_aux;
  EXPECT_EQ(Close(loss, ref_loss, OutTol(ref_loss)), "");
  loss.backward();
  ref_loss.backward();
  int checked = 0;
  for (const ParameterSet::Named& n : model->parameters().named()) {
    const at::Tensor g = model->parameters().Grad(n.name);
    // An expert no token chose has no reference gradient: it must get zeros.
    const at::Tensor& leaf = ref.at(n.name);
    const at::Tensor rg = leaf.grad().defined() ? leaf.grad() : at::zeros_like(leaf);
    EXPECT_EQ(Close(g, rg, GradTol(rg)), "") << n.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(ref.size()));
}

INSTANTIATE_TEST_SUITE_P(Configs, TransformerReferenceTest,
                         ::testing::Values(RefCase{false, false, 2}, RefCase{false, true, 2}, RefCase{true, false, 3},
                                           RefCase{true, true, 2}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.moe ? "moe" : "dense") + (param_info.param.tied ? "_tied" : "") +
                                  "_" + std::to_string(param_info.param.layers) + "layers";
                         });

class TransformerForestTest : public ::testing::TestWithParam<bool> {};

// Two prompts with several responses each (two responses sharing more than
// the prompt, one response twice): the forest's log-probs, entropy and
// gradients equal the sum of each sequence run alone.
TEST_P(TransformerForestTest, TreeEqualsSeparateSequences) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  auto prompts = RandomSequences(rng, {6, 4}, c.vocab_size);
  prompts[1][0] = (prompts[0][0] + 1) % static_cast<int32_t>(c.vocab_size);
  auto responses = RandomSequences(rng, {4, 5, 3, 2, 6}, c.vocab_size);
  responses[1][0] = responses[0][0];
  responses[1][1] = responses[0][1];
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> from;
  const int owner[] = {0, 0, 0, 1, 1};
  for (int r = 0; r < 5; ++r) {
    auto s = prompts[static_cast<size_t>(owner[r])];
    s.insert(s.end(), responses[static_cast<size_t>(r)].begin(), responses[static_cast<size_t>(r)].end());
    seqs.push_back(s);
    from.push_back(static_cast<int32_t>(prompts[static_cast<size_t>(owner[r])].size()));  // fork row scored
  }
  seqs.push_back(seqs[2]);
  from.push_back(from[2]);

  auto batch = BuildForestBatch(seqs, from, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  int64_t flat = 0;
  for (const auto& s : seqs) flat += static_cast<int64_t>(s.size());
  EXPECT_LT(batch->num_tokens(), flat - 20);
  model->parameters().EnableGrad();
  const at::Tensor a = RandomCoefficients(rng, batch->num_pairs()).to(at::kFloat);
  const at::Tensor b = RandomCoefficients(rng, batch->num_pairs()).to(at::kFloat);
  const ForestOutput tree = model->Forward(*batch);
  ((a * tree.logprob).sum() + (b * tree.entropy).sum()).backward();
  const at::Tensor tree_grad = model->parameters().grad_buffers()[0].clone();

  model->parameters().ZeroGrad();
  std::vector<at::Tensor> lp, ent;
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto one = BuildForestBatch({seqs[s]}, {from[s]}, c.vocab_size, at::Device(at::kCPU));
    ASSERT_TRUE(one.ok());
    const ForestOutput o = model->Forward(*one);
    const int64_t off = batch->pair_offsets[s], m = o.logprob.size(0);
    ASSERT_EQ(m, batch->pair_offsets[s + 1] - off);
    ((a.narrow(0, off, m) * o.logprob).sum() + (b.narrow(0, off, m) * o.entropy).sum()).backward();
    lp.push_back(o.logprob.detach());
    ent.push_back(o.entropy.detach());
  }
  const Tolerance tight{1e-5, 1e-4};
  EXPECT_EQ(Close(tree.logprob, at::cat(lp), tight), "");
  EXPECT_EQ(Close(tree.entropy, at::cat(ent), tight), "");
  const at::Tensor sep_grad = model->parameters().grad_buffers()[0];
  EXPECT_EQ(Close(tree_grad, sep_grad, {5e-5 * Rms(sep_grad), 5e-4}), "");
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, TransformerForestTest, ::testing::Bool(),
                         [](const auto& param_info) { return std::string(param_info.param ? "moe" : "dense"); });

class TransformerDecodeTest : public ::testing::TestWithParam<bool> {};

// Full logits at every packed row of `batch` (test only: hidden @ head^T).
at::Tensor ForestLogits(const Transformer& m, const ForestBatch& batch) {
  ForwardOptions o;
  o.return_hidden = true;
  const ForestOutput out = m.Forward(batch, o);
  const ParameterSet& p = m.parameters();
  const at::Tensor& head = *p.Find(m.config().tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  return at::matmul(out.hidden, head.t());
}

TEST_P(TransformerDecodeTest, StepByStepEqualsForestLogits) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  const auto seqs = RandomSequences(rng, {7, 7}, c.vocab_size);
  auto batch = BuildForestBatch(seqs, {}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok());
  const at::Tensor logits = ForestLogits(*model, *batch);
  const ForestOutput scored = model->Forward(*batch);

  KvCache cache = KvCache::Empty(c, 2, at::Device(at::kCPU), at::kFloat);
  for (int64_t t = 0; t < 7; ++t) {
    const at::Tensor tokens = at::tensor(std::vector<int64_t>{seqs[0][static_cast<size_t>(t)], seqs[1][static_cast<size_t>(t)]});
    const at::Tensor pos = at::full({2}, t, at::TensorOptions().dtype(at::kLong));
    const DecodeOutput d = model->Decode(tokens, pos, cache);
    ASSERT_EQ(d.logits.sizes(), at::IntArrayRef({2, c.vocab_size}));
    for (int b = 0; b < 2; ++b) {
      const int64_t row = batch->seq_positions[static_cast<size_t>(batch->seq_offsets[static_cast<size_t>(b)] + t)];
      const at::Tensor want = logits[row];
      EXPECT_EQ(Close(d.logits[b], want, OutTol(want)), "") << "step " << t << " row " << b;
      if (t + 1 < 7) {  // the scored pair of this position
        const int64_t pair = batch->pair_offsets[static_cast<size_t>(b)] + t;
        const at::Tensor lp = at::log_softmax(d.logits[b], 0)[seqs[static_cast<size_t>(b)][static_cast<size_t>(t + 1)]];
        EXPECT_NEAR(lp.item<double>(), scored.logprob[pair].item<double>(), 1e-4) << "step " << t;
      }
    }
    cache.Append(d.new_keys, d.new_values);
  }
  EXPECT_EQ(cache.capacity(), 7);
}

// top_k: each pair's top log-probs are the best of its row's full
// log_softmax at the temperature, in the pairs' order (a shared fork row
// scored twice, rows split across LM-head chunks).
TEST_P(TransformerDecodeTest, TopLogprobsAreEachRowsBest) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  auto seqs = RandomSequences(rng, {9, 9, 4}, c.vocab_size);
  for (int i = 0; i < 5; ++i) seqs[1][static_cast<size_t>(i)] = seqs[0][static_cast<size_t>(i)];
  auto batch = BuildForestBatch(seqs, {5, 5, 2}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok());
  ForwardOptions o;
  o.temperature = 0.7;
  o.top_k = 6;
  o.chunk_rows = 3;
  const ForestOutput out = model->Forward(*batch, o);
  ASSERT_EQ(out.top_logprobs.sizes(), at::IntArrayRef({batch->num_pairs(), 6}));
  const at::Tensor logits = ForestLogits(*model, *batch);
  for (int64_t m = 0; m < batch->num_pairs(); ++m) {
    const at::Tensor row = at::log_softmax(logits[batch->pair_rows[static_cast<size_t>(m)]] / 0.7, 0);
    const auto [want, want_ids] = row.topk(6);
    EXPECT_EQ(Close(out.top_logprobs[m], want, OutTol(want)), "") << "pair " << m;
    EXPECT_NEAR(row[out.top_ids[m][0].item<int64_t>()].item<double>(), want[0].item<double>(), 1e-5);
    EXPECT_NEAR(out.logprob[m].item<double>(), row[batch->labels[m].item<int64_t>()].item<double>(), 1e-4);
  }
  o.top_k = c.vocab_size + 1;
  EXPECT_THROW(model->Forward(*batch, o), c10::Error);
}

// extra_pairs/extra_labels: more labels at the rows of some pairs give the
// row's full log_softmax at those labels, and their gradient equals that of
// the same log-probs built from the hidden states and the head by hand.
TEST_P(TransformerDecodeTest, ExtraLabelsScoreMoreTokensAtAPairsRowWithGradients) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  auto seqs = RandomSequences(rng, {9, 9, 4}, c.vocab_size);
  for (int i = 0; i < 5; ++i) seqs[1][static_cast<size_t>(i)] = seqs[0][static_cast<size_t>(i)];
  auto batch = BuildForestBatch(seqs, {5, 5, 2}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok());
  const int64_t m = batch->num_pairs();
  std::vector<int64_t> pairs, labels;
  for (int64_t e = 0; e < 3 * m; ++e) {
    pairs.push_back(e % m);
    labels.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(c.vocab_size)));
  }
  ForwardOptions o;
  o.temperature = 0.7;
  o.chunk_rows = 3;
  o.extra_pairs = at::tensor(pairs);
  o.extra_labels = at::tensor(labels);
  o.return_hidden = true;
  const at::Tensor weights = at::rand({3 * m}, at::TensorOptions().dtype(at::kFloat));
  ParameterSet& p = model->parameters();
  p.EnableGrad();
  p.ZeroGrad();
  const ForestOutput out = model->Forward(*batch, o);
  ASSERT_EQ(out.extra_logprob.sizes(), at::IntArrayRef({3 * m}));
  ASSERT_EQ(out.logprob.sizes(), at::IntArrayRef({m}));
  (out.extra_logprob * weights).sum().backward();
  const at::Tensor got = p.grad_buffers()[0].clone();

  p.ZeroGrad();
  const ForestOutput plain = model->Forward(*batch, {.temperature = 0.7, .return_hidden = true});
  EXPECT_EQ(Close(plain.logprob.detach(), out.logprob.detach(), OutTol(plain.logprob)), "");
  const at::Tensor& head = p.Leaf(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const at::Tensor rows = at::tensor(std::vector<int64_t>(batch->pair_rows.begin(), batch->pair_rows.end()));
  const at::Tensor logp = at::log_softmax(at::matmul(plain.hidden.index_select(0, rows), head.t()) / 0.7, 1);
  const at::Tensor want = logp.index_select(0, o.extra_pairs).gather(1, o.extra_labels.unsqueeze(1)).squeeze(1);
  EXPECT_EQ(Close(out.extra_logprob.detach(), want.detach(), OutTol(want)), "");
  (want * weights).sum().backward();
  const at::Tensor ref = p.grad_buffers()[0];
  EXPECT_EQ(Close(got, ref, OutTol(ref)), "");

  c10::NoGradGuard no_grad;
  o.extra_labels = at::tensor(std::vector<int64_t>(3 * static_cast<size_t>(m), c.vocab_size));
  EXPECT_THROW(model->Forward(*batch, o), c10::Error);  // a label outside the vocabulary
  o.extra_labels = at::tensor(labels);
  o.extra_pairs = at::full({3 * m}, m, at::TensorOptions().dtype(at::kLong));
  EXPECT_THROW(model->Forward(*batch, o), c10::Error);  // a pair index past the pairs
  o.extra_pairs = at::Tensor();
  EXPECT_THROW(model->Forward(*batch, o), c10::Error);  // labels without pairs
}

// Prefill two prompts of different lengths through the forest (return_kv),
// copy their K/V into one cache with garbage past each row's length, then
// decode the next token of each: the forest's logits of the longer sequences.
TEST_P(TransformerDecodeTest, RaggedPrefillThenDecode) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  const auto full = RandomSequences(rng, {5, 8}, c.vocab_size);
  const std::vector<std::vector<int32_t>> prompts{{full[0].begin(), full[0].end() - 1},
                                                  {full[1].begin(), full[1].end() - 1}};
  auto pre = BuildForestBatch(prompts, {}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(pre.ok());
  ForwardOptions kv;
  kv.return_kv = true;
  const ForestOutput po = model->Forward(*pre, kv);
  ASSERT_EQ(static_cast<int64_t>(po.keys.size()), c.num_hidden_layers);
  KvCache cache = KvCache::Empty(c, 2, at::Device(at::kCPU), at::kFloat);
  const int64_t cap = 7;
  cache.lengths = at::tensor(std::vector<int64_t>{4, 7});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    at::Tensor k = at::randn({2, cap, c.num_key_value_heads, c.head_dim}) * 100;  // garbage beyond lengths
    at::Tensor v = at::randn({2, cap, c.num_key_value_heads, c.head_dim}) * 100;
    for (int b = 0; b < 2; ++b)
      for (size_t j = 0; j < prompts[static_cast<size_t>(b)].size(); ++j) {
        const int64_t row = pre->seq_positions[static_cast<size_t>(pre->seq_offsets[static_cast<size_t>(b)]) + j];
        k[b][static_cast<int64_t>(j)].copy_(po.keys[static_cast<size_t>(l)][row]);
        v[b][static_cast<int64_t>(j)].copy_(po.values[static_cast<size_t>(l)][row]);
      }
    cache.keys[static_cast<size_t>(l)] = k;
    cache.values[static_cast<size_t>(l)] = v;
  }
  const at::Tensor tokens = at::tensor(std::vector<int64_t>{full[0][4], full[1][7]});
  const DecodeOutput d = model->Decode(tokens, cache.lengths.clone(), cache);
  auto fb = BuildForestBatch(full, {}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(fb.ok());
  const at::Tensor logits = ForestLogits(*model, *fb);
  for (int b = 0; b < 2; ++b) {
    const size_t last = full[static_cast<size_t>(b)].size() - 1;
    const at::Tensor want = logits[fb->seq_positions[static_cast<size_t>(fb->seq_offsets[static_cast<size_t>(b)]) + last]];
    EXPECT_EQ(Close(d.logits[b], want, OutTol(want)), "") << "row " << b;
  }
  cache.Append(d.new_keys, d.new_values);
  EXPECT_EQ(cache.capacity(), 8);
  EXPECT_EQ(cache.lengths[0].item<int64_t>(), 5);
  EXPECT_EQ(cache.lengths[1].item<int64_t>(), 8);
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, TransformerDecodeTest, ::testing::Bool(),
                         [](const auto& param_info) { return std::string(param_info.param ? "moe" : "dense"); });

TEST(TransformerContract, BadInputsAreErrors) {
  const ModelConfig c = TinyConfig(false, 1);
  EXPECT_FALSE(Transformer::Create(c, at::Device(at::kCPU), at::kDouble).ok());
  ModelConfig bad = c;
  bad.num_key_value_heads = 3;
  auto r = Transformer::Create(bad, at::Device(at::kCPU), at::kFloat);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_key_value_heads"), std::string::npos);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  model->InitRandom(1);
  EXPECT_EQ(BuildForestBatch({{1, 2, 300}}, {}, 300, at::Device(at::kCPU)).status().message(),
            "forest batch: sequence 0 token 2: id 300 outside the vocabulary [0, 300)");
  EXPECT_FALSE(BuildForestBatch({{1, 2}, {}}, {}, 300, at::Device(at::kCPU)).ok());
  EXPECT_FALSE(BuildForestBatch({{1, 2}}, {3}, 300, at::Device(at::kCPU)).ok());
  EXPECT_FALSE(BuildForestBatch({}, {}, 300, at::Device(at::kCPU)).ok());
  auto ok = BuildForestBatch({{1, 2}, {1, 3}}, {1, 1}, 300, at::Device(at::kCPU));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_tokens(), 3);  // the shared first token once
  EXPECT_EQ(ok->pair_rows, (std::vector<int64_t>{0, 0}));  // the fork row in both pairs
  EXPECT_EQ(ok->head_rows.numel(), 1);
  KvCache wrong = KvCache::Empty(c, 2, at::Device(at::kCPU), at::kFloat);
  EXPECT_THROW(model->Decode(at::tensor(std::vector<int64_t>{1}), at::tensor(std::vector<int64_t>{0}), wrong),
               c10::Error);
  EXPECT_THROW(model->Decode(at::tensor(std::vector<int32_t>{1, 2}), at::tensor(std::vector<int64_t>{0, 0}), wrong),
               c10::Error);
}

}  // namespace
}  // namespace tandem::model::testing

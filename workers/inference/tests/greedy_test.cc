// Greedy decoding against the model's other path: each chosen token is the
// argmax of the log-probs the packed-forest Forward gives for every
// candidate next token (all V candidates share the prefix, packed once);
// batching does not change a prompt's result; stop tokens and the token
// limit end a row; bad prompts are errors (docs/model.md, "sft").
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <random>

#include "workers/inference/greedy.h"
#include "workers/model/model_input.h"

namespace tandem::inference {
namespace {

std::unique_ptr<model::Transformer> TinyModel(uint64_t seed) {
  model::ModelConfig c = model::DefaultConfig(model::Architecture::kQwen3);
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = false;
  StatusOr<std::unique_ptr<model::Transformer>> m = model::Transformer::Create(c, at::kCPU, at::kFloat);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  (*m)->InitRandom(seed, 0.5);  // large weights: peaked, varied distributions
  return std::move(m).value();
}

std::vector<std::vector<int32_t>> RandomPrompts(std::mt19937_64& rng, size_t n, int64_t vocab) {
  std::vector<std::vector<int32_t>> out(n);
  for (auto& p : out) {
    p.resize(1 + rng() % 9);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  }
  return out;
}

TEST(Greedy, ChoosesTheForwardArgmax) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto model = TinyModel(seed);
  const int64_t v = model->config().vocab_size;
  const auto prompts = RandomPrompts(rng, 3, v);
  GreedyOptions o;
  o.max_new_tokens = 5;
  StatusOr<std::vector<std::vector<int32_t>>> out = GreedyDecode(*model, prompts, o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ((*out)[i].size(), 5u);
    std::vector<int32_t> prefix = prompts[i];
    for (const int32_t chosen : (*out)[i]) {
      // Every candidate continuation of the prefix, scored on its last token.
      std::vector<std::vector<int32_t>> seqs;
      for (int32_t c = 0; c < v; ++c) {
        seqs.push_back(prefix);
        seqs.back().push_back(c);
      }
      const std::vector<int32_t> score_from(seqs.size(), static_cast<int32_t>(prefix.size()));
      StatusOr<model::ForestBatch> batch = model::BuildForestBatch(seqs, score_from, v, at::kCPU);
      ASSERT_TRUE(batch.ok()) << batch.status().ToString();
      const at::Tensor lp = model->Forward(*batch).logprob;
      ASSERT_EQ(lp.size(0), v);
      const float* p = lp.data_ptr<float>();
      for (int32_t c = 0; c < v; ++c)
        EXPECT_LE(p[c], p[chosen] + 1e-5f) << "seed " << seed << " prompt " << i << " candidate " << c;
      prefix.push_back(chosen);
    }
  }
}

TEST(Greedy, BatchingDoesNotChangeResults) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto model = TinyModel(seed);
  const auto prompts = RandomPrompts(rng, 7, model->config().vocab_size);
  GreedyOptions all;
  all.max_new_tokens = 6;
  GreedyOptions pairs = all;
  pairs.batch_size = 2;
  const auto a = *GreedyDecode(*model, prompts, all);
  const auto b = *GreedyDecode(*model, prompts, pairs);
  ASSERT_EQ(a.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto one = *GreedyDecode(*model, {prompts[i]}, all);
    EXPECT_EQ(a[i], one[0]) << "seed " << seed << " prompt " << i;
    EXPECT_EQ(b[i], one[0]) << "seed " << seed << " prompt " << i;
  }
}

TEST(Greedy, StopTokensAndLimits) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto model = TinyModel(seed);
  const auto prompts = RandomPrompts(rng, 4, model->config().vocab_size);
  GreedyOptions o;
  o.max_new_tokens = 8;
  const auto free_run = *GreedyDecode(*model, prompts, o);
  // Stopping at the third token of prompt 0's run: that row ends before it.
  o.stop_tokens = {free_run[0][2]};
  const auto stopped = *GreedyDecode(*model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& full = free_run[i];
    const auto cut = std::find(full.begin(), full.end(), free_run[0][2]);
    EXPECT_EQ(stopped[i], std::vector<int32_t>(full.begin(), cut)) << "seed " << seed;
  }
  EXPECT_LE(stopped[0].size(), 2u);
  o.stop_tokens.clear();
  o.max_new_tokens = 1;
  const auto one_each = *GreedyDecode(*model, prompts, o);
  for (const auto& r : one_each) EXPECT_EQ(r.size(), 1u);
}

TEST(Greedy, BadPrompts) {
  auto model = TinyModel(1);
  GreedyOptions o;
  EXPECT_FALSE(GreedyDecode(*model, {{}}, o).ok());
  EXPECT_FALSE(GreedyDecode(*model, {{1, 61}}, o).ok());
  EXPECT_FALSE(GreedyDecode(*model, {{-1}}, o).ok());
  o.max_new_tokens = 200;  // past max_position_embeddings
  EXPECT_FALSE(GreedyDecode(*model, {{1, 2}}, o).ok());
  o.max_new_tokens = 0;
  EXPECT_FALSE(GreedyDecode(*model, {{1, 2}}, o).ok());
}

}  // namespace
}  // namespace tandem::inference

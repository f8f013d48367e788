// Helpers of the engine's tests (generator_test.cc, generator_memory_test.cc):
// a tiny random model, a collector of one request's updates, a greedy request.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "workers/inference/generator.h"

namespace tandem::inference::testing {

inline model::ModelConfig TinyConfig(bool moe) {
  model::ModelConfig c = model::DefaultConfig(moe ? model::Architecture::kQwen3Moe : model::Architecture::kQwen3);
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 48;
  if (moe) {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
  }
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = false;
  return c;
}

inline std::shared_ptr<model::Transformer> TinyModel(uint64_t seed, bool moe = false) {
  StatusOr<std::unique_ptr<model::Transformer>> m = model::Transformer::Create(TinyConfig(moe), at::kCPU, at::kFloat);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  (*m)->InitRandom(seed, 0.5);  // large weights: peaked, varied distributions
  return std::shared_ptr<model::Transformer>(std::move(m).value());
}

// Collects one request's updates; Wait returns its results by sample.
class Collector {
 public:
  SampleCallback Callback() {
    return [this](SampleUpdate u) {
      std::lock_guard<std::mutex> l(mu_);
      if (ids_.size() <= static_cast<size_t>(u.sample)) ids_.resize(u.sample + 1);
      for (int32_t t : u.new_ids) ids_[u.sample].push_back(t);
      if (u.finished) {
        if (results_.size() <= static_cast<size_t>(u.sample)) results_.resize(u.sample + 1);
        results_[u.sample] = *u.finished;
        ++finished_;
      }
      cv_.notify_all();
    };
  }
  std::vector<SampleResult> Wait(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, std::chrono::seconds(60), [&] { return finished_ == n; })) << "engine timed out";
    return results_;
  }
  // Waits until sample 0 streamed at least `n` tokens; false after 60 s.
  bool WaitTokens(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return !ids_.empty() && ids_[0].size() >= n; });
  }
  // Tokens streamed per sample (must equal the results' output_ids).
  std::vector<std::vector<int32_t>> streamed() {
    std::lock_guard<std::mutex> l(mu_);
    return ids_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<SampleResult> results_;
  size_t finished_ = 0;
};

inline std::unique_ptr<Generator> MakeEngine(std::shared_ptr<model::Transformer> m, int32_t blocks = 64,
                                             int64_t max_step_tokens = 64, const at::Tensor& kv_buffer = {}) {
  GeneratorOptions o;
  o.kv_buffer = kv_buffer;
  o.scheduler.num_blocks = blocks;
  o.scheduler.block_size = 4;
  o.scheduler.max_step_tokens = max_step_tokens;
  StatusOr<std::unique_ptr<Generator>> g = Generator::Create(std::move(m), o);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

inline GenerateRequest Greedy(std::vector<int32_t> prompt, int64_t max_new) {
  GenerateRequest r;
  r.input_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_new_tokens = max_new;
  r.params.ignore_eos = true;
  r.return_logprob = true;
  return r;
}

}  // namespace tandem::inference::testing

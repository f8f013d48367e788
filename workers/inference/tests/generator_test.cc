// The engine end to end on CPU (docs/inference.md "The engine"): greedy
// generation through continuous batching and the paged cache equals
// GreedyDecode over the contiguous cache, prompt by prompt, with every
// prompt submitted at once; the returned log-probs are the model's
// (Forward over prompt + output); n samples of a seeded request repeat
// exactly; abort, pause and stop tokens end samples as documented.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "workers/inference/generator.h"
#include "workers/inference/tests/engine_test_util.h"
#include "workers/inference/greedy.h"
#include "workers/model/model_input.h"
#include "workers/ops/moe_ops.h"

namespace tandem::inference {
namespace {

using testing::Collector;
using testing::Greedy;
using testing::MakeEngine;
using testing::TinyModel;

TEST(GeneratorTest, GreedyEqualsGreedyDecodeForEveryPromptSubmittedAtOnce) {
  for (bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "moe" : "dense");
    std::shared_ptr<model::Transformer> m = TinyModel(11, moe);
    std::mt19937_64 rng(5);
    std::vector<std::vector<int32_t>> prompts(12);
    for (auto& p : prompts) {
      p.resize(1 + rng() % 23);  // prompts longer than a step's token budget are prefilled in chunks
      for (int32_t& t : p) t = static_cast<int32_t>(rng() % 61);
    }
    // The last six start with the same two blocks (8 tokens): admitted in
    // one step, the later ones read the blocks the first one's row writes.
    for (size_t i = 6; i < prompts.size(); ++i) {
      std::vector<int32_t> p(prompts[0].begin(), prompts[0].begin() + std::min<size_t>(8, prompts[0].size()));
      p.resize(8, 3);
      for (size_t k = 0, n = 1 + rng() % 3; k < n; ++k) p.push_back(static_cast<int32_t>(rng() % 61));
      prompts[i] = std::move(p);
    }
    GreedyOptions go;
    go.max_new_tokens = 9;
    StatusOr<std::vector<std::vector<int32_t>>> want = GreedyDecode(*m, prompts, go);
    ASSERT_TRUE(want.ok()) << want.status().ToString();

    std::unique_ptr<Generator> g = MakeEngine(m, 64, 16);
    std::vector<Collector> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      StatusOr<RequestId> id = g->Submit(Greedy(prompts[i], 9), got[i].Callback());
      ASSERT_TRUE(id.ok()) << id.status().ToString();
    }
    int64_t shared_tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<SampleResult> r = got[i].Wait(1);
      if (i >= 6) shared_tokens += r[0].cached_tokens;
      ASSERT_EQ(r.size(), 1u);
      EXPECT_EQ(r[0].output_ids, (*want)[i]) << "prompt " << i;
      EXPECT_EQ(got[i].streamed()[0], r[0].output_ids) << "prompt " << i;
      EXPECT_EQ(r[0].finish_reason, FinishReason::kLength);
      EXPECT_EQ(r[0].prompt_tokens, static_cast<int64_t>(prompts[i].size()));
      EXPECT_EQ(r[0].completion_tokens, 9);

      // The returned log-probs are the model's: Forward over prompt+output.
      std::vector<int32_t> full = prompts[i];
      full.insert(full.end(), r[0].output_ids.begin(), r[0].output_ids.end());
      c10::NoGradGuard ng;
      StatusOr<model::ForestBatch> b =
          model::BuildForestBatch({full}, {static_cast<int32_t>(prompts[i].size())}, 61, at::kCPU);
      ASSERT_TRUE(b.ok());
      const at::Tensor lp = m->Forward(*b).logprob;
      ASSERT_EQ(r[0].output_token_logprobs.size(), 9u);
      for (int64_t j = 0; j < 9; ++j)
        EXPECT_NEAR(r[0].output_token_logprobs[j], lp[j].item<float>(), 1e-4 + 1e-4 * std::abs(lp[j].item<float>()))
            << "prompt " << i << " token " << j;
    }
    EXPECT_GE(shared_tokens, 5 * 8) << "the five prompts after the first of the six share its two blocks";
  }
}

// Decode steps through DecodeGraphs (on the CPU: the same padded static
// batch run eagerly): batches of 1..7 rows, padded up to 2 or 4 or, past 4,
// decoded eagerly, give GreedyDecode's tokens; the padding block is kept
// from the scheduler. An MoE model gets the graphs only with the experts on
// ATen's grouped GEMM (TANDEM_MOE_EXPERTS=grouped-mm: ctest runs this test
// a second time so, inference_generator_moe_graphs_test); otherwise it is
// refused them and decodes eagerly.
TEST(GeneratorTest, DecodeGraphsPadTheirBatchAndGiveTheSameTokens) {
  const bool moe_graphs = ops::DefaultMoeExpertsImpl(at::Device(at::kCUDA)) == ops::MoeExpertsImpl::kGroupedMm;
  for (bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "moe" : "dense");
    const bool eager = moe && !moe_graphs;
    std::shared_ptr<model::Transformer> m = TinyModel(12, moe);
    std::mt19937_64 rng(6);
    std::vector<std::vector<int32_t>> prompts(7);
    for (auto& p : prompts) {
      p.resize(1 + rng() % 13);
      for (int32_t& t : p) t = static_cast<int32_t>(rng() % 61);
    }
    GeneratorOptions o;
    o.scheduler.num_blocks = 65;
    o.scheduler.block_size = 4;
    o.scheduler.max_step_tokens = 32;
    o.decode_graph_batches = {4, 2};
    StatusOr<std::unique_ptr<Generator>> g = Generator::Create(m, o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ((*g)->decode_graph_batches(), eager ? std::vector<int64_t>{} : (std::vector<int64_t>{2, 4}));
    const EngineStats idle = (*g)->Stats();
    EXPECT_EQ(idle.kv_blocks_free + idle.kv_blocks_used, eager ? 65 : 64) << "the padding block is the graphs' (none eager)";
    std::vector<Collector> got(prompts.size());
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int64_t new_tokens = 3 + 2 * static_cast<int64_t>(i);  // requests end one by one: batches 7..1
      GreedyOptions go;
      go.max_new_tokens = new_tokens;
      StatusOr<std::vector<std::vector<int32_t>>> w = GreedyDecode(*m, {prompts[i]}, go);
      ASSERT_TRUE(w.ok());
      want.push_back((*w)[0]);
      ASSERT_TRUE((*g)->Submit(Greedy(prompts[i], new_tokens), got[i].Callback()).ok());
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i].Wait(1)[0].output_ids, want[i]) << "prompt " << i;
    if (eager) EXPECT_EQ((*g)->decode_graph_steps(), 0u);
    else EXPECT_GE((*g)->decode_graph_steps(), 8u) << "the steps of 4 rows and fewer";
    const EngineStats done = (*g)->Stats();
    EXPECT_GE(done.steps_total, 15u) << "the longest request's 15 tokens take a step each";
    EXPECT_EQ(done.graph_steps_total, (*g)->decode_graph_steps());
    EXPECT_GT(done.step_launch_seconds, 0.0);
    EXPECT_GT(done.step_wait_seconds + done.step_commit_seconds + done.step_plan_seconds, 0.0);
  }
}

TEST(GeneratorTest, SeededSamplesRepeatAndStreamWhatTheyReturn) {
  std::shared_ptr<model::Transformer> m = TinyModel(3);
  std::unique_ptr<Generator> g = MakeEngine(m);
  auto request = [] {
    GenerateRequest r;
    r.input_ids = {1, 2, 3, 4, 5, 6, 7};
    r.params.temperature = 1.0;
    r.params.top_k = 20;
    r.params.n = 3;
    r.params.seed = 42;
    r.params.max_new_tokens = 12;
    r.params.ignore_eos = true;
    return r;
  };
  Collector a, b;
  ASSERT_TRUE(g->Submit(request(), a.Callback()).ok());
  ASSERT_TRUE(g->Submit(request(), b.Callback()).ok());
  const std::vector<SampleResult> ra = a.Wait(3), rb = b.Wait(3);
  ASSERT_EQ(ra.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(ra[s].output_ids, rb[s].output_ids) << "sample " << s;
    EXPECT_EQ(ra[s].output_ids.size(), 12u);
    EXPECT_EQ(a.streamed()[s], ra[s].output_ids);
  }
  EXPECT_FALSE(ra[0].output_ids == ra[1].output_ids && ra[1].output_ids == ra[2].output_ids)
      << "three samples of a 61-token vocabulary drew the same 12 tokens";
}

TEST(GeneratorTest, StopTokensAbortAndPauseEndSamples) {
  std::shared_ptr<model::Transformer> m = TinyModel(7);
  std::unique_ptr<Generator> g = MakeEngine(m);
  // The greedy continuation's third token, as a stop token: the sample ends
  // on it (included, as SGLang does).
  Collector free_run;
  ASSERT_TRUE(g->Submit(Greedy({9, 8, 7}, 6), free_run.Callback()).ok());
  const std::vector<int32_t> ref = free_run.Wait(1)[0].output_ids;
  ASSERT_EQ(ref.size(), 6u);
  GenerateRequest stop = Greedy({9, 8, 7}, 6);
  stop.params.stop_token_ids = {ref[2]};
  stop.params.ignore_eos = false;
  Collector stopped;
  ASSERT_TRUE(g->Submit(stop, stopped.Callback()).ok());
  const SampleResult s = stopped.Wait(1)[0];
  EXPECT_EQ(s.finish_reason, FinishReason::kStop);
  const size_t first = static_cast<size_t>(std::find(ref.begin(), ref.end(), ref[2]) - ref.begin());
  EXPECT_EQ(s.output_ids, std::vector<int32_t>(ref.begin(), ref.begin() + first + 1));

  // Pause in_place, submit, abort one of two, pause abort ends the other.
  ASSERT_TRUE(g->Pause(PauseMode::kInPlace).ok());
  Collector x, y;
  StatusOr<RequestId> xi = g->Submit(Greedy({1, 2}, 200), x.Callback());
  ASSERT_TRUE(xi.ok());
  ASSERT_TRUE(g->Submit(Greedy({3, 4}, 200), y.Callback()).ok());
  EXPECT_TRUE(g->Stats().paused);
  g->Abort(*xi);
  EXPECT_EQ(x.Wait(1)[0].finish_reason, FinishReason::kAbort);
  ASSERT_TRUE(g->Pause(PauseMode::kAbort).ok());
  EXPECT_EQ(y.Wait(1)[0].finish_reason, FinishReason::kAbort);
  ASSERT_TRUE(g->Continue().ok());
  EXPECT_TRUE(g->FlushCache().ok());
  EXPECT_EQ(g->Stats().kv_blocks_used, 0) << "blocks leaked";
  EXPECT_TRUE(g->Health().ok());
}

TEST(GeneratorTest, OptionsThatDoNotFitAreRefused) {
  std::shared_ptr<model::Transformer> m = TinyModel(1);
  GeneratorOptions o;
  o.kv_cache_bytes = 10;
  EXPECT_EQ(Generator::Create(m, o).status().code(), StatusCode::kInvalidArgument);
  o = GeneratorOptions{};
  o.max_model_len = 100000;
  EXPECT_EQ(Generator::Create(m, o).status().code(), StatusCode::kInvalidArgument);
  std::unique_ptr<Generator> g = MakeEngine(m);
  GenerateRequest r = Greedy({1}, 4);
  r.params.stop = {"x"};
  Collector c;
  EXPECT_EQ(g->Submit(r, c.Callback()).status().code(), StatusCode::kInvalidArgument);  // no tokenizer
  for (const int32_t bad : {-1, static_cast<int32_t>(m->config().vocab_size)}) {
    const Status st = g->Submit(Greedy({1, 2, bad}, 4), c.Callback()).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.ToString().find("input_ids[2]: token id " + std::to_string(bad) + " is outside the vocabulary"),
              std::string::npos)
        << st.ToString();
  }
}

}  // namespace
}  // namespace tandem::inference

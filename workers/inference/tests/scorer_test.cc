// The teacher's engine on CPU (scorer.h): the log-probs and top-k it returns
// equal those of step-by-step decoding over the contiguous cache (another
// attention and another LM head than the forest's) at the request's
// temperature; requests queued together share one forest and its
// prefixes; a request over the token budget is split across forwards with
// the same scores; pause (abort), the memory handoff's refusals, Abort and
// LoadWeights behave as scorer.h says.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <future>
#include <memory>

#include "workers/inference/scorer.h"
#include "workers/inference/tests/engine_test_util.h"
#include "workers/model/model_input.h"

namespace tandem::inference {
namespace {

using testing::TinyModel;

// One request's outcome.
struct Pending {
  std::promise<StatusOr<ScoreResult>> promise;
  std::future<StatusOr<ScoreResult>> future = promise.get_future();
  ScoreCallback Callback() {
    return [this](StatusOr<ScoreResult> r) { promise.set_value(std::move(r)); };
  }
  StatusOr<ScoreResult> Get() {
    EXPECT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the scorer timed out";
    return future.get();
  }
};

std::unique_ptr<Scorer> MakeScorer(std::shared_ptr<model::Transformer> m, int64_t max_batch_tokens = 4096) {
  ScorerOptions o;
  o.max_batch_tokens = max_batch_tokens;
  o.chunk_rows = 5;  // several LM-head chunks per forest
  StatusOr<std::unique_ptr<Scorer>> s = Scorer::Create(std::move(m), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

ScoreRequest Request(std::vector<std::vector<int32_t>> seqs, std::vector<int32_t> from, int64_t top_k = 0,
                     double temperature = 1.0) {
  ScoreRequest r;
  r.sequences = std::move(seqs);
  r.score_from = std::move(from);
  r.top_k = top_k;
  r.temperature = temperature;
  return r;
}

// log_softmax(logits / T) at every position of `seq`, by Decode one token
// at a time: [len, V].
at::Tensor StepLogprobs(const model::Transformer& m, const std::vector<int32_t>& seq, double temperature) {
  c10::NoGradGuard no_grad;
  model::KvCache cache = model::KvCache::Empty(m.config(), 1, at::kCPU, at::kFloat);
  std::vector<at::Tensor> rows;
  for (size_t t = 0; t < seq.size(); ++t) {
    const at::Tensor tok = at::tensor(std::vector<int64_t>{seq[t]});
    const at::Tensor pos = at::tensor(std::vector<int64_t>{static_cast<int64_t>(t)});
    const model::DecodeOutput d = m.Decode(tok, pos, cache);
    rows.push_back(at::log_softmax(d.logits[0] / temperature, 0));
    cache.Append(d.new_keys, d.new_values);
  }
  return at::stack(rows);
}

// `got` is what step-by-step decoding gives for `r`'s sequences.
void ExpectScores(const model::Transformer& m, const ScoreRequest& r, const ScoreResult& got) {
  ASSERT_EQ(got.sequences.size(), r.sequences.size());
  const auto k = static_cast<size_t>(r.top_k);
  for (size_t s = 0; s < r.sequences.size(); ++s) {
    const std::vector<int32_t>& seq = r.sequences[s];
    const at::Tensor lp = StepLogprobs(m, seq, r.temperature);
    const ScoredSequence& g = got.sequences[s];
    const size_t from = static_cast<size_t>(r.score_from[s]);
    ASSERT_EQ(g.logprobs.size(), seq.size() - from) << "sequence " << s;
    ASSERT_EQ(g.top_ids.size(), g.logprobs.size() * k);
    for (size_t i = from; i < seq.size(); ++i) {
      const at::Tensor row = lp[static_cast<int64_t>(i - 1)];
      EXPECT_NEAR(g.logprobs[i - from], row[seq[i]].item<double>(), 1e-4) << "sequence " << s << " token " << i;
      if (k == 0) continue;
      const auto [want, want_ids] = row.topk(static_cast<int64_t>(k));
      for (size_t j = 0; j < k; ++j) {
        const size_t at = (i - from) * k + j;
        EXPECT_NEAR(g.top_logprobs[at], want[static_cast<int64_t>(j)].item<double>(), 1e-4);
        // The id's own log-prob is the one reported (ids may swap on a tie).
        EXPECT_NEAR(row[g.top_ids[at]].item<double>(), g.top_logprobs[at], 1e-4);
      }
    }
  }
}

TEST(ScorerTest, QueuedRequestsShareOneForestAndScoreAsStepByStepDecoding) {
  std::shared_ptr<model::Transformer> m = TinyModel(5);
  std::unique_ptr<Scorer> s = MakeScorer(m);
  // Queued while paused, so that they meet in one forest.
  ASSERT_TRUE(s->Pause(PauseMode::kRetract).ok());
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  auto with = [&](std::vector<int32_t> tail) {
    std::vector<int32_t> v = prompt;
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  const std::vector<ScoreRequest> reqs = {
      Request({with({5, 3, 5}), with({8, 9, 7, 9})}, {8, 8}, 4, 0.8),
      Request({with({5, 3, 2, 3, 8}), {7}, {2, 7, 1, 8, 2, 8}}, {8, 1, 1}, 4, 0.8),
  };
  std::vector<Pending> pending(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) ASSERT_TRUE(s->Submit(reqs[i], pending[i].Callback()).ok());
  EXPECT_EQ(s->Stats().queued_requests, 2);
  ASSERT_TRUE(s->Continue().ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    StatusOr<ScoreResult> r = pending[i].Get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectScores(*m, reqs[i], *r);
  }
  const ScoreStats st = s->Stats();
  EXPECT_EQ(st.forwards_total, 1u);
  EXPECT_EQ(st.requests_total, 2u);
  EXPECT_EQ(st.sequences_total, 5u);
  EXPECT_EQ(st.input_tokens_total, static_cast<uint64_t>(reqs[0].Tokens() + reqs[1].Tokens()));
  EXPECT_LE(st.packed_tokens_total + 2 * prompt.size(), st.input_tokens_total) << "three sequences, the prompt ran once";
  EXPECT_EQ(st.scored_tokens_total, static_cast<uint64_t>(reqs[0].ScoredTokens() + reqs[1].ScoredTokens()));
  EXPECT_EQ(st.running_requests + st.queued_requests, 0);
}

TEST(ScorerTest, ARequestOverTheTokenBudgetIsSplitAcrossForwardsWithTheSameScores) {
  std::shared_ptr<model::Transformer> m = TinyModel(6);
  std::unique_ptr<Scorer> s = MakeScorer(m, /*max_batch_tokens=*/10);
  const ScoreRequest r = Request({{1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 9, 9, 9, 9}, {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
                                 {1, 3, 2}, 3, 1.0);
  Pending p;
  ASSERT_TRUE(s->Submit(r, p.Callback()).ok());
  StatusOr<ScoreResult> got = p.Get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectScores(*m, r, *got);
  EXPECT_EQ(s->Stats().forwards_total, 3u) << "7 + 7 > 10, and 12 runs alone";
}

TEST(ScorerTest, DifferentTemperaturesRunInTheirOwnForests) {
  std::shared_ptr<model::Transformer> m = TinyModel(7);
  std::unique_ptr<Scorer> s = MakeScorer(m);
  ASSERT_TRUE(s->Pause(PauseMode::kInPlace).ok());
  const ScoreRequest hot = Request({{5, 6, 7, 8}}, {1}, 2, 2.0), cold = Request({{5, 6, 7, 8}}, {1}, 0, 0.5);
  Pending a, b;
  ASSERT_TRUE(s->Submit(hot, a.Callback()).ok());
  ASSERT_TRUE(s->Submit(cold, b.Callback()).ok());
  ASSERT_TRUE(s->Continue().ok());
  StatusOr<ScoreResult> ra = a.Get(), rb = b.Get();
  ASSERT_TRUE(ra.ok() && rb.ok());
  ExpectScores(*m, hot, *ra);
  ExpectScores(*m, cold, *rb);
  EXPECT_EQ(s->Stats().forwards_total, 2u);
}

TEST(ScorerTest, PauseAbortHandoffRefusalsAndNewWeights) {
  std::shared_ptr<model::Transformer> m = TinyModel(8);
  std::unique_ptr<Scorer> s = MakeScorer(m);
  const ScoreRequest r = Request({{1, 2, 3, 4, 5}}, {1});

  EXPECT_EQ(s->MarkAbsent(MemoryPart::kWeights).code(), StatusCode::kFailedPrecondition) << "not paused";
  EXPECT_EQ(s->MarkAbsent(MemoryPart::kKvCache).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s->Pause(PauseMode::kRetract).ok());
  Pending aborted_by_pause, aborted, kept;
  ASSERT_TRUE(s->Submit(r, aborted_by_pause.Callback()).ok());
  ASSERT_TRUE(s->Pause(PauseMode::kAbort).ok());
  EXPECT_EQ(aborted_by_pause.Get().status().code(), StatusCode::kUnavailable);
  StatusOr<RequestId> id = s->Submit(r, aborted.Callback());
  ASSERT_TRUE(id.ok());
  s->Abort(*id);
  EXPECT_EQ(aborted.Get().status().code(), StatusCode::kUnavailable);
  s->Abort(*id);  // twice, and unknown: ignored
  s->Abort(12345);

  ASSERT_TRUE(s->MarkAbsent(MemoryPart::kWeights).ok());
  ASSERT_TRUE(s->MarkAbsent(MemoryPart::kWeights).ok()) << "idempotent";
  ASSERT_TRUE(s->Submit(r, kept.Callback()).ok()) << "accepted while released: it waits";
  EXPECT_EQ(s->Continue().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->LoadWeights(2, [] { return Status::Ok(); }).code(), StatusCode::kFailedPrecondition);
  s->MarkPresent(MemoryPart::kWeights);

  // New weights (another model's) while the request waits: it is scored by them.
  std::shared_ptr<model::Transformer> other = TinyModel(9);
  ASSERT_TRUE(s->LoadWeights(5, [&] {
                 m->parameters().buffers()[0].copy_(other->parameters().buffers()[0]);
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(s->Info().weight_version, 5);
  EXPECT_EQ(s->LoadWeights(6, [] { return Internal("disk gone"); }).code(), StatusCode::kInternal);
  EXPECT_EQ(s->Info().weight_version, 5) << "a failed load keeps the version";
  ASSERT_TRUE(s->Continue().ok());
  StatusOr<ScoreResult> got = kept.Get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->weight_version, 5);
  ExpectScores(*other, r, *got);
  EXPECT_TRUE(s->Health().ok());
}

TEST(ScorerTest, WhatWaitsAtShutdownIsToldSo) {
  std::shared_ptr<model::Transformer> m = TinyModel(10);
  std::unique_ptr<Scorer> s = MakeScorer(m);
  ASSERT_TRUE(s->Pause(PauseMode::kRetract).ok());
  Pending p;
  ASSERT_TRUE(s->Submit(Request({{1, 2, 3}}, {1}), p.Callback()).ok());
  s.reset();
  EXPECT_EQ(p.Get().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tandem::inference

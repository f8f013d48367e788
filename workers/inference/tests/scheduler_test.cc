// The scheduler's edges (scheduler.h): options and requests refused with a
// message naming the field, the exact plan of a forked prompt (block
// tables, slots, copy on write), Commit's checks, Discard, stop strings,
// seeds and weight versions. The scenarios are in scheduler_scenarios_test.
#include <gtest/gtest.h>

#include "workers/inference/tests/scheduler_driver.h"

namespace tandem::inference {
namespace {

using scheduler_testing::MakeRequest;

SchedulerOptions Small() {
  SchedulerOptions o;
  o.num_blocks = 8;
  o.block_size = 4;
  o.max_running = 4;
  o.max_step_tokens = 32;
  o.max_waiting = 4;
  o.max_model_len = 32;
  return o;
}

std::unique_ptr<Scheduler> Make(const SchedulerOptions& o) {
  auto s = Scheduler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(Scheduler, OptionsOutOfRangeNameTheOption) {
  struct Case {
    void (*edit)(SchedulerOptions&);
    const char* name;
  } cases[] = {
      {[](SchedulerOptions& o) { o.num_blocks = 0; }, "num_blocks"},
      {[](SchedulerOptions& o) { o.block_size = 0; }, "block_size"},
      {[](SchedulerOptions& o) { o.max_running = 0; }, "max_running"},
      {[](SchedulerOptions& o) { o.max_step_tokens = 0; }, "max_step_tokens"},
      {[](SchedulerOptions& o) { o.max_waiting = 0; }, "max_waiting"},
      {[](SchedulerOptions& o) { o.max_model_len = 0; }, "max_model_len"},
      {[](SchedulerOptions& o) { o.max_model_len = 33; }, "num_blocks"},  // 9 blocks > 8
  };
  for (const Case& c : cases) {
    SchedulerOptions o = Small();
    c.edit(o);
    auto s = Scheduler::Create(o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.name), std::string::npos) << s.status().message();
  }
}

TEST(Scheduler, BadRequestsAreRefusedAndNothingIsQueued) {
  auto s = Make(Small());
  struct Case {
    GenerateRequest r;
    const char* field;
  } cases[] = {
      {MakeRequest({}, 4), "input_ids"},
      {MakeRequest({1, 2}, 4, 0), "sampling_params.n"},
      {MakeRequest({1, 2}, 4, 5), "sampling_params.n"},
      {MakeRequest(std::vector<int32_t>(30, 3), 3), "input_ids"},
  };
  for (const Case& c : cases) {
    auto id = s->Add(c.r);
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(c.field), std::string::npos) << id.status().message();
  }
  EXPECT_EQ(s->stats().waiting_requests, 0);
  EXPECT_TRUE(s->Plan()->empty());
}

TEST(Scheduler, PauseModesParseBySGLangsNames) {
  for (const PauseMode m : {PauseMode::kAbort, PauseMode::kRetract, PauseMode::kInPlace}) {
    auto back = ParsePauseMode(PauseModeName(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(ParsePauseMode("inplace").status().code(), StatusCode::kInvalidArgument);
}

// A 6-token prompt, n = 2, blocks of 4: the exact plans of the first two steps.
TEST(Scheduler, ForkedPromptPlansExactly) {
  auto s = Make(Small());
  ASSERT_TRUE(s->Add(MakeRequest({10, 11, 12, 13, 14, 15}, 5, 2)).ok());
  StatusOr<StepPlan> p1 = s->Plan();
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->rows.size(), 1U);
  EXPECT_EQ(p1->tokens, (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(p1->positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(p1->slot_mapping, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));  // blocks 0 and 1
  EXPECT_EQ(p1->block_table_width, 2);
  EXPECT_EQ(p1->block_table, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p1->context_lens, (std::vector<int32_t>{6}));
  EXPECT_EQ(p1->q_lens, (std::vector<int32_t>{6}));
  EXPECT_TRUE(p1->copies.empty());
  ASSERT_EQ(p1->samples.size(), 2U);  // both samples draw from the prompt's row
  EXPECT_EQ(p1->samples[0].row, 0);
  EXPECT_EQ(p1->samples[1].row, 0);
  EXPECT_EQ(p1->samples[0].spec.sample_index, 0);
  EXPECT_EQ(p1->samples[1].spec.sample_index, 1);
  EXPECT_EQ(p1->samples[1].spec.step, 0);
  EXPECT_EQ(p1->samples[0].spec.seed, p1->samples[1].spec.seed);
  auto e1 = s->Commit(*p1, {{20, -0.5F}, {21, -1.5F}});
  ASSERT_TRUE(e1.ok());
  ASSERT_EQ(e1->size(), 2U);
  EXPECT_EQ((*e1)[1].token, 21);
  EXPECT_EQ((*e1)[1].sample_index, 1);
  EXPECT_EQ(s->stats().running_sequences, 2);
  EXPECT_EQ(s->stats().cached_blocks, 1);  // block 0 filled

  StatusOr<StepPlan> p2 = s->Plan();
  ASSERT_TRUE(p2.ok());
  ASSERT_EQ(p2->rows.size(), 2U);
  EXPECT_EQ(p2->tokens, (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(p2->positions, (std::vector<int64_t>{6, 6}));
  // Sample 0 writes first into the shared block 1: it gets block 2, a copy.
  EXPECT_EQ(p2->copies, (std::vector<BlockCopy>{{1, 2}}));
  EXPECT_EQ(p2->block_table, (std::vector<int32_t>{0, 2, 0, 1}));
  EXPECT_EQ(p2->slot_mapping, (std::vector<int64_t>{2 * 4 + 2, 1 * 4 + 2}));
  EXPECT_EQ(p2->context_lens, (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(p2->samples[1].spec.step, 1);
  ASSERT_TRUE(s->Commit(*p2, {{30, 0.0F}, {31, 0.0F}}).ok());
  EXPECT_TRUE(s->CheckConsistency().ok());
}

TEST(Scheduler, CommitChecksThePlanAndTheTokens) {
  auto s = Make(Small());
  ASSERT_TRUE(s->Add(MakeRequest({1, 2, 3}, 4)).ok());
  StatusOr<StepPlan> old = s->Plan();
  StatusOr<StepPlan> p = s->Plan();  // replanning supersedes the first
  ASSERT_TRUE(old.ok() && p.ok());
  EXPECT_EQ(s->Commit(*old, {{5, 0.0F}}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Commit(*p, {}).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->Commit(*p, {{5, 0.0F}}).ok());
  EXPECT_EQ(s->Commit(*p, {{5, 0.0F}}).status().code(), StatusCode::kFailedPrecondition);  // twice
  EXPECT_TRUE(s->CheckConsistency().ok());
}

TEST(Scheduler, DiscardRetractsAndTheStepRunsAgain) {
  auto s = Make(Small());
  ASSERT_TRUE(s->Add(MakeRequest({1, 2, 3, 4, 5}, 4)).ok());
  StatusOr<StepPlan> p = s->Plan();
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(s->Discard(*p).ok());
  EXPECT_EQ(s->free_blocks(), 8);
  EXPECT_EQ(s->stats().retractions, 1);
  StatusOr<StepPlan> again = s->Plan();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, p->tokens);  // the same step, maybe in other blocks
  EXPECT_EQ(again->samples.size(), 1U);
  EXPECT_EQ(s->free_blocks(), 6);
}

TEST(Scheduler, StopStringsFinishThroughFinishSequence) {
  auto s = Make(Small());
  ASSERT_TRUE(s->Add(MakeRequest({1, 2, 3}, 10)).ok());
  StatusOr<StepPlan> p = s->Plan();
  ASSERT_TRUE(p.ok());
  auto e = s->Commit(*p, {{9, -0.25F}});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(s->FinishSequence((*e)[0].sequence, FinishReason::kStop, "</s>").ok());
  EXPECT_EQ(s->FinishSequence((*e)[0].sequence, FinishReason::kStop, "").code(), StatusCode::kNotFound);
  std::vector<FinishedRequest> done = s->TakeFinished();
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].samples[0].output_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(done[0].samples[0].output_token_logprobs, (std::vector<float>{-0.25F}));
  EXPECT_EQ(done[0].samples[0].matched_stop, "</s>");
  EXPECT_EQ(s->Abort(done[0].id).code(), StatusCode::kNotFound);
  EXPECT_EQ(s->free_blocks() + s->stats().cached_blocks, 8);
}

TEST(Scheduler, ASampleEndedBeforeItForksIsLeftOut) {
  auto s = Make(Small());
  ASSERT_TRUE(s->Add(MakeRequest({1, 2, 3}, 2, 3)).ok());  // sequences 1 (sample 0), 2, 3
  ASSERT_TRUE(s->FinishSequence(2, FinishReason::kAbort, "").ok());
  for (int step = 0; step < 2; ++step) {
    StatusOr<StepPlan> p = s->Plan();
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->samples.size(), 2U);
    ASSERT_TRUE(s->Commit(*p, std::vector<SampledToken>(2, {4, 0.0F})).ok());
    ASSERT_TRUE(s->CheckConsistency().ok());
  }
  std::vector<FinishedRequest> done = s->TakeFinished();
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].samples[1].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(done[0].samples[1].output_ids.empty());
  EXPECT_EQ(done[0].samples[2].output_ids, (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(s->free_blocks() + s->stats().cached_blocks, 8);
}

TEST(Scheduler, UnseededRequestsGetDistinctReproducibleSeedsAndWeightVersions) {
  auto seeds = [](uint64_t base) {
    SchedulerOptions o = Small();
    o.seed = base;
    auto s = Make(o);
    s->set_weight_version(3);
    for (int i = 0; i < 2; ++i) {
      GenerateRequest r = MakeRequest({1, 2}, 1);
      r.params.seed.reset();
      EXPECT_TRUE(s->Add(r).ok());
    }
    StatusOr<StepPlan> p = s->Plan();
    EXPECT_TRUE(p.ok());
    std::vector<uint64_t> out;
    for (const PlannedSample& ps : p->samples) out.push_back(ps.spec.seed);
    EXPECT_TRUE(s->Commit(*p, std::vector<SampledToken>(p->samples.size())).ok());
    for (const FinishedRequest& f : s->TakeFinished()) EXPECT_EQ(f.samples[0].weight_version, 3);
    return out;
  };
  const std::vector<uint64_t> a = seeds(1), b = seeds(1), c = seeds(2);
  ASSERT_EQ(a.size(), 2U);
  EXPECT_NE(a[0], a[1]);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace tandem::inference

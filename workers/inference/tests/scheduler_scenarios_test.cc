// The scheduler (scheduler.h) as a table of scenarios run by the fake
// generator loop (scheduler_driver.h). Every scenario also checks, each
// step, the plan's layout, the budget and batch bounds, every row's
// context read back through its block table and the reference counts; and
// at the end, that every sample equals its run-alone reference (a prefix of
// it when aborted) and that every block is free again.
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <set>

#include "workers/inference/tests/scheduler_driver.h"

namespace tandem::inference {
namespace {

using scheduler_testing::Action;
using scheduler_testing::Arrival;
using scheduler_testing::MakeRequest;
using scheduler_testing::Prompt;
using scheduler_testing::Reference;
using scheduler_testing::Report;

struct Scenario {
  std::string name;
  SchedulerOptions options;
  std::vector<Arrival> arrivals;
  std::vector<Action> actions;
  std::function<void(const Report&)> check;
};

SchedulerOptions Opts(int32_t blocks, int32_t bs, int64_t running, int64_t budget, int64_t len = 64,
                      int64_t waiting = 64) {
  SchedulerOptions o;
  o.num_blocks = blocks;
  o.block_size = bs;
  o.max_running = running;
  o.max_step_tokens = budget;
  o.max_model_len = len;
  o.max_waiting = waiting;
  return o;
}

Action PauseAt(int64_t step, PauseMode mode) { return {step, Action::kPause, mode, 0}; }
Action ContinueAt(int64_t step) { return {step, Action::kContinue, PauseMode::kInPlace, 0}; }
Action AbortAt(int64_t step, size_t arrival) { return {step, Action::kAbort, PauseMode::kInPlace, arrival}; }
Action FlushAt(int64_t step) { return {step, Action::kFlush, PauseMode::kInPlace, 0}; }

int64_t Sum(const Report& r, int64_t scheduler_testing::StepRecord::*field) {
  int64_t s = 0;
  for (const auto& st : r.steps) s += st.*field;
  return s;
}

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> v;
  v.push_back({"one_request_prefills_then_decodes_to_length", Opts(16, 4, 8, 64),
               {{0, MakeRequest(Prompt(5, 1), 7)}}, {}, [](const Report& r) {
                 ASSERT_EQ(r.results.at(0)[0].output_ids.size(), 7U);
                 EXPECT_EQ(r.results.at(0)[0].finish_reason, FinishReason::kLength);
                 EXPECT_EQ(r.steps.at(0).tokens, 5);
                 for (size_t i = 1; i < 7; ++i) EXPECT_EQ(r.steps.at(i).tokens, 1);
               }});
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 6; ++i) a.push_back({0, MakeRequest(Prompt(4, i), 5)});
    v.push_back({"max_running_bounds_the_batch", Opts(32, 4, 2, 64), a, {}, [](const Report& r) {
                   int64_t most = 0;
                   for (const auto& st : r.steps) most = std::max(most, st.stats.running_sequences);
                   EXPECT_EQ(most, 2);
                 }});
  }
  v.push_back({"token_budget_chunks_a_long_prefill", Opts(16, 4, 8, 8),
               {{0, MakeRequest(Prompt(30, 2), 4)}}, {}, [](const Report& r) {
                 const std::vector<int64_t> want{8, 8, 8, 6, 1, 1, 1};
                 ASSERT_GE(r.steps.size(), want.size());
                 for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.steps[i].tokens, want[i]) << "step " << i;
               }});
  v.push_back({"decodes_go_before_prefill_chunks", Opts(32, 4, 8, 6),
               {{0, MakeRequest(Prompt(3, 3), 12)}, {2, MakeRequest(Prompt(20, 4), 3)}}, {}, [](const Report& r) {
                 for (size_t i = 2; i <= 5; ++i) {
                   EXPECT_EQ(r.steps.at(i).rows, 2) << "step " << i;
                   EXPECT_EQ(r.steps.at(i).tokens, 6) << "step " << i;
                 }
               }});
  v.push_back({"samples_prefill_once_and_copy_the_partial_block_on_write", Opts(32, 4, 8, 64),
               {{0, MakeRequest(Prompt(10, 5), 6, 4)}}, {}, [](const Report& r) {
                 EXPECT_EQ(Sum(r, &scheduler_testing::StepRecord::prompt_tokens_fed), 10);
                 EXPECT_EQ(r.steps.at(1).copies, 3);  // 4 writers of one block: 3 copies, 1 in place
                 EXPECT_EQ(r.steps.at(1).rows, 4);
                 std::set<std::vector<int32_t>> distinct;
                 for (const SampleResult& s : r.results.at(0)) distinct.insert(s.output_ids);
                 EXPECT_GE(distinct.size(), 2U);
               }});
  v.push_back({"samples_of_a_block_aligned_prompt_copy_nothing", Opts(32, 4, 8, 64),
               {{0, MakeRequest(Prompt(8, 6), 6, 3)}}, {}, [](const Report& r) {
                 EXPECT_EQ(Sum(r, &scheduler_testing::StepRecord::copies), 0);
                 EXPECT_EQ(Sum(r, &scheduler_testing::StepRecord::prompt_tokens_fed), 8);
               }});
  v.push_back({"one_token_outputs_of_forked_samples", Opts(16, 4, 8, 64),
               {{0, MakeRequest(Prompt(6, 7), 1, 3)}}, {}, [](const Report& r) {
                 for (const SampleResult& s : r.results.at(0)) EXPECT_EQ(s.output_ids.size(), 1U);
               }});
  v.push_back({"one_token_prompt", Opts(16, 4, 8, 64), {{0, MakeRequest(Prompt(1, 8), 9, 2)}}, {}, nullptr});
  {
    const std::vector<int32_t> a = Prompt(16, 9);
    std::vector<int32_t> b(a.begin(), a.begin() + 12);
    for (int32_t t : Prompt(5, 10)) b.push_back(t);
    auto make = [&](bool cache) {
      SchedulerOptions o = Opts(32, 4, 8, 64);
      o.prefix_cache = cache;
      return Scenario{cache ? "prefix_cache_serves_whole_shared_blocks" : "prefix_cache_off_serves_nothing", o,
                      {{0, MakeRequest(a, 2)}, {10, MakeRequest(b, 3)}, {12, MakeRequest(a, 3, 2)}}, {},
                      [cache](const Report& r) {
                        EXPECT_EQ(r.results.at(0)[0].cached_tokens, 0);
                        EXPECT_EQ(r.results.at(1)[0].cached_tokens, cache ? 12 : 0);
                        // The same prompt again: all but the block of its last token.
                        EXPECT_EQ(r.results.at(2)[1].cached_tokens, cache ? 12 : 0);
                        EXPECT_EQ(r.steps.at(10).tokens, cache ? 5 : 17);
                        EXPECT_EQ(r.final_stats.prefix_hit_tokens, cache ? 24 : 0);
                      }};
    };
    v.push_back(make(true));
    v.push_back(make(false));
  }
  {
    // Four prompts of one 12-token (3-block) prefix, arriving together: the
    // first row writes the prefix's blocks and the three others share them
    // in the same step (17 + 3 x 5 tokens instead of 4 x 17).
    const std::vector<int32_t> shared = Prompt(12, 40);
    std::vector<Arrival> a;
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> p = shared;
      for (int32_t t : Prompt(5, 41 + i)) p.push_back(t);
      a.push_back({0, MakeRequest(p, 3, 1 + i % 2)});
    }
    auto make = [&](bool cache) {
      SchedulerOptions o = Opts(64, 4, 8, 128);
      o.prefix_cache = cache;
      return Scenario{cache ? "prompts_arriving_together_prefill_their_common_blocks_once"
                            : "prompts_arriving_together_without_the_cache_prefill_each",
                      o, a, {}, [cache](const Report& r) {
                        EXPECT_EQ(r.steps.at(0).rows, 4);
                        EXPECT_EQ(r.steps.at(0).tokens, cache ? 17 + 3 * 5 : 4 * 17);
                        EXPECT_EQ(r.results.at(0)[0].cached_tokens, 0);
                        for (size_t i = 1; i < 4; ++i) EXPECT_EQ(r.results.at(i)[0].cached_tokens, cache ? 12 : 0) << i;
                        EXPECT_EQ(r.final_stats.prefix_hit_tokens, cache ? 3 * 12 : 0);
                      }};
    };
    v.push_back(make(true));
    v.push_back(make(false));
  }
  {
    // A chunked prefill shares the blocks it completes in a step: the
    // leader's 17 tokens go 10 then 7; in step 1 its chunk completes blocks
    // 2 and 3, and the second prompt (the same 12 tokens, then others)
    // takes blocks 0-1 from the cache and block 2 from the leader's row.
    const std::vector<int32_t> shared = Prompt(12, 50);
    std::vector<int32_t> first = shared, second = shared;
    for (int32_t t : Prompt(5, 51)) first.push_back(t);
    for (int32_t t : Prompt(5, 52)) second.push_back(t);
    v.push_back({"a_prefill_chunk_shares_the_blocks_it_completes", Opts(64, 4, 8, 10),
                 {{0, MakeRequest(first, 2)}, {0, MakeRequest(second, 2)}}, {}, [](const Report& r) {
                   EXPECT_EQ(r.steps.at(0).tokens, 10);
                   EXPECT_EQ(r.steps.at(0).rows, 1);
                   EXPECT_EQ(r.steps.at(1).rows, 2);
                   EXPECT_EQ(r.steps.at(1).tokens, 7 + 3);  // the second starts at token 12
                   EXPECT_EQ(r.results.at(1)[0].cached_tokens, 12);
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 10; ++i) a.push_back({3 * i, MakeRequest(Prompt(16, 20 + i), 4)});
    v.push_back({"a_dry_pool_evicts_cached_blocks", Opts(12, 4, 8, 64, 40), a, {}, [](const Report& r) {
                   int64_t most = 0;
                   for (const auto& st : r.steps) most = std::max(most, st.stats.cached_blocks);
                   EXPECT_GE(most, 8);
                   EXPECT_EQ(r.final_stats.retractions, 0);
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 3; ++i) a.push_back({0, MakeRequest(Prompt(6, 30 + i), 30)});
    v.push_back({"out_of_blocks_retracts_the_youngest_which_resumes", Opts(10, 4, 4, 64, 40), a, {},
                 [](const Report& r) {
                   EXPECT_GT(r.final_stats.retractions, 0);
                   EXPECT_LE(r.finished_at.at(0), r.finished_at.at(1));
                   EXPECT_LE(r.finished_at.at(1), r.finished_at.at(2));
                 }});
  }
  v.push_back({"retracted_samples_resume", Opts(10, 4, 4, 64, 32), {{0, MakeRequest(Prompt(5, 40), 20, 3)}}, {},
               [](const Report& r) { EXPECT_GT(r.final_stats.retractions, 0); }});
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 3; ++i) a.push_back({0, MakeRequest(Prompt(5, 50 + i), 20)});
    a.push_back({6, MakeRequest(Prompt(5, 60), 4)});
    v.push_back({"pause_abort_ends_every_request", Opts(32, 4, 8, 64), a, {PauseAt(3, PauseMode::kAbort), ContinueAt(5)},
                 [](const Report& r) {
                   for (size_t i = 0; i < 3; ++i) {
                     EXPECT_EQ(r.results.at(i)[0].finish_reason, FinishReason::kAbort);
                     EXPECT_EQ(r.results.at(i)[0].output_ids.size(), 3U);
                     EXPECT_EQ(r.finished_at.at(i), 3);
                   }
                   EXPECT_EQ(r.results.at(3)[0].finish_reason, FinishReason::kLength);
                   EXPECT_EQ(r.steps.at(3).stats.free_blocks + r.steps.at(3).stats.cached_blocks, 32);
                   EXPECT_EQ(r.steps.at(4).tokens, 0);
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 3; ++i) a.push_back({0, MakeRequest(Prompt(7, 70 + i), 12, i == 1 ? 2 : 1)});
    v.push_back({"pause_retract_drops_the_kv_and_resumes_unchanged", Opts(32, 4, 8, 64), a,
                 {PauseAt(4, PauseMode::kRetract), ContinueAt(7)}, [](const Report& r) {
                   EXPECT_EQ(r.steps.at(4).stats.running_sequences, 0);
                   EXPECT_EQ(r.steps.at(4).stats.free_blocks + r.steps.at(4).stats.cached_blocks, 32);
                   EXPECT_EQ(r.steps.at(4).stats.retractions, 4);
                   for (size_t i = 4; i < 7; ++i) EXPECT_EQ(r.steps.at(i).tokens, 0);
                   EXPECT_GT(r.steps.at(7).tokens, 4);  // re-prefilled (the cache serves whole blocks)
                 }});
    v.push_back({"pause_in_place_keeps_everything", Opts(32, 4, 8, 64), a,
                 {PauseAt(4, PauseMode::kInPlace), ContinueAt(7)}, [](const Report& r) {
                   EXPECT_EQ(r.final_stats.retractions, 0);
                   for (size_t i = 4; i < 7; ++i) {
                     EXPECT_EQ(r.steps.at(i).tokens, 0);
                     EXPECT_EQ(r.steps.at(i).stats.free_blocks, r.steps.at(3).stats.free_blocks);
                     EXPECT_EQ(r.steps.at(i).stats.running_sequences, 4);
                   }
                   EXPECT_EQ(r.steps.at(7).tokens, 4);  // straight back to decoding
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 3; ++i) a.push_back({0, MakeRequest(Prompt(5, 80 + i), 10, 2)});
    v.push_back({"abort_ends_one_request", Opts(32, 4, 8, 64), a, {AbortAt(3, 1)}, [](const Report& r) {
                   for (size_t i = 0; i < 3; ++i)
                     for (const SampleResult& s : r.results.at(i))
                       EXPECT_EQ(s.finish_reason == FinishReason::kAbort, i == 1) << "arrival " << i;
                 }});
    v.push_back({"abort_a_request_still_waiting", Opts(32, 4, 2, 64), a, {AbortAt(1, 2)}, [](const Report& r) {
                   for (const SampleResult& s : r.results.at(2)) {
                     EXPECT_EQ(s.finish_reason, FinishReason::kAbort);
                     EXPECT_TRUE(s.output_ids.empty());
                     EXPECT_EQ(s.prompt_tokens, 5);
                   }
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 4; ++i) a.push_back({0, MakeRequest(Prompt(5, 90 + i), 3)});
    a.push_back({1, MakeRequest(Prompt(5, 99), 3)});
    v.push_back({"a_full_queue_answers_resource_exhausted", Opts(32, 4, 8, 64, 64, 2), a, {}, [](const Report& r) {
                   EXPECT_TRUE(r.added[0].ok() && r.added[1].ok());
                   EXPECT_EQ(r.added[2].code(), StatusCode::kResourceExhausted);
                   EXPECT_EQ(r.added[3].code(), StatusCode::kResourceExhausted);
                   EXPECT_TRUE(r.added[4].ok());  // the first two started at step 0
                 }});
  }
  {
    SchedulerOptions o = Opts(32, 4, 8, 64);
    GenerateRequest req = MakeRequest(Prompt(6, 100), 10);
    const int32_t third = Reference(req, 0, o).output_ids.at(2);
    GenerateRequest stop = req;
    stop.params.stop_token_ids = {third};
    v.push_back({"a_stop_token_ends_a_sample", o, {{0, stop}}, {}, [third](const Report& r) {
                   const SampleResult& s = r.results.at(0)[0];
                   EXPECT_EQ(s.finish_reason, FinishReason::kStop);
                   EXPECT_LE(s.output_ids.size(), 3U);
                   EXPECT_EQ(s.output_ids.back(), third);
                   EXPECT_EQ(s.matched_stop, std::to_string(third));
                 }});
    SchedulerOptions eos = o;
    eos.eos_token_ids = {third};
    GenerateRequest ignore = req;
    ignore.params.ignore_eos = true;
    v.push_back({"eos_stops_unless_ignore_eos", eos, {{0, req}, {0, ignore}}, {}, [](const Report& r) {
                   EXPECT_EQ(r.results.at(0)[0].finish_reason, FinishReason::kStop);
                   EXPECT_EQ(r.results.at(1)[0].finish_reason, FinishReason::kLength);
                   EXPECT_EQ(r.results.at(1)[0].output_ids.size(), 10U);
                 }});
  }
  {
    std::vector<Arrival> a;
    for (int i = 0; i < 6; ++i) a.push_back({i, MakeRequest(Prompt(12, 110 + i % 2), 6, 2)});
    v.push_back({"flush_while_running", Opts(32, 4, 8, 64), a, {FlushAt(2), FlushAt(4)}, nullptr});
  }
  // Random mixes, fresh each run (the seed is in the test's output).
  for (const int32_t bs : {1, 4, 16}) {
    const uint64_t seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    std::vector<Arrival> a;
    const std::vector<int32_t> shared = Prompt(24, 120);
    for (int i = 0; i < 24; ++i) {
      std::vector<int32_t> p(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(rng() % 20));
      for (int32_t t : Prompt(static_cast<int32_t>(1 + rng() % 12), 130 + i)) p.push_back(t);
      GenerateRequest r = MakeRequest(p, static_cast<int64_t>(1 + rng() % 24), static_cast<int64_t>(1 + rng() % 3),
                                      rng());
      r.params.stop_token_ids = {static_cast<int32_t>(rng() % scheduler_testing::kFakeVocab)};
      r.return_logprob = rng() % 2 == 0;
      a.push_back({static_cast<int64_t>(rng() % 40), r});
    }
    std::vector<Action> act;
    const int64_t pause = 5 + static_cast<int64_t>(rng() % 20);
    act.push_back(PauseAt(pause, static_cast<PauseMode>(rng() % 3)));
    act.push_back(ContinueAt(pause + 1 + static_cast<int64_t>(rng() % 3)));
    act.push_back(AbortAt(static_cast<int64_t>(rng() % 40), rng() % a.size()));
    act.push_back(FlushAt(static_cast<int64_t>(rng() % 40)));
    const int32_t blocks = static_cast<int32_t>((64 + bs - 1) / bs + rng() % static_cast<uint64_t>(96 / bs + 2));
    v.push_back({"random_mix_block_size_" + std::to_string(bs) + "_seed_" + std::to_string(seed),
                 Opts(blocks, bs, 6, 16, 64, 64), a, act, nullptr});
  }
  return v;
}

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class SchedulerScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(SchedulerScenario, Runs) {
  const Scenario& sc = GetParam();
  StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(sc.options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Report r = scheduler_testing::Drive(**s, sc.arrivals, sc.actions);
  scheduler_testing::ExpectReferenceOutputs(r, sc.arrivals, sc.options);
  if (sc.check) sc.check(r);
}

INSTANTIATE_TEST_SUITE_P(Table, SchedulerScenario, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& i) { return i.param.name; });

}  // namespace
}  // namespace tandem::inference

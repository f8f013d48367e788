// A generator loop for the scheduler's tests, over a fake model whose KV
// cache is a table of token ids (scheduler.h's contract, end to end).
//
// Each step it applies the plan's copies, writes each fed token into its
// slot, then reads every row's whole context back through the row's block
// table and checks it spells the sequence's true tokens: a wrong block
// table, a missed copy on write, a bad prefix-cache hit or a slot written
// over shows up as a mismatch. The "logits" of a row are a hash of the
// context read; a sample's token is a hash of that, its seed, sample index
// and step, so the expected output of every sample can be computed alone
// (Reference) and must equal what the batched, preempted, cached run gives.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "workers/inference/scheduler.h"

namespace tandem::inference::scheduler_testing {

constexpr int32_t kFakeVocab = 64;

inline uint64_t Hash64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}
inline uint64_t HashTokens(const std::vector<int32_t>& t) {
  uint64_t h = 1469598103934665603ULL;
  for (const int32_t x : t) h = Hash64(h, static_cast<uint32_t>(x));
  return h;
}
inline int32_t FakeToken(uint64_t context_hash, const SampleSpec& s) {
  uint64_t h = Hash64(context_hash, s.seed);
  h = Hash64(h, static_cast<uint64_t>(s.sample_index));
  h = Hash64(h, static_cast<uint64_t>(s.step));
  return static_cast<int32_t>(h % kFakeVocab);
}
inline float FakeLogprob(int32_t token) { return -0.125F * static_cast<float>(token % 9); }

// The output of sample k of `r` run alone (r.params.seed must be set).
inline SampleResult Reference(const GenerateRequest& r, int64_t k, const SchedulerOptions& o) {
  SampleResult out;
  std::vector<int32_t> tokens = r.input_ids;
  const SamplingParams& p = r.params;
  auto has = [](const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  for (int64_t step = 0;; ++step) {
    const int32_t t = FakeToken(HashTokens(tokens), MakeSampleSpec(p, *p.seed, k, step));
    tokens.push_back(t);
    out.output_ids.push_back(t);
    if (has(p.stop_token_ids, t) || (!p.ignore_eos && has(o.eos_token_ids, t))) {
      out.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(out.output_ids.size()) >= p.max_new_tokens ||
        static_cast<int64_t>(tokens.size()) >= o.max_model_len) {
      out.finish_reason = FinishReason::kLength;
      break;
    }
  }
  return out;
}

inline GenerateRequest MakeRequest(std::vector<int32_t> prompt, int64_t max_new, int64_t n = 1, uint64_t seed = 7) {
  GenerateRequest r;
  r.input_ids = std::move(prompt);
  r.params.max_new_tokens = max_new;
  r.params.n = n;
  r.params.seed = seed;
  r.return_logprob = true;
  return r;
}

inline std::vector<int32_t> Prompt(int32_t len, int32_t salt) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t i = 0; i < len; ++i)
    p[static_cast<size_t>(i)] =
        2 + static_cast<int32_t>(Hash64(static_cast<uint64_t>(salt), static_cast<uint64_t>(i)) % (kFakeVocab - 2));
  return p;
}

struct Arrival {
  int64_t step = 0;
  GenerateRequest request;
};

struct Action {
  enum Kind { kPause, kContinue, kAbort, kFlush };
  int64_t step = 0;
  Kind kind = kPause;
  PauseMode mode = PauseMode::kInPlace;  // kPause
  size_t arrival = 0;                    // kAbort: which arrival's request
};

struct StepRecord {
  int64_t rows = 0;
  int64_t tokens = 0;
  int64_t copies = 0;
  int64_t prompt_tokens_fed = 0;  // tokens fed at positions inside a prompt
  bool paused = false;
  SchedulerStats stats;           // after the step
};

struct Report {
  std::vector<Status> added;                          // by arrival
  std::map<size_t, std::vector<SampleResult>> results;  // by arrival
  std::map<size_t, int64_t> finished_at;                // by arrival: the step
  std::vector<StepRecord> steps;
  SchedulerStats final_stats;
  int32_t free_after_flush = 0;
};

// Runs arrivals and actions to the end (at most max_steps steps); every
// per-step check is a gtest failure.
inline Report Drive(Scheduler& s, const std::vector<Arrival>& arrivals, const std::vector<Action>& actions,
                    int64_t max_steps = 4000) {
  Report rep;
  rep.added.resize(arrivals.size());
  const SchedulerOptions& o = s.options();
  const int64_t bs = o.block_size;
  std::vector<int32_t> kv(static_cast<size_t>(o.num_blocks) * static_cast<size_t>(bs), -1);
  std::map<RequestId, size_t> arrival_of;
  std::map<SequenceId, std::vector<int32_t>> truth;  // each sequence's tokens as the test saw them
  std::map<SequenceId, int64_t> prompt_len;
  auto truth_of = [&](SequenceId id, RequestId req) -> std::vector<int32_t>& {
    auto it = truth.find(id);
    if (it == truth.end()) {
      it = truth.emplace(id, arrivals[arrival_of.at(req)].request.input_ids).first;
      prompt_len[id] = static_cast<int64_t>(it->second.size());
    }
    return it->second;
  };
  for (int64_t step = 0; step < max_steps; ++step) {
    for (size_t i = 0; i < arrivals.size(); ++i) {
      if (arrivals[i].step != step) continue;
      StatusOr<RequestId> id = s.Add(arrivals[i].request);
      rep.added[i] = id.status();
      if (id.ok()) arrival_of[*id] = i;
    }
    for (const Action& a : actions) {
      if (a.step != step) continue;
      if (a.kind == Action::kPause) {
        EXPECT_TRUE(s.Pause(a.mode).ok());
      }
      if (a.kind == Action::kContinue) s.Continue();
      if (a.kind == Action::kFlush) {
        EXPECT_TRUE(s.FlushCache().ok());
      }
      if (a.kind == Action::kAbort) {
        for (const auto& [rid, idx] : arrival_of)
          if (idx == a.arrival) (void)s.Abort(rid);  // NotFound when it finished already
      }
    }
    StatusOr<StepPlan> planned = s.Plan();
    EXPECT_TRUE(planned.ok()) << planned.status().ToString();
    if (!planned.ok()) break;
    const StepPlan& plan = *planned;
    StepRecord rec;
    rec.paused = s.paused();
    rec.rows = static_cast<int64_t>(plan.rows.size());
    rec.tokens = static_cast<int64_t>(plan.tokens.size());
    rec.copies = static_cast<int64_t>(plan.copies.size());
    // Layout (paged_kv.h).
    const size_t b_count = plan.rows.size();
    EXPECT_EQ(plan.context_lens.size(), b_count);
    EXPECT_EQ(plan.q_lens.size(), b_count);
    EXPECT_EQ(plan.block_table.size(), b_count * static_cast<size_t>(plan.block_table_width));
    EXPECT_EQ(plan.positions.size(), plan.tokens.size());
    EXPECT_EQ(plan.slot_mapping.size(), plan.tokens.size());
    EXPECT_LE(rec.tokens, o.max_step_tokens);
    EXPECT_LE(static_cast<int64_t>(b_count), o.max_running);
    if (rec.paused) {
      EXPECT_TRUE(plan.empty());
    }
    // Copies, then writes.
    for (const BlockCopy& c : plan.copies)
      for (int64_t j = 0; j < bs; ++j)
        kv[static_cast<size_t>(c.dst * bs + j)] = kv[static_cast<size_t>(c.src * bs + j)];
    std::set<int64_t> written;
    size_t t = 0;
    std::vector<uint64_t> row_hash(b_count);
    for (size_t b = 0; b < b_count; ++b) {
      const ScheduledRow& row = plan.rows[b];
      EXPECT_EQ(plan.q_lens[b], row.q_len);
      EXPECT_EQ(plan.context_lens[b], row.start + row.q_len);
      EXPECT_GE(row.q_len, 1);
      const RequestId req = row.request;
      const std::vector<int32_t>& want = truth_of(row.sequence, req);
      for (int64_t p = row.start; p < row.start + row.q_len; ++p, ++t) {
        EXPECT_EQ(plan.positions[t], p);
        const int32_t truth_token = p < static_cast<int64_t>(want.size()) ? want[static_cast<size_t>(p)] : -1;
        EXPECT_EQ(plan.tokens[t], truth_token) << "seq " << row.sequence << " pos " << p;
        const int64_t blk = plan.block_table[b * static_cast<size_t>(plan.block_table_width) + static_cast<size_t>(p / bs)];
        EXPECT_EQ(plan.slot_mapping[t], blk * bs + p % bs);
        EXPECT_TRUE(written.insert(plan.slot_mapping[t]).second) << "slot written twice";
        kv[static_cast<size_t>(plan.slot_mapping[t])] = static_cast<int32_t>(plan.tokens[t]);
        if (p < prompt_len[row.sequence]) ++rec.prompt_tokens_fed;
      }
    }
    // Reads.
    for (size_t b = 0; b < b_count; ++b) {
      const ScheduledRow& row = plan.rows[b];
      const std::vector<int32_t>& want = truth.at(row.sequence);
      EXPECT_LE(plan.context_lens[b], static_cast<int64_t>(want.size()));
      if (plan.context_lens[b] > static_cast<int64_t>(want.size())) continue;
      std::vector<int32_t> read;
      for (int64_t p = 0; p < plan.context_lens[b]; ++p) {
        const int64_t blk = plan.block_table[b * static_cast<size_t>(plan.block_table_width) + static_cast<size_t>(p / bs)];
        read.push_back(kv[static_cast<size_t>(blk * bs + p % bs)]);
      }
      EXPECT_EQ(read, std::vector<int32_t>(want.begin(), want.begin() + plan.context_lens[b]))
          << "sequence " << row.sequence << " reads a wrong context at step " << step;
      row_hash[b] = HashTokens(read);
    }
    std::vector<SampledToken> sampled;
    for (const PlannedSample& ps : plan.samples) {
      const int32_t tok = FakeToken(row_hash[static_cast<size_t>(ps.row)], ps.spec);
      sampled.push_back({tok, FakeLogprob(tok)});
    }
    StatusOr<std::vector<TokenEvent>> events = s.Commit(plan, sampled);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (!events.ok()) break;
    for (const TokenEvent& e : *events) {
      truth_of(e.sequence, e.request).push_back(e.token);
    }
    for (FinishedRequest& f : s.TakeFinished()) {
      rep.results[arrival_of.at(f.id)] = std::move(f.samples);
      rep.finished_at[arrival_of.at(f.id)] = step;
    }
    const Status consistent = s.CheckConsistency();
    EXPECT_TRUE(consistent.ok()) << "step " << step << ": " << consistent.ToString();
    rec.stats = s.stats();
    rep.steps.push_back(rec);
    bool pending = false;
    for (const Arrival& a : arrivals) pending = pending || a.step > step;
    for (const Action& a : actions) pending = pending || a.step > step;
    if (!pending && rec.stats.running_requests + rec.stats.waiting_requests == 0) break;
  }
  rep.final_stats = s.stats();
  EXPECT_EQ(rep.final_stats.running_requests + rep.final_stats.waiting_requests, 0) << "requests left at the end";
  EXPECT_EQ(rep.final_stats.free_blocks + rep.final_stats.cached_blocks, o.num_blocks) << "blocks leaked";
  EXPECT_TRUE(s.FlushCache().ok());
  rep.free_after_flush = s.free_blocks();
  EXPECT_EQ(rep.free_after_flush, o.num_blocks) << "blocks leaked past the cache";
  return rep;
}

// Every sample of every accepted arrival: equal to its Reference, or, when
// aborted, a prefix of it; log-probs passed through.
inline void ExpectReferenceOutputs(const Report& rep, const std::vector<Arrival>& arrivals, const SchedulerOptions& o) {
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (!rep.added[i].ok()) continue;
    auto it = rep.results.find(i);
    ASSERT_NE(it, rep.results.end()) << "arrival " << i << " never finished";
    const GenerateRequest& r = arrivals[i].request;
    ASSERT_EQ(static_cast<int64_t>(it->second.size()), r.params.n);
    for (int64_t k = 0; k < r.params.n; ++k) {
      const SampleResult& got = it->second[static_cast<size_t>(k)];
      const SampleResult want = Reference(r, k, o);
      SCOPED_TRACE("arrival " + std::to_string(i) + " sample " + std::to_string(k));
      EXPECT_EQ(got.prompt_tokens, static_cast<int64_t>(r.input_ids.size()));
      EXPECT_EQ(got.completion_tokens, static_cast<int64_t>(got.output_ids.size()));
      if (got.finish_reason == FinishReason::kAbort) {
        ASSERT_LE(got.output_ids.size(), want.output_ids.size());
        EXPECT_TRUE(std::equal(got.output_ids.begin(), got.output_ids.end(), want.output_ids.begin()));
      } else {
        EXPECT_EQ(got.output_ids, want.output_ids);
        EXPECT_EQ(got.finish_reason, want.finish_reason);
      }
      ASSERT_EQ(got.output_token_logprobs.size(), r.return_logprob ? got.output_ids.size() : 0U);
      for (size_t j = 0; j < got.output_token_logprobs.size(); ++j)
        EXPECT_EQ(got.output_token_logprobs[j], FakeLogprob(got.output_ids[j]));
    }
  }
}

}  // namespace tandem::inference::scheduler_testing

// Continuous batching over the block pool and the prefix cache
// (scheduler.h).
#include "workers/inference/scheduler.h"

#include <algorithm>
#include <span>
#include <unordered_set>
#include <utility>

namespace tandem::inference {
namespace {

uint64_t Mix64(uint64_t x) {  // SplitMix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool Contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

template <typename C>
void EraseValue(C& c, SequenceId id) {
  auto it = std::find(c.begin(), c.end(), id);
  if (it != c.end()) c.erase(it);
}

}  // namespace

// Full blocks the plan's rows complete in its step: key -> the block, its
// parent's key and its tokens (compared on a match, as the cache does, so a
// key collision is a miss).
struct Scheduler::StepBlocks {
  struct Entry {
    BlockKey parent = kRootBlockKey;
    std::span<const int32_t> tokens;  // in the writer's Sequence::tokens, unchanged until Commit
    BlockId block = 0;
  };
  std::unordered_map<BlockKey, Entry> by_key;
};

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions o) {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v >= 1) return Status::Ok();
    return InvalidArgument(std::string("scheduler: ") + name + " must be >= 1, got " + std::to_string(v));
  };
  TANDEM_RETURN_IF_ERROR(positive(o.num_blocks, "num_blocks"));
  TANDEM_RETURN_IF_ERROR(positive(o.block_size, "block_size"));
  TANDEM_RETURN_IF_ERROR(positive(o.max_running, "max_running"));
  TANDEM_RETURN_IF_ERROR(positive(o.max_step_tokens, "max_step_tokens"));
  TANDEM_RETURN_IF_ERROR(positive(o.max_waiting, "max_waiting"));
  TANDEM_RETURN_IF_ERROR(positive(o.max_model_len, "max_model_len"));
  if (CeilDiv(o.max_model_len, o.block_size) > o.num_blocks)
    return InvalidArgument("scheduler: a sequence of max_model_len " + std::to_string(o.max_model_len) + " tokens needs " +
                           std::to_string(CeilDiv(o.max_model_len, o.block_size)) + " blocks of " +
                           std::to_string(o.block_size) + ", the pool has num_blocks " + std::to_string(o.num_blocks));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<BlockAllocator> allocator, BlockAllocator::Create(o.num_blocks, o.block_size),
                          "scheduler");
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(o), std::move(allocator)));
}

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<BlockAllocator> allocator)
    : options_(std::move(options)),
      allocator_(std::move(allocator)),
      cache_(std::make_unique<PrefixCache>(allocator_.get())) {}

StatusOr<RequestId> Scheduler::Add(GenerateRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.input_ids.size());
  const SamplingParams& p = request.params;
  if (prompt_len == 0) return InvalidArgument("input_ids: empty prompt");
  if (p.n < 1 || p.n > options_.max_running)
    return InvalidArgument("sampling_params.n: must be in [1, " + std::to_string(options_.max_running) + "], got " +
                           std::to_string(p.n));
  if (prompt_len + p.max_new_tokens > options_.max_model_len)
    return InvalidArgument("input_ids: " + std::to_string(prompt_len) + " prompt tokens plus max_new_tokens " +
                           std::to_string(p.max_new_tokens) + " exceed the context length " +
                           std::to_string(options_.max_model_len));
  if (fresh_waiting_ >= options_.max_waiting)
    return ResourceExhausted("the waiting queue is full (" + std::to_string(options_.max_waiting) + " requests)");

  const RequestId id = next_request_++;
  RequestState r;
  r.seed = p.seed ? *p.seed : Mix64(options_.seed ^ Mix64(static_cast<uint64_t>(id)));
  r.weight_version = weight_version_;  // again at admission
  r.results.resize(static_cast<size_t>(p.n));
  Sequence leader;
  leader.id = next_sequence_++;
  leader.request = id;
  leader.tokens = request.input_ids;
  leader.prompt_len = prompt_len;
  r.samples.push_back(leader.id);
  for (int64_t k = 1; k < p.n; ++k) {
    Sequence s;
    s.id = next_sequence_++;
    s.request = id;
    s.sample_index = k;
    s.prompt_len = prompt_len;
    leader.unforked.push_back(s.id);
    r.samples.push_back(s.id);
    sequences_.emplace(s.id, std::move(s));
  }
  r.request = std::move(request);
  waiting_.push_back(leader.id);
  sequences_.emplace(leader.id, std::move(leader));
  requests_.emplace(id, std::move(r));
  ++fresh_waiting_;
  return id;
}

int64_t Scheduler::RunningSlots() const {
  int64_t n = 0;
  for (const SequenceId id : running_) n += 1 + static_cast<int64_t>(sequences_.at(id).unforked.size());
  return n;
}

Status Scheduler::EnsureFree(int64_t blocks, bool& ok) {
  while (allocator_->num_free() < blocks) {
    TANDEM_ASSIGN_OR_RETURN(const bool evicted, cache_->EvictOne());
    if (!evicted) {
      ok = false;
      return Status::Ok();
    }
  }
  ok = true;
  return Status::Ok();
}

// Blocks for positions [num_computed, num_computed + q): the ones written
// must be the sequence's own (copy on write), the missing ones are added.
Status Scheduler::ReserveBlocks(Sequence& s, int64_t q, std::vector<BlockCopy>& copies, bool& ok) {
  const int64_t bs = options_.block_size;
  const int64_t need = CeilDiv(s.num_computed + q, bs);
  const int64_t first_written = s.num_computed / bs;
  const int64_t have = static_cast<int64_t>(s.blocks.size());
  int64_t shared = 0;
  for (int64_t i = first_written; i < std::min(have, need); ++i)
    shared += allocator_->ref_count(s.blocks[static_cast<size_t>(i)]) > 1 ? 1 : 0;
  TANDEM_RETURN_IF_ERROR(EnsureFree(shared + std::max<int64_t>(0, need - have), ok));
  if (!ok) return Status::Ok();
  for (int64_t i = first_written; i < std::min(have, need); ++i) {
    TANDEM_ASSIGN_OR_RETURN(const std::optional<BlockCopy> copy, allocator_->MakeWritable(s.blocks[static_cast<size_t>(i)]));
    if (copy) copies.push_back(*copy);
  }
  for (int64_t i = have; i < need; ++i) {
    TANDEM_ASSIGN_OR_RETURN(const BlockId b, allocator_->Allocate());
    s.blocks.push_back(b);
  }
  return Status::Ok();
}

void Scheduler::AddRow(StepPlan& plan, const Sequence& s, int64_t q) const {
  const int64_t bs = options_.block_size;
  const int64_t row = static_cast<int64_t>(plan.rows.size());
  plan.rows.push_back({s.id, s.request, s.num_computed, q});
  for (int64_t p = s.num_computed; p < s.num_computed + q; ++p) {
    plan.tokens.push_back(s.tokens[static_cast<size_t>(p)]);
    plan.positions.push_back(p);
    plan.slot_mapping.push_back(static_cast<int64_t>(s.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs);
  }
  plan.context_lens.push_back(static_cast<int32_t>(s.num_computed + q));
  plan.q_lens.push_back(static_cast<int32_t>(q));
  if (s.num_computed + q < s.length()) return;  // a prefill chunk: no token yet
  const RequestState& r = requests_.at(s.request);
  plan.samples.push_back({row, s.id, s.request, r.request.return_logprob,
                          MakeSampleSpec(r.request.params, r.seed, s.sample_index, s.num_output())});
  for (const SequenceId sib : s.unforked)
    plan.samples.push_back({row, sib, s.request, r.request.return_logprob,
                            MakeSampleSpec(r.request.params, r.seed, sequences_.at(sib).sample_index, 0)});
}

Status Scheduler::ShareStepBlocks(Sequence& s, const StepBlocks& step, BlockKey& key) {
  const int64_t bs = options_.block_size;
  const std::span<const int32_t> tokens(s.tokens);
  while (s.num_computed + bs <= s.length() - 1) {
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(s.num_computed), static_cast<size_t>(bs));
    const BlockKey k = PrefixCache::KeyOf(key, block);
    auto it = step.by_key.find(k);
    if (it == step.by_key.end() || it->second.parent != key ||
        !std::equal(block.begin(), block.end(), it->second.tokens.begin(), it->second.tokens.end()))
      return Status::Ok();
    TANDEM_RETURN_IF_ERROR(allocator_->Retain(it->second.block), "share a block of the step");
    s.blocks.push_back(it->second.block);
    s.num_computed += bs;
    key = k;
  }
  return Status::Ok();
}

void Scheduler::NoteStepBlocks(const Sequence& s, int64_t q, BlockKey key, StepBlocks& step) const {
  const int64_t bs = options_.block_size;
  const std::span<const int32_t> tokens(s.tokens);
  for (int64_t i = s.num_computed / bs; (i + 1) * bs <= s.num_computed + q; ++i) {
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    const BlockKey k = PrefixCache::KeyOf(key, block);
    step.by_key.try_emplace(k, StepBlocks::Entry{key, block, s.blocks[static_cast<size_t>(i)]});
    key = k;
  }
}

// Starts the waiting front when slots, budget and blocks allow.
Status Scheduler::Admit(StepPlan& plan, int64_t& budget, StepBlocks& step, bool& admitted) {
  admitted = false;
  Sequence& s = sequences_.at(waiting_.front());
  if (RunningSlots() + 1 + static_cast<int64_t>(s.unforked.size()) > options_.max_running) return Status::Ok();
  BlockKey key = kRootBlockKey;  // of the last block s shares
  if (options_.prefix_cache) {
    // Keep at least the last token to compute: its logits are the next draw.
    TANDEM_ASSIGN_OR_RETURN(PrefixCache::Match m, cache_->Lookup(s.tokens, s.length() - 1), "admit");
    s.num_computed = static_cast<int64_t>(m.blocks.size()) * options_.block_size;
    s.num_cached_blocks = static_cast<int64_t>(m.blocks.size());
    s.cache_key = m.last_key;
    s.blocks = std::move(m.blocks);
    key = m.last_key;
    TANDEM_RETURN_IF_ERROR(ShareStepBlocks(s, step, key), "admit");
  }
  s.cache_chain_open = true;
  const int64_t q = std::min(s.pending(), budget);
  bool ok = false;
  TANDEM_RETURN_IF_ERROR(ReserveBlocks(s, q, plan.copies, ok), "admit");
  if (!ok) {  // give the cache hits back; try again next step
    s.num_computed = 0;
    s.num_cached_blocks = 0;
    s.cache_key = kRootBlockKey;
    TANDEM_RETURN_IF_ERROR(allocator_->ReleaseAll(s.blocks), "admit");
    return Status::Ok();
  }
  cache_->RecordLookup(s.num_computed, s.length() - s.num_computed);
  RequestState& r = requests_.at(s.request);
  if (!r.started) {
    r.started = true;
    r.weight_version = weight_version_;
    --fresh_waiting_;
    s.cached_tokens = std::min(s.num_computed, s.prompt_len);
  }
  waiting_.pop_front();
  s.state = SequenceState::kRunning;
  s.admission = ++next_admission_;
  running_.push_back(s.id);
  if (options_.prefix_cache) NoteStepBlocks(s, q, key, step);
  AddRow(plan, s, q);
  budget -= q;
  admitted = true;
  return Status::Ok();
}

Status Scheduler::RetractOpenRows() {
  for (auto r = open_rows_.rbegin(); r != open_rows_.rend(); ++r) {
    auto it = sequences_.find(*r);
    if (it != sequences_.end() && it->second.state == SequenceState::kRunning)
      TANDEM_RETURN_IF_ERROR(Retract(*r));
  }
  open_rows_.clear();
  open_plan_ = 0;
  return Status::Ok();
}

StatusOr<StepPlan> Scheduler::Plan() {
  // A plan neither committed nor discarded may have copies that never ran:
  // its sequences start over.
  if (open_plan_ != 0) TANDEM_RETURN_IF_ERROR(RetractOpenRows(), "plan over an open plan");
  StepPlan plan;
  plan.id = ++next_plan_;
  open_plan_ = plan.id;
  if (paused_) return plan;
  int64_t budget = options_.max_step_tokens;
  bool retracted = false;
  StepBlocks step;
  std::unordered_set<SequenceId> scheduled;
  std::vector<SequenceId> order;  // decodes first, then prefill chunks; oldest first in each
  for (const SequenceId id : running_)
    if (sequences_.at(id).pending() == 1) order.push_back(id);
  for (const SequenceId id : running_)
    if (sequences_.at(id).pending() > 1) order.push_back(id);
  for (const SequenceId id : order) {
    if (budget == 0) break;
    auto it = sequences_.find(id);
    if (it == sequences_.end() || it->second.state != SequenceState::kRunning) continue;  // retracted here
    Sequence& s = it->second;
    const int64_t q = std::min(s.pending(), budget);
    bool ok = false;
    for (;;) {
      TANDEM_RETURN_IF_ERROR(ReserveBlocks(s, q, plan.copies, ok), "plan");
      if (ok) break;
      // Out of blocks: retract the youngest sequence not fed this step.
      SequenceId victim = id;
      for (auto r = running_.rbegin(); r != running_.rend(); ++r)
        if (scheduled.count(*r) == 0) {
          victim = *r;
          break;
        }
      retracted = true;
      TANDEM_RETURN_IF_ERROR(Retract(victim), "plan");
      if (victim == id) break;
    }
    if (!ok) continue;
    // A running row's blocks can be shared when its cache chain is whole up
    // to them (every computed full block is cached at Commit), and are worth
    // noting when someone waits to be admitted.
    if (options_.prefix_cache && !waiting_.empty() && s.cache_chain_open &&
        s.num_cached_blocks == s.num_computed / options_.block_size)
      NoteStepBlocks(s, q, s.cache_key, step);
    AddRow(plan, s, q);
    scheduled.insert(id);
    budget -= q;
  }
  while (!retracted && budget > 0 && !waiting_.empty()) {
    bool admitted = false;
    TANDEM_RETURN_IF_ERROR(Admit(plan, budget, step, admitted), "plan");
    if (!admitted) break;
  }
  int32_t width = 0;
  for (const int32_t c : plan.context_lens)
    width = std::max(width, static_cast<int32_t>(CeilDiv(c, options_.block_size)));
  plan.block_table_width = width;
  plan.block_table.assign(plan.rows.size() * static_cast<size_t>(width), 0);
  for (size_t b = 0; b < plan.rows.size(); ++b) {
    const Sequence& s = sequences_.at(plan.rows[b].sequence);
    const size_t n = static_cast<size_t>(CeilDiv(plan.context_lens[b], options_.block_size));
    std::copy(s.blocks.begin(), s.blocks.begin() + static_cast<std::ptrdiff_t>(n),
              plan.block_table.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(width)));
    open_rows_.push_back(s.id);
  }
  return plan;
}

Status Scheduler::Retract(SequenceId id) {
  Sequence& s = sequences_.at(id);
  TANDEM_RETURN_IF_ERROR(allocator_->ReleaseAll(s.blocks), "retract sequence " + std::to_string(id));
  s.num_computed = 0;
  s.num_cached_blocks = 0;
  s.cache_key = kRootBlockKey;
  s.cache_chain_open = true;
  s.state = SequenceState::kWaiting;
  EraseValue(running_, id);
  waiting_.push_front(id);
  ++retractions_;
  return Status::Ok();
}

Status Scheduler::InsertFullBlocks(Sequence& s) {
  if (!options_.prefix_cache) return Status::Ok();
  const int64_t bs = options_.block_size;
  const std::span<const int32_t> tokens(s.tokens);
  while (s.cache_chain_open && s.num_cached_blocks < s.num_computed / bs) {
    const size_t i = static_cast<size_t>(s.num_cached_blocks);
    TANDEM_ASSIGN_OR_RETURN(const std::optional<BlockKey> key,
                            cache_->Insert(s.cache_key, tokens.subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)),
                                           s.blocks[i]));
    if (!key) {
      s.cache_chain_open = false;
      break;
    }
    s.cache_key = *key;
    ++s.num_cached_blocks;
  }
  return Status::Ok();
}

Status Scheduler::Fork(Sequence& leader, SequenceId sibling) {
  Sequence& sib = sequences_.at(sibling);
  TANDEM_ASSIGN_OR_RETURN(sib.blocks, allocator_->Fork(leader.blocks), "fork");
  sib.tokens.assign(leader.tokens.begin(), leader.tokens.begin() + static_cast<std::ptrdiff_t>(leader.prompt_len));
  sib.num_computed = leader.num_computed;
  sib.num_cached_blocks = leader.num_cached_blocks;
  sib.cache_key = leader.cache_key;
  sib.cache_chain_open = leader.cache_chain_open;
  sib.cached_tokens = leader.cached_tokens;
  sib.state = SequenceState::kRunning;
  sib.admission = ++next_admission_;
  running_.push_back(sib.id);
  EraseValue(leader.unforked, sibling);
  return Status::Ok();
}

StatusOr<TokenEvent> Scheduler::Append(Sequence& s, const SampledToken& t) {
  const RequestState& r = requests_.at(s.request);
  const SamplingParams& p = r.request.params;
  s.tokens.push_back(t.token);
  s.output_logprobs.push_back(t.logprob);
  ++generated_tokens_;
  TokenEvent e{s.request, s.id, s.sample_index, t.token, t.logprob, false, FinishReason::kLength};
  std::string matched;
  if (Contains(p.stop_token_ids, t.token) || (!p.ignore_eos && Contains(options_.eos_token_ids, t.token))) {
    e.finished = true;
    e.finish_reason = FinishReason::kStop;
    matched = std::to_string(t.token);
  } else if (s.num_output() >= p.max_new_tokens || s.length() >= options_.max_model_len) {
    e.finished = true;
  }
  if (e.finished) TANDEM_RETURN_IF_ERROR(Finish(s.id, e.finish_reason, std::move(matched)));
  return e;
}

StatusOr<std::vector<TokenEvent>> Scheduler::Commit(const StepPlan& plan, const std::vector<SampledToken>& sampled) {
  if (plan.id == 0 || plan.id != open_plan_)
    return FailedPrecondition("commit: plan " + std::to_string(plan.id) + " is not the open one (" +
                              std::to_string(open_plan_) + ")");
  if (sampled.size() != plan.samples.size())
    return InvalidArgument("commit: " + std::to_string(sampled.size()) + " sampled tokens for " +
                           std::to_string(plan.samples.size()) + " planned samples");
  open_plan_ = 0;
  open_rows_.clear();
  std::vector<bool> live(plan.rows.size(), false);
  for (size_t b = 0; b < plan.rows.size(); ++b) {
    const ScheduledRow& row = plan.rows[b];
    auto it = sequences_.find(row.sequence);
    if (it == sequences_.end() || it->second.state != SequenceState::kRunning || it->second.num_computed != row.start)
      continue;  // aborted, finished or retracted since the plan
    live[b] = true;
    it->second.num_computed += row.q_len;
    TANDEM_RETURN_IF_ERROR(InsertFullBlocks(it->second), "commit");
  }
  // Forks first: a leader may finish on its first token.
  for (const PlannedSample& ps : plan.samples) {
    const ScheduledRow& row = plan.rows.at(static_cast<size_t>(ps.row));
    if (!live[static_cast<size_t>(ps.row)] || ps.sequence == row.sequence) continue;
    auto sib = sequences_.find(ps.sequence);
    if (sib == sequences_.end() || sib->second.state != SequenceState::kWaiting) continue;
    TANDEM_RETURN_IF_ERROR(Fork(sequences_.at(row.sequence), ps.sequence), "commit");
  }
  std::vector<TokenEvent> events;
  for (size_t i = 0; i < plan.samples.size(); ++i) {
    const PlannedSample& ps = plan.samples[i];
    if (!live[static_cast<size_t>(ps.row)]) continue;
    auto it = sequences_.find(ps.sequence);
    if (it == sequences_.end() || it->second.state != SequenceState::kRunning) continue;
    TANDEM_ASSIGN_OR_RETURN(TokenEvent e, Append(it->second, sampled[i]), "commit");
    events.push_back(e);
  }
  return events;
}

Status Scheduler::Discard(const StepPlan& plan) {
  if (plan.id == 0 || plan.id != open_plan_) return Status::Ok();  // committed or superseded already
  return RetractOpenRows().WithContext("discard");
}

Status Scheduler::Finish(SequenceId id, FinishReason reason, std::string matched_stop) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return NotFound("sequence " + std::to_string(id) + " is not in the engine");
  Sequence s = std::move(it->second);
  sequences_.erase(it);
  RequestState& r = requests_.at(s.request);
  TANDEM_RETURN_IF_ERROR(allocator_->ReleaseAll(s.blocks), "finish sequence " + std::to_string(id));
  if (s.state == SequenceState::kRunning) EraseValue(running_, id);
  else EraseValue(waiting_, id);
  if (s.sample_index > 0 && s.state == SequenceState::kWaiting) {  // maybe not forked yet
    auto leader = sequences_.find(r.samples[0]);
    if (leader != sequences_.end()) EraseValue(leader->second.unforked, id);
  }
  if (!r.started && s.sample_index == 0) {
    --fresh_waiting_;
    r.started = true;
  }
  SampleResult& out = r.results[static_cast<size_t>(s.sample_index)];
  if (s.length() > s.prompt_len)
    out.output_ids.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompt_len), s.tokens.end());
  if (r.request.return_logprob) out.output_token_logprobs = s.output_logprobs;
  out.finish_reason = reason;
  out.matched_stop = std::move(matched_stop);
  out.prompt_tokens = s.prompt_len;
  out.completion_tokens = static_cast<int64_t>(out.output_ids.size());
  out.cached_tokens = s.cached_tokens;
  out.weight_version = r.weight_version;
  ++r.finished;
  if (r.finished == static_cast<int64_t>(r.samples.size())) {  // never while s.unforked is not empty
    auto rit = requests_.find(s.request);
    finished_.push_back({s.request, std::move(rit->second.results)});
    requests_.erase(rit);
  }
  // A leader that ends before its prompt is computed takes its unforked samples along.
  for (const SequenceId sib : s.unforked) TANDEM_RETURN_IF_ERROR(Finish(sib, reason, ""));
  return Status::Ok();
}

Status Scheduler::FinishSequence(SequenceId sequence, FinishReason reason, std::string matched_stop) {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) return NotFound("sequence " + std::to_string(sequence) + " is not in the engine");
  return Finish(sequence, reason, std::move(matched_stop));
}

Status Scheduler::Abort(RequestId request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return NotFound("request " + std::to_string(request) + " is not in the engine");
  const std::vector<SequenceId> samples = it->second.samples;
  for (const SequenceId id : samples)
    if (sequences_.count(id) > 0) TANDEM_RETURN_IF_ERROR(Finish(id, FinishReason::kAbort, ""), "abort");
  return Status::Ok();
}

Status Scheduler::Pause(PauseMode mode) {
  paused_ = true;
  if (mode == PauseMode::kAbort) {
    std::vector<RequestId> ids;
    for (const auto& [id, r] : requests_) ids.push_back(id);
    for (const RequestId id : ids) TANDEM_RETURN_IF_ERROR(Abort(id), "pause abort");
  } else if (mode == PauseMode::kRetract) {
    while (!running_.empty()) TANDEM_RETURN_IF_ERROR(Retract(running_.back()), "pause retract");
  }
  return Status::Ok();
}

Status Scheduler::InvalidateCache() {
  for (const SequenceId id : running_) sequences_.at(id).cache_chain_open = false;
  return cache_->Flush();
}

std::vector<FinishedRequest> Scheduler::TakeFinished() { return std::exchange(finished_, {}); }

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  std::unordered_set<RequestId> running_requests;
  for (const SequenceId id : running_) running_requests.insert(sequences_.at(id).request);
  st.running_requests = static_cast<int64_t>(running_requests.size());
  st.waiting_requests = static_cast<int64_t>(requests_.size()) - st.running_requests;
  st.running_sequences = static_cast<int64_t>(running_.size());
  st.waiting_sequences = static_cast<int64_t>(waiting_.size());
  st.num_blocks = allocator_->num_blocks();
  st.free_blocks = allocator_->num_free();
  st.cached_blocks = cache_->num_cached_blocks();
  st.prefix_hit_tokens = cache_->hit_tokens();
  st.prefix_miss_tokens = cache_->miss_tokens();
  st.retractions = retractions_;
  st.generated_tokens = generated_tokens_;
  st.paused = paused_;
  return st;
}

Status Scheduler::CheckConsistency() const {
  std::vector<int64_t> refs(static_cast<size_t>(allocator_->num_blocks()), 0);
  const int64_t bs = options_.block_size;
  for (const auto& [id, s] : sequences_) {
    const std::string where = "sequence " + std::to_string(id);
    for (const BlockId b : s.blocks) {
      if (b < 0 || b >= allocator_->num_blocks()) return Internal(where + ": block " + std::to_string(b) + " out of range");
      ++refs[static_cast<size_t>(b)];
    }
    if (s.num_computed > s.length() || static_cast<int64_t>(s.blocks.size()) < CeilDiv(s.num_computed, bs))
      return Internal(where + ": " + std::to_string(s.num_computed) + " computed tokens in " +
                      std::to_string(s.blocks.size()) + " blocks");
    if (s.state != SequenceState::kRunning && !s.blocks.empty()) return Internal(where + ": holds blocks while not running");
    if (s.num_cached_blocks * bs > s.num_computed) return Internal(where + ": cached past its computed tokens");
  }
  for (BlockId b = 0; b < allocator_->num_blocks(); ++b) {
    const int64_t want = refs[static_cast<size_t>(b)] + cache_->references(b);
    if (want != allocator_->ref_count(b))
      return Internal("block " + std::to_string(b) + ": reference count " + std::to_string(allocator_->ref_count(b)) +
                      ", held by " + std::to_string(want));
  }
  if (RunningSlots() > options_.max_running) return Internal("more running sequences than max_running");
  return Status::Ok();
}

}  // namespace tandem::inference

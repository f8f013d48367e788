// Continuous batching for the rollout engine (issue #14; docs/inference.md
// "KV blocks and the scheduler"). Torch-free: the generator loop drives it
//   plan = *Plan();  apply plan.copies to the KV pools; run the model on the
//   plan's inputs (model::PagedKv); sample plan.samples from the logits;
//   events = Commit(plan, sampled tokens);
// and nothing else changes the state the plan was made from, except Abort,
// FinishSequence and Pause, which Commit tolerates (rows of sequences no
// longer running are ignored). A step that cannot run is given back with
// Discard(plan): its sequences are retracted, as they are when Plan is
// called again over a plan neither committed nor discarded (its copies
// may not have run).
//
// Requests (n samples each) wait in a bounded queue (Add past max_waiting:
// ResourceExhausted, the HTTP layer's 503). Each step feeds, within
// max_step_tokens tokens and max_running sequences: first one token of each
// decoding sequence (oldest first), then the next chunk of each running
// prefill, then new sequences from the waiting front (their tokens minus
// the longest prefix the cache holds, or that a row of the same step
// writes: a full block a row completes in a step is shared, as a cached one
// would be, by the sequences admitted after it in that step — the model
// writes a layer's K/V of every row before any row attends, so prompts that
// start alike and arrive together prefill their common blocks once). The
// samples of a prompt prefill
// once: when sample 0's prompt is computed, the others fork from it,
// sharing its blocks, and each draws its first token from the same logits
// row; a shared partial block is copied when a sample first writes into it
// (plan.copies). Out of blocks (after evicting cached ones), the youngest
// running sequence is retracted: its KV is dropped and it goes back to the
// waiting front, later to be prefilled again with its prompt and the tokens
// it generated, and to continue. No new sequence starts in a step that
// retracted one.
//
// Pause modes (SGLang's): kAbort ends every request with finish_reason
// abort; kRetract retracts every running sequence; kInPlace keeps
// everything. While paused, Plan returns empty plans; Add still queues.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "workers/inference/block_allocator.h"
#include "workers/inference/generation.h"
#include "workers/inference/prefix_cache.h"
#include "workers/inference/sample_spec.h"
#include "workers/inference/sequence.h"

namespace tandem::inference {

struct SchedulerOptions {
  int32_t num_blocks = 0;           // KV blocks in the pool
  int32_t block_size = 16;          // tokens per block
  int64_t max_running = 256;        // sequences in the batch (samples of a started prompt count)
  int64_t max_step_tokens = 8192;   // tokens fed per step, decode and prefill together
  int64_t max_waiting = 1024;       // requests not started yet
  int64_t max_model_len = 4096;     // prompt + max_new_tokens, at most
  std::vector<int32_t> eos_token_ids;  // stop tokens unless ignore_eos
  bool prefix_cache = true;
  uint64_t seed = 0;                // seeds requests that have none (mixed with the request id)
};


// One sequence's part of a step: q_len tokens from position `start`.
struct ScheduledRow {
  SequenceId sequence = 0;
  RequestId request = 0;
  int64_t start = 0;
  int64_t q_len = 0;
};

// A token to draw from logits row `row`, for `sequence` (a sample that
// forks at this step already has its id here).
struct PlannedSample {
  int64_t row = 0;
  SequenceId sequence = 0;
  RequestId request = 0;
  bool return_logprob = false;
  SampleSpec spec;
};

// The step's model input as host vectors, laid out as model::PagedKv wants
// (workers/model/paged_kv.h): B = rows.size(), T = tokens.size().
struct StepPlan {
  uint64_t id = 0;
  std::vector<ScheduledRow> rows;
  std::vector<BlockCopy> copies;        // before the forward, in order
  std::vector<int64_t> tokens;          // [T], packed row by row
  std::vector<int64_t> positions;       // [T]
  std::vector<int64_t> slot_mapping;    // [T]: block * block_size + offset
  int32_t block_table_width = 0;        // max_blocks_per_seq of this step
  std::vector<int32_t> block_table;     // [B * width], row-major, padded with 0
  std::vector<int32_t> context_lens;    // [B]: entries after this step's writes
  std::vector<int32_t> q_lens;          // [B]
  std::vector<PlannedSample> samples;   // rows whose last fed token is their sequence's last

  bool empty() const { return rows.empty(); }
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0F;  // log p(token) at the row's temperature (sampler.h)
};

// A token appended to a sample, in the order of plan.samples.
struct TokenEvent {
  RequestId request = 0;
  SequenceId sequence = 0;
  int64_t sample_index = 0;
  int32_t token = 0;
  float logprob = 0.0F;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;
};

struct FinishedRequest {
  RequestId id = 0;
  std::vector<SampleResult> samples;  // by sample index
};

struct SchedulerStats {
  int64_t running_requests = 0;   // with at least one sample running
  int64_t waiting_requests = 0;   // the others
  int64_t running_sequences = 0;
  int64_t waiting_sequences = 0;  // in the waiting queue (retracted ones included)
  int32_t num_blocks = 0;
  int32_t free_blocks = 0;        // in the allocator's free list
  int64_t cached_blocks = 0;      // held by the prefix cache (some evictable)
  int64_t prefix_hit_tokens = 0;  // tokens served from the cache at admission
  int64_t prefix_miss_tokens = 0; // tokens prefilled at admission
  int64_t retractions = 0;        // sequences retracted (out of blocks or pause)
  int64_t generated_tokens = 0;
  bool paused = false;
};

class Scheduler {
 public:
  // InvalidArgument naming the option when one is out of range, or when a
  // sequence of max_model_len tokens would not fit in the pool.
  static StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. InvalidArgument for an empty prompt, n < 1 or above
  // max_running, or prompt + max_new_tokens above max_model_len;
  // ResourceExhausted when max_waiting requests wait already.
  StatusOr<RequestId> Add(GenerateRequest request);
  // Ends every sample of the request with finish_reason abort (their results
  // come out of TakeFinished). NotFound for an unknown or finished request.
  Status Abort(RequestId request);
  // Ends a sample (e.g. a stop string the detokenizer matched). NotFound for
  // an unknown or finished sequence.
  Status FinishSequence(SequenceId sequence, FinishReason reason, std::string matched_stop);

  // The next step (empty when paused or idle). Errors are internal only
  // (a broken invariant), never a consequence of input.
  StatusOr<StepPlan> Plan();
  // `sampled[i]` is the token drawn for plan.samples[i]. FailedPrecondition
  // for a plan that is not the latest or was committed already;
  // InvalidArgument when the sizes differ.
  StatusOr<std::vector<TokenEvent>> Commit(const StepPlan& plan, const std::vector<SampledToken>& sampled);
  // The step was not run: its sequences are retracted (they run again
  // later). A no-op for a plan already committed or superseded.
  Status Discard(const StepPlan& plan);

  Status Pause(PauseMode mode);
  void Continue() { paused_ = false; }
  bool paused() const { return paused_; }
  // Drops the prefix cache (blocks that running sequences hold stay).
  Status FlushCache() { return cache_->Flush(); }
  // The weights changed: drops the prefix cache, and what the running
  // sequences computed under the old weights never enters it (their cache
  // chains close; retracted and waiting ones compute theirs anew).
  Status InvalidateCache();

  // Requests whose samples have all finished since the last call.
  std::vector<FinishedRequest> TakeFinished();
  SchedulerStats stats() const;
  void set_weight_version(int64_t version) { weight_version_ = version; }
  const SchedulerOptions& options() const { return options_; }
  int32_t free_blocks() const { return allocator_->num_free(); }

  // Internal: every block's reference count equals the block tables and
  // cache entries naming it, and each sequence's state is coherent.
  Status CheckConsistency() const;

 private:
  struct RequestState {
    GenerateRequest request;
    uint64_t seed = 0;
    int64_t weight_version = 0;
    bool started = false;
    std::vector<SequenceId> samples;
    std::vector<SampleResult> results;
    int64_t finished = 0;
  };

  // The full blocks the rows of the plan being made complete, by cache key.
  struct StepBlocks;

  explicit Scheduler(SchedulerOptions options, std::unique_ptr<BlockAllocator> allocator);
  int64_t RunningSlots() const;
  Status EnsureFree(int64_t blocks, bool& ok);
  Status ReserveBlocks(Sequence& s, int64_t q, std::vector<BlockCopy>& copies, bool& ok);
  void AddRow(StepPlan& plan, const Sequence& s, int64_t q) const;
  Status Admit(StepPlan& plan, int64_t& budget, StepBlocks& step, bool& admitted);
  // Extends `s`'s matched prefix (its blocks, num_computed; `key` the key of
  // its last block, in and out) with the blocks of `step` that continue it,
  // keeping at least its last token to compute.
  Status ShareStepBlocks(Sequence& s, const StepBlocks& step, BlockKey& key);
  // Records the blocks `s`'s row of q tokens completes; `key` is the key of
  // the block before the first of them (s.num_computed / block_size).
  void NoteStepBlocks(const Sequence& s, int64_t q, BlockKey key, StepBlocks& step) const;
  Status Retract(SequenceId id);
  Status RetractOpenRows();
  Status InsertFullBlocks(Sequence& s);
  Status Fork(Sequence& leader, SequenceId sibling);
  Status Finish(SequenceId id, FinishReason reason, std::string matched_stop);
  StatusOr<TokenEvent> Append(Sequence& s, const SampledToken& t);

  SchedulerOptions options_;
  std::unique_ptr<BlockAllocator> allocator_;
  std::unique_ptr<PrefixCache> cache_;
  std::map<RequestId, RequestState> requests_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::vector<SequenceId> running_;  // oldest admission first
  std::deque<SequenceId> waiting_;
  int64_t fresh_waiting_ = 0;        // waiting requests never started
  std::vector<FinishedRequest> finished_;
  RequestId next_request_ = 1;
  SequenceId next_sequence_ = 1;
  uint64_t next_admission_ = 0;
  uint64_t next_plan_ = 0;
  uint64_t open_plan_ = 0;           // the plan Commit accepts (0: none)
  std::vector<SequenceId> open_rows_;  // its rows' sequences
  bool paused_ = false;
  int64_t weight_version_ = 0;
  int64_t retractions_ = 0;
  int64_t generated_tokens_ = 0;
};

}  // namespace tandem::inference

// The rollout engine (issue #14; docs/inference.md "The engine"): the
// Engine the HTTP API serves, over the model, the paged KV cache, the
// continuous-batching scheduler and the sampler.
//
// One engine thread runs the step loop:
//   plan = scheduler.Plan()            (under the lock)
//   copy-on-write block copies; Transformer::DecodePaged over the plan's
//   tokens (prefill chunks and decode tokens in one batch); Sample the
//   planned rows                        (no lock: the model's time)
//   events = scheduler.Commit(plan)     (under the lock), then each event
//   becomes a SampleUpdate for its request's callback, stop strings are
//   matched on the decoded output, and finished requests get their results.
// Submit, Abort, Pause, Continue and FlushCache take the lock briefly and
// wake the loop; a step in flight when Pause or Abort comes is committed
// (its rows of ended sequences are ignored), so they wait at most one step.
// A LibTorch error in a step fails the step's requests with kAbort, is
// logged, and makes Health report it until a step succeeds again.
//
// The KV pool is num_blocks blocks per layer for keys and for values
// ([num_blocks, block_size, Hkv, D] each, the model's dtype and device:
// workers/model/paged_kv.h), carved from one flat buffer: the caller's
// (the rollout's `kv_cache` tagged-memory pool) or a new one.
//
// Memory handoff (docs/inference.md "Memory and the control protocol"): the
// rollout role releases the memory behind the weights or the KV pool only
// after MarkAbsent said yes, and calls MarkPresent once it is mapped again.
// While a part is absent no step runs and Continue fails. LoadWeights
// rewrites the parameters in place between steps.
// Decode-only steps of at most the largest of decode_graph_batches rows
// replay a CUDA graph (decode_graphs.h) instead of running the model op by
// op. Not yet: tree-attention prefill of a group's prompts.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "workers/inference/engine.h"
#include "workers/inference/decode_graphs.h"
#include "workers/inference/generate_json.h"
#include "workers/inference/handoff_engine.h"
#include "workers/inference/scheduler.h"
#include "workers/model/transformer.h"

namespace tandem::inference {

// Bytes one KV block takes over every layer, keys and values.
int64_t KvBlockBytes(const model::ModelConfig& config, int64_t block_size, at::ScalarType dtype);

struct GeneratorOptions {
  // scheduler.num_blocks 0: sized from kv_cache_bytes. scheduler.max_model_len
  // is set from max_model_len.
  SchedulerOptions scheduler;
  int64_t kv_cache_bytes = 256ll << 20;
  // Holds the KV pool when defined: flat, contiguous, the model's dtype and
  // device, at least num_blocks * KvBlockBytes bytes; the caller keeps it
  // mapped except between MarkAbsent(kKvCache) and MarkPresent.
  at::Tensor kv_buffer;
  int64_t weight_version = 0;              // the version of the weights the model starts with
  int64_t max_model_len = 0;               // 0: the model's max_position_embeddings
  std::string model_path;                  // reported by Info
  std::string config_json;                 // reported by Info
  std::shared_ptr<const TextCodec> codec;  // for stop strings; null: stop strings are refused
  // Decode steps at these batch sizes through DecodeGraphs (CUDA graphs on
  // CUDA; decode_graphs.h), the pool's last block kept for their padding;
  // empty: every step eager. A model or device they cannot serve (MoE, a
  // failed capture) is logged and decodes eagerly.
  std::vector<int64_t> decode_graph_batches;
  // A grow tag `cuda_graph` of it holds the graphs' memory (CUDA;
  // graph_memory.h), released and resumed through MemoryPart::kCudaGraph:
  // while it is out, decode steps run eagerly.
  memory::TaggedMemory* graph_memory = nullptr;
};

class Generator final : public Engine, public HandoffEngine {
 public:
  // Allocates the KV pool and starts the engine thread. InvalidArgument for
  // options that do not fit the model (a pool smaller than one sequence of
  // max_model_len, ...).
  static StatusOr<std::unique_ptr<Generator>> Create(std::shared_ptr<const model::Transformer> model,
                                                     GeneratorOptions options);
  ~Generator() override;  // aborts what runs and joins the engine thread
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  StatusOr<RequestId> Submit(GenerateRequest request, SampleCallback on_update) override;
  void Abort(RequestId id) override;
  Status Pause(PauseMode mode) override;
  Status Continue() override;
  Status FlushCache() override;
  Status Health() const override;
  EngineInfo Info() const override;
  EngineStats Stats() const override;

  // Bytes of the KV pool (keys and values of every layer), and where it
  // starts (kv_buffer's data when one was given).
  int64_t kv_pool_bytes() const;
  const void* kv_pool_data() const;
  // The batch sizes decode steps replay graphs for (empty: none), and the
  // device bytes their pool took.
  std::vector<int64_t> decode_graph_batches() const;
  int64_t decode_graph_bytes() const;
  int64_t decode_graph_tag_bytes() const;  // of them in GeneratorOptions::graph_memory
  // Steps that went through the graphs so far.
  uint64_t decode_graph_steps() const { return graph_steps_.load(); }

  // Before the memory behind `part` is released: waits for the step in
  // flight and returns once none can start. FailedPrecondition unless the
  // engine is paused; for kKvCache also while a sequence holds KV (an
  // in_place pause keeps it: pause with retract or abort first). The prefix
  // cache is emptied with the KV pool. Idempotent.
  Status MarkAbsent(MemoryPart part) override;
  // After the memory is mapped again (at the same addresses).
  void MarkPresent(MemoryPart part) override;
  // Runs `load`, which rewrites the model's parameters in place, with no step
  // in flight, and reports `version` for the requests that start after it
  // (running ones go on with the new weights and keep the version they
  // started with). The prefix cache is emptied (its KV is the old
  // weights'). FailedPrecondition while the weights are absent; the version
  // is unchanged when `load` fails.
  Status LoadWeights(int64_t version, const std::function<Status()>& load) override;

 private:
  Generator(std::shared_ptr<const model::Transformer> model, GeneratorOptions options);
  void Loop();
  // Runs the model and the sampler over `plan` (no lock held); adds the
  // host's launch time and its wait for the tokens to the two counters.
  StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan, double& launch_s, double& wait_s);
  // Under mu_: turns events into updates, matches stop strings, delivers
  // finished requests.
  void Deliver(const std::vector<TokenEvent>& events);
  void DeliverFinished();

  struct Pending {
    SampleCallback on_update;
    GenerateRequest request;
    std::vector<std::vector<int32_t>> outputs;  // per sample, for stop strings
  };

  const std::shared_ptr<const model::Transformer> model_;
  const GeneratorOptions options_;
  int32_t pool_blocks_ = 0;  // the scheduler's blocks, plus the graphs' padding block
  std::vector<at::Tensor> key_blocks_, value_blocks_;
  std::unique_ptr<DecodeGraphs> graphs_;
  std::atomic<uint64_t> graph_steps_{0};

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, Pending> pending_;
  bool stop_ = false;
  bool kick_ = false;
  bool stepping_ = false;         // a plan is out: RunStep may be touching the memory
  bool loading_ = false;          // LoadWeights is rewriting the parameters
  bool weights_absent_ = false;
  bool kv_absent_ = false;
  std::atomic<bool> graphs_absent_{false};  // read by RunStep
  std::condition_variable step_done_;
  int64_t weight_version_ = 0;
  Status health_;
  uint64_t prompt_tokens_total_ = 0;
  uint64_t steps_ = 0;
  double plan_s_ = 0, launch_s_ = 0, wait_s_ = 0, commit_s_ = 0;  // EngineStats' step_*_seconds
  std::thread thread_;
};

}  // namespace tandem::inference

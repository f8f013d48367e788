// The rollout engine as the HTTP API sees it (issue #14 item 1;
// docs/inference.md "HTTP API"): the abstract interface between http_api and
// the engine that the integrator implements over the model (scheduler,
// paged KV cache, sampler). Torch-free; uses the shared types of
// generation.h.
//
// Threading contract:
// - The HTTP server runs on its own io thread and calls every method below
//   from that thread. Submit, Abort, Info, Stats and Health must not block
//   (take a short lock, enqueue, return); Pause, Continue and FlushCache may
//   block for at most one engine step.
// - The engine calls a request's SampleCallback from its own thread (or from
//   inside Abort/Pause, on the caller's thread). The callback only copies
//   the update and posts it to the server's io context; it never calls back
//   into the engine and never blocks, so the engine may call it while it
//   holds its own locks.
// - Per sample, updates arrive in order; each sample of a request gets
//   exactly one update with `finished` set, its last (also when aborted:
//   finish_reason kAbort). After every sample of a request has finished, the
//   engine drops the callback and never calls it again.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/inference/generation.h"

namespace tandem::inference {


// What one sample of a request did since its previous update.
struct SampleUpdate {
  int64_t sample = 0;               // which of the request's n samples, 0..n-1
  std::vector<int32_t> new_ids;     // tokens generated since the previous update
  std::vector<float> new_logprobs;  // their log-probs, when the request has return_logprob
  // Set on the sample's last update: its whole result (output_ids holds every
  // token, new_ids included).
  std::optional<SampleResult> finished;
};
using SampleCallback = std::function<void(SampleUpdate)>;

// GET /get_model_info.
struct EngineInfo {
  std::string model_path;         // the HF model directory
  std::string config_json;        // the model's config.json text (reported parsed)
  int64_t max_context_length = 0; // prompt + max_new_tokens may not exceed it
  int64_t vocab_size = 0;         // token ids lie in [0, vocab_size)
  int64_t weight_version = 0;     // the weights new requests start with
};

// GET /metrics. Totals count since the engine started and never go down.
struct EngineStats {
  int64_t running_requests = 0;   // in the running batch
  int64_t queued_requests = 0;    // accepted, waiting to join it
  uint64_t generated_tokens_total = 0;
  uint64_t prompt_tokens_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_free = 0;
  uint64_t prefix_cache_hit_tokens_total = 0;    // prompt tokens served from the prefix cache
  uint64_t prefix_cache_query_tokens_total = 0;  // prompt tokens looked up in it
  bool paused = false;
  // The engine thread's steps and where their time went (docs/inference.md
  // "A step's host work"): planning the batch, launching the model and the
  // sampler (host), waiting for the sampled tokens (the device's time left
  // after the launch), committing them and delivering updates. Zero for
  // engines without a step loop.
  uint64_t steps_total = 0;
  uint64_t graph_steps_total = 0;  // of them replayed through a CUDA graph
  double step_plan_seconds = 0, step_launch_seconds = 0, step_wait_seconds = 0, step_commit_seconds = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Queues `request` (its params have passed Validate, its ids lie in the
  // vocabulary and it fits the context). Returns its id, or
  // ResourceExhausted when the queue is full (the API answers 503 with
  // Retry-After), InvalidArgument for a request the engine cannot serve
  // (400), Unavailable when it is shutting down (503). While paused, requests
  // are accepted and wait for Continue. On error `on_update` is never called.
  virtual StatusOr<RequestId> Submit(GenerateRequest request, SampleCallback on_update) = 0;

  // Ends the request (the client went away, or asked): each unfinished
  // sample gets its `finished` update with kAbort. Unknown or finished ids
  // are ignored. Idempotent.
  virtual void Abort(RequestId id) = 0;

  // Stops generating, as `mode` says, until Continue. Pausing while paused
  // changes the mode (kAbort ends what waits). Continue while running is a no-op.
  virtual Status Pause(PauseMode mode) = 0;
  virtual Status Continue() = 0;

  // Empties the prefix cache. FailedPrecondition while requests run (as
  // SGLang's /flush_cache); the API answers 409.
  virtual Status FlushCache() = 0;

  // Ok while the engine can serve (GET /health answers 200, else 503 with
  // the message).
  virtual Status Health() const = 0;

  virtual EngineInfo Info() const = 0;
  virtual EngineStats Stats() const = 0;
};

}  // namespace tandem::inference

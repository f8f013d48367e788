// The rollout worker (issue #14; docs/inference.md "tandem-worker rollout"):
// loads a Hugging Face model directory into tagged memory (its parameters
// in the `weights` pool, the paged KV cache in `kv_cache`), starts the
// engine (generator.h) and serves SGLang's native HTTP API (http_api.h) on
// the given port. With a control endpoint it joins tandemd's handoff
// (engine_control.h): pause modes, release/resume of its tags, load_weights
// by version. It runs until SIGTERM or SIGINT, or the daemon's shutdown,
// then stops accepting, aborts what runs and exits.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "workers/roles/serve_options.h"

namespace tandem::roles {

struct RolloutOptions {
  ServeOptions serve;           // --model, --device, --port, --control, ... (serve_options.h)
  int64_t kv_cache_mib = 256;   // KV pool size (ignored when kv_blocks > 0)
  int32_t kv_blocks = 0;
  int32_t block_size = 16;
  int64_t max_running = 256;
  int64_t max_step_tokens = 8192;
  int64_t max_waiting = 1024;
  int64_t max_model_len = 0;    // 0: the model's max_position_embeddings
  uint64_t seed = 0;
  std::string cuda_graphs = "auto";  // decode graph batch sizes (DecodeGraphBatches)
};

// Blocks until a signal or the daemon asks it to stop. InvalidArgument for
// bad options or model files, Unavailable when the port cannot be bound or
// the daemon went away for good.
Status RunRollout(const RolloutOptions& options);

}  // namespace tandem::roles

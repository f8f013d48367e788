// The rollout worker (issue #14; docs/inference.md "tandem-worker rollout"):
// loads a Hugging Face model directory, starts the engine (generator.h) and
// serves SGLang's native HTTP API (http_api.h) on the given port until
// SIGTERM or SIGINT, then stops accepting, aborts what runs and exits.
// Not yet: the control protocol (release/resume of the memory tags, pause
// modes carried by `pause`, load_weights by version).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem::roles {

struct RolloutOptions {
  std::string model_dir;        // config.json, *.safetensors, optionally tokenizer.json
  std::string device = "cpu";   // cpu (fp32) or cuda (bf16)
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: the first of $TANDEM_PORTS, else any free port
  int64_t kv_cache_mib = 256;   // KV pool size (ignored when kv_blocks > 0)
  int32_t kv_blocks = 0;
  int32_t block_size = 16;
  int64_t max_running = 256;
  int64_t max_step_tokens = 8192;
  int64_t max_waiting = 1024;
  int64_t max_model_len = 0;    // 0: the model's max_position_embeddings
  uint64_t seed = 0;
  int threads = 0;              // LibTorch intra-op threads (0: its default)
  std::string port_file;        // write the bound port here once listening (tests, scripts)
};

// Blocks until a signal asks it to stop. InvalidArgument for bad options or
// model files, Unavailable when the port cannot be bound.
Status RunRollout(const RolloutOptions& options);

}  // namespace tandem::roles

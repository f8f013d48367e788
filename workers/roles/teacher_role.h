// The teacher worker (issue #14 item 6; docs/inference.md "tandem-worker
// teacher"): loads a Hugging Face model directory with its parameters in
// the `weights` tagged-memory pool (backed up to host on release), starts
// the scorer (workers/inference/scorer.h) and serves POST /score
// (workers/inference/score_api.h) on the given port. With a control
// endpoint it joins tandemd's handoff (engine_control.h): pause, release
// and resume of `weights`, load_weights by version. It runs until SIGTERM
// or SIGINT, or the daemon's shutdown, then stops accepting, ends what
// waits and exits.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "workers/roles/serve_options.h"

namespace tandem::roles {

struct TeacherOptions {
  ServeOptions serve;               // --model, --device, --port, --control, ... (serve_options.h)
  int64_t max_batch_tokens = 16384; // input tokens per forward
  int64_t max_waiting = 1024;       // queued requests before 503
  int64_t max_model_len = 0;        // tokens per sequence; 0: the model's max_position_embeddings
};

// Blocks until a signal or the daemon asks it to stop. InvalidArgument for
// bad options or model files, Unavailable when the port cannot be bound or
// the daemon went away for good.
Status RunTeacher(const TeacherOptions& options);

}  // namespace tandem::roles

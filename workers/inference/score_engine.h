// The teacher's engine as its HTTP API sees it (issue #14 item 6;
// docs/inference.md "tandem-worker teacher"): the abstract interface between
// score_api and the scorer (scorer.h) that runs the model forward-only.
// Torch-free.
//
// Threading contract (as engine.h's): the server calls every method from its
// io thread; none blocks beyond a short lock. The engine calls a request's
// ScoreCallback exactly once — with its result, or with the error that
// ended it (Unavailable after Abort, a pause with mode abort, new weights
// loaded while it was half scored, or shutdown — the API answers 503 and the
// client may retry; Internal for a failed forward) — from its own thread or from inside
// Abort/Pause/the destructor; the callback only posts to the server's io
// context and never calls back into the engine.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "workers/inference/engine.h"
#include "workers/inference/score_json.h"

namespace tandem::inference {

using ScoreCallback = std::function<void(StatusOr<ScoreResult>)>;

// GET /metrics. Totals count since the engine started and never go down.
struct ScoreStats {
  int64_t running_requests = 0;  // some of its sequences are being scored
  int64_t queued_requests = 0;   // accepted, none of it scored yet
  uint64_t requests_total = 0;   // answered with a result
  uint64_t sequences_total = 0;
  uint64_t input_tokens_total = 0;   // tokens of the sequences scored
  uint64_t packed_tokens_total = 0;  // of them, run through the model (shared prefixes once)
  uint64_t scored_tokens_total = 0;
  uint64_t forwards_total = 0;
  bool paused = false;
};

class ScoreEngine {
 public:
  virtual ~ScoreEngine() = default;
  // Queues `request` (it has passed ParseScoreBody's checks). Returns its
  // id, or ResourceExhausted when the queue is full (503 with Retry-After),
  // Unavailable while shutting down. While paused, requests wait. On error
  // `done` is never called.
  virtual StatusOr<RequestId> Submit(ScoreRequest request, ScoreCallback done) = 0;
  // Ends the request (its `done` gets Unavailable unless it ran already).
  // Unknown ids are ignored.
  virtual void Abort(RequestId id) = 0;
  virtual Status Health() const = 0;
  virtual EngineInfo Info() const = 0;
  virtual ScoreStats Stats() const = 0;
};

}  // namespace tandem::inference

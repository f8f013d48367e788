// The teacher's HTTP API (issue #14 item 6; docs/inference.md
// "tandem-worker teacher"): POST /score over a ScoreEngine (score_engine.h),
// served on its own io thread (api_service.h).
//
//   POST /score            JSON (score_json.h): per-token log-probs of the
//                          given sequences, optionally the top-k per position
//   GET  /health           200 while ScoreEngine::Health is ok, else 503
//   GET  /get_model_info   model path, config, context, vocab, weight version
//   GET  /metrics          Prometheus text (tandem_teacher_*)
//
// Errors are {"error": {"message", "code"}} and map as the rollout's API
// (http_api.h). A client that disconnects before its answer has its request
// aborted (ScoreEngine::Abort).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/inference/http_server.h"
#include "workers/inference/score_engine.h"
#include "workers/inference/score_json.h"

namespace tandem::inference {

struct ScoreApiOptions {
  std::string host = "127.0.0.1";  // loopback unless allow_remote
  int port = 0;                    // the caller's leased port; 0 picks one
  bool allow_remote = false;
  HttpLimits http;
  // vocab_size and max_context_length are taken from ScoreEngine::Info per request.
  ScoreLimits score;
  int retry_after_s = 1;
};

class ScoreApiServer {
 public:
  // `engine` must outlive the server.
  ScoreApiServer(ScoreEngine& engine, ScoreApiOptions options);
  ~ScoreApiServer();  // Stop()
  ScoreApiServer(const ScoreApiServer&) = delete;
  ScoreApiServer& operator=(const ScoreApiServer&) = delete;

  Status Start();
  int port() const;
  // Closes every connection, aborts the requests in flight and joins the io
  // thread. Idempotent; not from the io thread.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::inference

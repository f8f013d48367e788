// The rollout worker's HTTP API (issue #14 item 1; docs/inference.md "HTTP
// API"): SGLang's native endpoints over an Engine (engine.h), served by
// http_server on its own io thread.
//
//   POST /generate             JSON (generate_json.h), or server-sent events
//                              when "stream": true
//   GET  /health               200 while Engine::Health is ok, else 503
//   GET  /get_model_info       model path, config, context, vocab, weight version
//   POST /flush_cache          (GET too, as SGLang) 200, or 409 while requests run
//   POST /pause_generation     {"mode": "abort" | "retract" | "in_place"}
//   POST /continue_generation
//   GET  /metrics              Prometheus text
//
// Every error is {"error": {"message", "code"}} with the message naming the
// field at fault. The engine's answers map to HTTP as: InvalidArgument 400,
// NotFound 404, FailedPrecondition 409, ResourceExhausted and Unavailable 503
// with Retry-After, anything else 500. A client that disconnects, or a
// stream reader that falls max_stream_queue_bytes behind and is dropped, has
// its requests aborted (Engine::Abort). Threading: the server's state lives
// on its io thread; engine callbacks only post to it (engine.h's contract).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/inference/engine.h"
#include "workers/inference/generate_json.h"
#include "workers/inference/http_server.h"

namespace tandem::inference {

struct HttpApiOptions {
  std::string host = "127.0.0.1";  // loopback unless allow_remote
  int port = 0;                    // the caller's leased port (TANDEM_PORTS); 0 picks one
  bool allow_remote = false;
  HttpLimits http;
  // vocab_size and max_context_length are taken from Engine::Info per request.
  GenerateLimits generate;
  int retry_after_s = 1;           // Retry-After of a 503
  std::shared_ptr<const TextCodec> codec;  // null: "text" prompts are refused and answers carry no "text"
};

class HttpApiServer {
 public:
  // `engine` must outlive the server.
  HttpApiServer(Engine& engine, HttpApiOptions options);
  ~HttpApiServer();  // Stop()
  HttpApiServer(const HttpApiServer&) = delete;
  HttpApiServer& operator=(const HttpApiServer&) = delete;

  // Binds and starts the io thread.
  Status Start();
  int port() const;
  // Closes every connection, aborts the requests in flight and joins the io
  // thread. Idempotent; call from any thread but the io thread.
  void Stop();

  const HttpCounters& http_counters() const;
  // /generate calls in flight (each holds its samples' tokens): for tests
  // and /metrics. Read from any thread.
  int64_t open_generate_calls() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::inference

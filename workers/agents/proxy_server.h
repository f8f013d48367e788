// The OpenAI-compatible proxy in front of the rollout replicas (issue #20
// item 2; docs/agents.md): POST /v1/chat/completions and /v1/completions
// over the replicas' POST /generate, every call recorded per session with
// its exact tokens (session_store.h).
//
//   POST /v1/chat/completions, POST /v1/completions   OpenAI (openai_request.h)
//   GET  /v1/models                                   the one model served
//   GET  /v1/sessions/{id}                            the session's export (session_store.h)
//   DELETE /v1/sessions/{id}                          frees the session
//   POST /pause_generation, /continue_generation      Pause(), Resume()
//   GET  /health                                      200 while a replica is up, else 503
//   GET  /metrics                                     Prometheus text
//
// Threads: the HTTP server, the replica choice, the upstream calls and the
// pause queue live on one io thread, which never blocks; parsing, the chat
// template, tokenisation, decoding, tool-call parsing, session matching and
// the answers' JSON run on a pool of `worker_threads` (proxy_call.h), which
// posts back. So Pause(), Resume() and a call's OnClose are served within
// one io-thread handler (microseconds) whatever the pool is doing.
//
// A call: prepared on the pool; while paused it waits (at most pause_wait,
// at most max_paused calls; beyond either: 503 + Retry-After); then sent to
// the replica ReplicaSet::Pick gives; a replica that is down (refused,
// reset, 503) or whose samples ended "abort" is left for another, within
// the call's deadline (request_timeout from its arrival; every upstream
// RPC is bounded by it); no replica up: the call waits retry_wait and asks
// again. The deadline passed: 504 "timeout". A client that goes away has
// its upstream call closed (the rollout aborts it) and nothing recorded.
// A stream without tool calls or stop strings is forwarded as the rollout
// generates (proxy_call.h ForwardsStream): its events become chunks on the
// pool, in order (a strand per call); a replica failing after the first
// chunk ends the stream with an error event.
//
// Stop(): stops accepting, closes every connection and upstream call, ends
// the waiting calls, waits for the pool's running tasks (each one call's
// CPU work: bounded by the body limit) and joins the io thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/agents/openai_request.h"
#include "workers/agents/replica_set.h"
#include "workers/agents/session_store.h"
#include "workers/data/tokenizer.h"
#include "workers/inference/http_server.h"

namespace tandem::agents {

struct ProxyOptions {
  std::string host = "127.0.0.1";  // loopback unless allow_remote
  int port = 0;                    // 0 picks one
  bool allow_remote = false;
  std::string model = "tandem";    // GET /v1/models; answers echo the request's model when it names one
  // The server's limits; a whole answer is queued at once when streamed
  // (proxy_server.cc), so the stream bound is an answer's size.
  inference::HttpLimits http = {.max_stream_queue_bytes = 256u << 20};
  RequestLimits request;
  SessionLimits sessions;
  ReplicaOptions replicas;
  int worker_threads = 2;
  std::chrono::milliseconds request_timeout{600'000};  // a call's deadline from its arrival, retries included
  std::chrono::milliseconds pause_wait{300'000};       // the longest a call waits while paused
  size_t max_paused = 4096;                            // calls waiting while paused
  std::chrono::milliseconds retry_wait{100};           // no replica up: ask again after this
  int retry_after_s = 1;                               // Retry-After of a 503
  size_t max_upstream_bytes = 256u << 20;              // a /generate answer
};

class Proxy {
 public:
  Proxy(data::Tokenizer tokenizer, ProxyOptions options);
  ~Proxy();  // Stop()
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Binds and starts the io thread and the pool.
  Status Start();
  int port() const;
  // Idempotent; from any thread but the io thread.
  void Stop();

  // New calls wait until Resume (calls already at a replica go on; the
  // controller pauses the replicas themselves). Thread-safe; returns at once.
  void Pause();
  void Resume();
  bool paused() const;

  StatusOr<SessionExport> ExportSession(const std::string& id) const;
  Status CloseSession(const std::string& id);
  size_t open_sessions() const;
  // Calls accepted and not yet answered; calls waiting while paused.
  size_t calls_in_flight() const;
  size_t calls_paused() const;
  // Calls sent again to a replica after one failed them (down, 503, abort).
  uint64_t calls_retried() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::agents

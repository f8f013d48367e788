// The rollout worker's HTTP/1.1 server over Boost.Beast (issue #14 item 1;
// docs/inference.md "HTTP API", "Limits"): TCP, one io_context, handlers run
// on it. The routes are http_api's; this file knows nothing about them.
// Modeled on tandemd's server (orchestrator/daemon/http_server.h), without
// its unix socket and bearer tokens: the worker binds loopback unless told.
//
// Hostile input (HttpLimits): request headers over max_header_bytes are
// answered 431, bodies over max_body_bytes 413, a malformed request 400 (then
// the connection is closed); a request not read within read_timeout_s (an
// idle keep-alive connection too) is closed; beyond max_connections a new
// connection is closed at once (logged 1st, 2nd, 4th, ... time). A handler
// that throws is answered 500 and logged; nothing a client sends can throw
// out of the io thread.
//
// A handler answers with HttpExchange::Respond (one whole response) or
// streams: BeginStream, Write..., End (chunked transfer encoding, then the
// connection closes). The bytes a stream has queued but not sent are bounded
// by max_stream_queue_bytes: the Write that takes them over drops the client
// (logged, counted). OnClose tells the handler that the exchange ended
// without its answer being sent: the client went away (noticed while the
// handler works, also before a stream begins), was dropped, or the server
// closed. A handler must not keep an exchange past OnClose.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::inference {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // the target without its query ("/generate")
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void Respond(int status, const std::string& content_type, std::string body,
                       const HttpHeaders& extra = {}) = 0;
  // Invalid UTF-8 in `body` is replaced, never thrown on.
  void RespondJson(int status, const nlohmann::json& body, const HttpHeaders& extra = {});
  // {"error": {"message": message, "code": code}}.
  void RespondError(int status, std::string_view code, std::string_view message, const HttpHeaders& extra = {});
  virtual void BeginStream(const std::string& content_type) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;
  virtual bool closed() const = 0;
  virtual void OnClose(std::function<void()> cb) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpExchange>)>;

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 16 * 1024 * 1024;  // a batch of prompts as token ids
  int read_timeout_s = 30;
  size_t max_connections = 512;
  size_t max_stream_queue_bytes = 4 * 1024 * 1024;
};

// What the server did, for /metrics and tests. Read from any thread.
struct HttpCounters {
  std::atomic<int64_t> open_connections{0};
  std::atomic<uint64_t> refused_connections{0};   // over max_connections
  std::atomic<uint64_t> dropped_slow_clients{0};  // a stream over max_stream_queue_bytes
  std::atomic<uint64_t> peak_stream_queue_bytes{0};  // the most one stream ever had queued
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, HttpHandler handler, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 picks one; see port()) and starts accepting.
  // A host that is not a loopback address needs allow_remote.
  Status Listen(const std::string& host, int port, bool allow_remote);
  int port() const;
  // Stops accepting and closes every open connection (each exchange's OnClose
  // runs). Call on the io thread, or once it has stopped.
  void Close();
  const HttpCounters& counters() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::inference

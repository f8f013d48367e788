// tandemd's HTTP/1.1 server (issue #2 part 3; schemas/api.schema.json).
//
// Listens on a unix socket (mode 0600; no token: the file mode is the access
// control) and, only when asked, on a TCP address where every request must
// carry `Authorization: Bearer <token>` (401 otherwise). Binding a
// non-loopback address is refused unless the caller explicitly allows it.
//
// Limits (HttpLimits; the daemon's settings table sets them, docs/api.md
// lists them): request headers 16 KiB (431), bodies 1 MiB (413), 30 s to read
// a request (then the connection is closed). Connections are capped per
// listener, so a flood on TCP cannot starve the unix socket: at most
// `max_unix_connections` on the unix socket (503 beyond), and on TCP at most
// `max_tcp_unauthenticated` connections that have not yet sent a request with
// the right token (closed at once beyond; each has `auth_timeout_s` to send
// its request header), of which one peer may hold at most
// `max_tcp_unauthenticated_per_peer` (a peer: an IPv4 address, an IPv6 /64;
// beyond, its new connections are closed at once, so one flooding peer
// cannot lock other peers out), plus `max_tcp_connections` authenticated
// ones (503).
// A malformed request is answered 400 and closed; a handler that throws is
// answered 500 and logged; nothing a client sends can take the daemon down.
// Runs on the daemon's io_context; handlers run there.
//
// A handler answers with Exchange::Respond (a whole response) or streams with
// Exchange::BeginStream + Write... + End (chunked transfer encoding; used by
// log following and server-sent events). OnClose tells a streaming handler
// that the client went away. A stream's unsent bytes are bounded: a Write
// that takes them over `max_stream_queue_bytes` drops the client (logged).
// A producer that can wait (a file being followed) writes while !backlogged()
// and resumes from OnDrain, so a client that does not read costs nothing.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::daemon {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // "/v1/jobs/abc", percent-decoded
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void Respond(int status, const std::string& content_type, std::string body) = 0;
  // Invalid UTF-8 in `body` (a path a client sent) is replaced, never thrown on.
  void RespondJson(int status, const nlohmann::json& body) {
    Respond(status, "application/json", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  // {"error": {"code": "...", "message": "...", "details": [...]?}}
  void RespondError(int status, std::string_view code, std::string_view message,
                    nlohmann::json details = nullptr);
  virtual void BeginStream(const std::string& content_type) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;
  virtual bool closed() const = 0;
  virtual void OnClose(std::function<void()> cb) = 0;
  // True while the stream's unsent bytes are at least half its bound: a
  // producer that can wait should stop writing and resume from OnDrain.
  virtual bool backlogged() const = 0;
  // Called once, the next time every queued byte has been sent.
  virtual void OnDrain(std::function<void()> cb) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<Exchange>)>;

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 1024 * 1024;
  int read_timeout_s = 30;
  size_t max_unix_connections = 256;
  size_t max_tcp_connections = 256;       // authenticated
  size_t max_tcp_unauthenticated = 64;    // accepted, no request with the token yet
  size_t max_tcp_unauthenticated_per_peer = 8;  // of those, from one address (IPv6: one /64)
  int auth_timeout_s = 5;                 // for those to send their request header
  size_t max_stream_queue_bytes = 4 * 1024 * 1024;
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, HttpHandler handler, HttpLimits limits = {});
  ~HttpServer();
  // Binds `path` (removing a stale socket file first), mode 0600.
  Status ListenUnix(const std::filesystem::path& path);
  // Binds "HOST:PORT" (port 0 picks one; see tcp_port()). Requires a token;
  // a non-loopback host requires allow_remote.
  Status ListenTcp(const std::string& host_port, std::string token, bool allow_remote);
  int tcp_port() const;
  void Close();  // stops accepting; open connections finish

  struct Impl;
 private:
  std::shared_ptr<Impl> impl_;
};

// The request as the server reads it, from raw bytes: what a session does
// with its socket, as a function (used by the fuzz target). Returns
// kInvalidArgument for a malformed or incomplete request and
// kResourceExhausted for one over the limits.
Status ParseHttpRequest(std::string_view bytes, const HttpLimits& limits, HttpRequest* out);

// The peer a TCP connection counts against: "203.0.113.7" for IPv4 (and
// IPv4-mapped IPv6), "2001:db8:1:2::/64" for IPv6.
std::string PeerKey(const boost::asio::ip::address& address);

// Splits "/v1/jobs/x?a=1&b=%20" into a path and decoded query parameters.
Status ParseTarget(std::string_view target, std::string* path,
                   std::map<std::string, std::string>* query);

}  // namespace tandem::daemon

// Synchronous API client; see client.h.
#include "orchestrator/cli/client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <limits>

namespace tandem::cli {

namespace asio = boost::asio;
namespace http = boost::beast::http;

nlohmann::json Response::Json() const { return nlohmann::json::parse(body, nullptr, false); }

namespace {

template <typename Socket>
StatusOr<Response> DoRequest(Socket& sock, const Endpoint& ep, const std::string& method,
                             const std::string& target, const std::string& body) {
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, ep.unix_path.empty() ? ep.host : "localhost");
  req.set(http::field::user_agent, "tandem");
  if (!ep.token.empty()) req.set(http::field::authorization, "Bearer " + ep.token);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  req.keep_alive(false);
  boost::system::error_code ec, write_ec;
  // A server may answer (413) and close before it read the whole body: the
  // write then fails, but the answer is still there to read.
  http::write(sock, req, write_ec);
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 34);
  http::read(sock, buf, parser, ec);
  if (ec && write_ec) return Unavailable("send request: " + write_ec.message());
  if (ec) return Unavailable("read response: " + ec.message());
  return Response{static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

template <typename Socket>
StatusOr<int> DoStream(Socket& sock, const Endpoint& ep, const std::string& target,
                       const std::function<void(std::string_view)>& on_data, const std::function<void(int)>& on_status) {
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, "localhost");
  if (!ep.token.empty()) req.set(http::field::authorization, "Bearer " + ep.token);
  req.keep_alive(false);
  boost::system::error_code ec;
  http::write(sock, req, ec);
  if (ec) return Unavailable("send request: " + ec.message());
  boost::beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  // Not boost::none: Boost 1.74's parser compares a Content-Length against
  // the empty optional as "over the limit" (any fixed-length answer failed).
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(sock, buf, parser, ec);
  if (ec) return Unavailable("read response: " + ec.message());
  if (on_status) on_status(static_cast<int>(parser.get().result_int()));
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    // read_some, not read: read() returns only once the chunk buffer is full
    // or the response ended, which held a follower's lines back for minutes.
    http::read_some(sock, buf, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return Unavailable("stream ended: " + ec.message());
    const size_t n = sizeof chunk - parser.get().body().size;
    if (n > 0) on_data(std::string_view(chunk, n));
  }
  return static_cast<int>(parser.get().result_int());
}

template <typename Fn>
auto WithSocket(const Endpoint& ep, Fn&& fn) -> decltype(fn(std::declval<asio::ip::tcp::socket&>())) {
  asio::io_context io;
  boost::system::error_code ec;
  if (!ep.unix_path.empty()) {
    asio::local::stream_protocol::socket sock(io);
    sock.connect(asio::local::stream_protocol::endpoint(ep.unix_path), ec);
    if (ec) return Unavailable("cannot reach tandemd at " + ep.unix_path + ": " + ec.message());
    return fn(sock);
  }
  asio::ip::tcp::socket sock(io);
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (!ec) asio::connect(sock, results, ec);
  if (ec) return Unavailable("cannot reach tandemd at " + ep.host + ":" + std::to_string(ep.port) + ": " + ec.message());
  return fn(sock);
}

}  // namespace

StatusOr<Response> Client::Request(const std::string& method, const std::string& target,
                                   const std::string& body) {
  return WithSocket(ep_, [&](auto& sock) -> StatusOr<Response> {
    struct timeval tv{timeout_s_, 0};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return DoRequest(sock, ep_, method, target, body);
  });
}

StatusOr<int> Client::Stream(const std::string& target, const std::function<void(std::string_view)>& on_data,
                             const std::function<void(int)>& on_status) {
  return WithSocket(ep_, [&](auto& sock) -> StatusOr<int> { return DoStream(sock, ep_, target, on_data, on_status); });
}

std::string ErrorText(const Response& r) {
  auto j = r.Json();
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    if (e.contains("details") && e["details"].is_array() && !e["details"].empty()) {
      std::string out;
      for (const auto& d : e["details"])
        out += (out.empty() ? "" : "\n") + (d.value("path", "").empty() ? "" : d.value("path", "") + ": ") + d.value("message", "");
      return out;
    }
    return e.value("message", r.body);
  }
  return "HTTP " + std::to_string(r.status) + ": " + r.body;
}

}  // namespace tandem::cli

// One blocking HTTP POST (http_post.h).
#include "workers/roles/http_post.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace tandem::roles {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

// Runs the io_context until the pending operation completed.
void Run(boost::asio::io_context& io) {
  io.run();
  io.restart();
}

}  // namespace

StatusOr<std::string> PostJson(const std::string& host, int port, const std::string& target, std::string body,
                               std::chrono::milliseconds timeout, const std::string& where, size_t max_bytes,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  stream.expires_after(timeout);
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Unavailable(where + ": resolve: " + ec.message());
  stream.async_connect(endpoints, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": no connection within the timeout");
  if (ec) return Unavailable(where + ": connect: " + ec.message());

  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = std::move(body);
  req.prepare_payload();
  http::async_write(stream, req, [&ec](beast::error_code e, size_t) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": the request was not taken within the timeout");
  if (ec) return Unavailable(where + ": write: " + ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_bytes);
  http::async_read(stream, buffer, parser, [&ec](beast::error_code e, size_t) { ec = e; });
  Run(io);
  if (ec == beast::error::timeout) return DeadlineExceeded(where + ": no answer within the timeout");
  if (ec) return Unavailable(where + ": read: " + ec.message());
  http::response<http::string_body> res = parser.release();
  if (res.result_int() != 200)
    return Unavailable(where + ": HTTP " + std::to_string(res.result_int()) + ": " + res.body().substr(0, 300));
  return std::move(res.body());
}

}  // namespace tandem::roles

// An asynchronous POST to a replica over Beast (upstream_call.h).
#include "workers/agents/upstream_call.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace tandem::agents {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;
using Outcome = UpstreamResult::Outcome;

class Call final : public UpstreamCall, public std::enable_shared_from_this<Call> {
 public:
  Call(boost::asio::io_context& io, std::function<void(UpstreamResult)> done,
       std::function<void(std::string_view)> on_body)
      : stream_(io), done_(std::move(done)), on_body_(std::move(on_body)) {}

  void Start(const std::string& host, int port, const std::string& target, std::string body,
             std::chrono::steady_clock::time_point deadline, size_t max_bytes) {
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(host, ec);
    if (ec) {
      // Never call back from inside PostAsync.
      auto self = shared_from_this();
      const std::string error = "bad replica address " + host + ": " + ec.message();
      return boost::asio::post(stream_.get_executor(), [self, error] { self->Finish(Outcome::kReplicaDown, error); });
    }
    req_ = {http::verb::post, target, 11};
    req_.set(http::field::host, host);
    req_.set(http::field::content_type, "application/json");
    req_.body() = std::move(body);
    req_.prepare_payload();
    if (on_body_) {
      // A stream's body is not kept (what a non-200 says is, bounded).
      parser_.body_limit(boost::none);
      chunk_cb_ = [this, max_bytes](std::uint64_t, beast::string_view chunk, beast::error_code& error) -> std::size_t {
        const std::string_view bytes(chunk.data(), chunk.size());
        if (finished_) return bytes.size();
        if (parser_.get().result_int() == 200) {
          on_body_(bytes);
        } else if (error_body_.size() + bytes.size() <= max_bytes) {
          error_body_.append(bytes);
        } else {
          error = http::error::body_limit;
        }
        return bytes.size();
      };
      parser_.on_chunk_body(chunk_cb_);
    } else {
      parser_.body_limit(max_bytes);
    }
    stream_.expires_at(deadline);
    auto self = shared_from_this();
    stream_.async_connect(tcp::endpoint(address, static_cast<unsigned short>(port)),
                          [self](beast::error_code e) { self->OnConnect(e); });
  }

  void Cancel() override {
    if (finished_) return;
    Finish(Outcome::kCancelled, "cancelled");
  }

 private:
  void OnConnect(beast::error_code ec) {
    if (finished_) return;
    if (ec) return Failed(ec, "connect");
    auto self = shared_from_this();
    http::async_write(stream_, req_, [self](beast::error_code e, size_t) { self->OnWrite(e); });
  }
  void OnWrite(beast::error_code ec) {
    if (finished_) return;
    if (ec) return Failed(ec, "write");
    auto self = shared_from_this();
    http::async_read(stream_, buffer_, parser_, [self](beast::error_code e, size_t) { self->OnRead(e); });
  }
  void OnRead(beast::error_code ec) {
    if (finished_) return;
    if (ec) return Failed(ec, "read");
    http::response<http::string_body> res = parser_.release();
    UpstreamResult r;
    r.http_status = res.result_int();
    r.body = std::move(res.body());
    if (on_body_ && r.body.empty()) r.body = std::move(error_body_);
    if (r.http_status == 200) {
      r.outcome = Outcome::kOk;
    } else if (r.http_status == 503) {
      r.outcome = Outcome::kReplicaDown;
      r.error = "HTTP 503: " + r.body.substr(0, 300);
    } else {
      r.outcome = Outcome::kRefused;
      r.error = "HTTP " + std::to_string(r.http_status) + ": " + r.body.substr(0, 300);
    }
    Deliver(std::move(r));
  }
  void Failed(beast::error_code ec, const char* what) {
    if (ec == beast::error::timeout) return Finish(Outcome::kTimeout, std::string("no answer within the deadline (") + what + ")");
    if (ec == http::error::body_limit) return Finish(Outcome::kRefused, "the answer is over the size limit");
    Finish(Outcome::kReplicaDown, std::string(what) + ": " + ec.message());
  }
  void Finish(Outcome outcome, std::string error) {
    UpstreamResult r;
    r.outcome = outcome;
    r.error = std::move(error);
    Deliver(std::move(r));
  }
  void Deliver(UpstreamResult r) {
    if (finished_) return;
    finished_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    auto done = std::move(done_);
    done_ = nullptr;
    if (done) done(std::move(r));
  }

  beast::tcp_stream stream_;
  std::function<void(UpstreamResult)> done_;
  std::function<void(std::string_view)> on_body_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> chunk_cb_;
  std::string error_body_;
  http::request<http::string_body> req_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool finished_ = false;
};

}  // namespace

std::shared_ptr<UpstreamCall> PostAsync(boost::asio::io_context& io, const std::string& host, int port,
                                        const std::string& target, std::string body,
                                        std::chrono::steady_clock::time_point deadline, size_t max_bytes,
                                        std::function<void(UpstreamResult)> done,
                                        std::function<void(std::string_view)> on_body) {
  auto call = std::make_shared<Call>(io, std::move(done), std::move(on_body));
  call->Start(host, port, target, std::move(body), deadline, max_bytes);
  return call;
}

}  // namespace tandem::agents

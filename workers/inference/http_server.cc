// The rollout worker's HTTP/1.1 server; see http_server.h for the contract and limits.
#include "workers/inference/http_server.h"

#include <cctype>
#include <cstdio>
#include <deque>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include "common/bounded_json.h"
#include "common/log.h"
#include "common/peer_state.h"
#include "workers/inference/generate_json.h"

namespace tandem::inference {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

void HttpExchange::RespondJson(int status, const nlohmann::json& body, const HttpHeaders& extra) {
  Respond(status, "application/json", DumpJson(body) + "\n", extra);
}

void HttpExchange::RespondError(int status, std::string_view code, std::string_view message,
                                const HttpHeaders& extra) {
  RespondJson(status, ErrorJson(code, message), extra);
}

namespace {

// 1st, 2nd, 4th, 8th, ...: a flood is logged, not echoed.
bool PowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

std::string_view ReasonPhrase(int status) {
  const auto r = http::obsolete_reason(static_cast<http::status>(status));
  return std::string_view(r.data(), r.size());
}

}  // namespace

// Not in the anonymous namespace: Impl (external linkage) holds its sessions.
namespace http_internal {
class Session;
}  // namespace http_internal
using http_internal::Session;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  asio::io_context& io;
  HttpHandler handler;
  HttpLimits limits;
  HttpCounters counters;
  std::unique_ptr<tcp::acceptor> acceptor;
  asio::steady_timer retry;  // after a failed accept (EMFILE): wait, then accept again
  std::map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_session = 0;
  bool closed = false;

  Impl(asio::io_context& i, HttpHandler h, HttpLimits l) : io(i), handler(std::move(h)), limits(l), retry(i) {}
  void Accept();
};

namespace http_internal {

// One connection; holds itself alive through the operations it has in flight.
class Session : public HttpExchange, public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, uint64_t key)
      : server_(std::move(server)), socket_(std::move(socket)), timer_(server_->io), key_(key) {
    ++server_->counters.open_connections;
  }
  ~Session() override {
    --server_->counters.open_connections;
    server_->sessions.erase(key_);
  }

  void Start() { ReadRequest(); }

  void Respond(int status, const std::string& content_type, std::string body, const HttpHeaders& extra) override {
    if (!awaiting_ || streaming_ || closed_) return;
    awaiting_ = false;
    on_close_ = nullptr;  // answered
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "tandem-worker");
    res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : extra) res->set(name, value);
    res->keep_alive(keep_alive_ && status < 500 && status != 400 && status != 413 && status != 431);
    res->body() = std::move(body);
    res->prepare_payload();
    auto self = shared_from_this();
    http::async_write(socket_, *res, [self, res](boost::system::error_code ec, size_t) {
      if (ec || !res->keep_alive()) return self->Shutdown();
      self->ReadRequest();
    });
  }

  void BeginStream(const std::string& content_type) override {
    if (!awaiting_ || streaming_ || closed_) return;
    streaming_ = true;
    Enqueue("HTTP/1.1 200 " + std::string(ReasonPhrase(200)) + "\r\nServer: tandem-worker\r\nContent-Type: " +
            content_type + "\r\nCache-Control: no-cache\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n");
  }

  void Write(std::string data) override {
    if (!streaming_ || ended_ || closed_ || data.empty()) return;
    char head[24];
    std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    Enqueue(std::string(head) + data + "\r\n");
  }

  void End() override {
    if (!streaming_ || ended_ || closed_) return;
    ended_ = true;
    on_close_ = nullptr;  // answered (the last bytes may still be in flight)
    Enqueue("0\r\n\r\n");
  }

  bool closed() const override { return closed_; }
  void OnClose(std::function<void()> cb) override {
    if (closed_ && cb) return asio::post(server_->io, std::move(cb));
    on_close_ = std::move(cb);
  }

  void Shutdown() {
    if (closed_) return;
    closed_ = true;
    awaiting_ = false;
    CancelTimer();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    // Free what will never be sent; the front is the buffer of the write in flight.
    if (queue_.size() > 1) queue_.erase(queue_.begin() + 1, queue_.end());
    queued_bytes_ = queue_.empty() ? 0 : queue_.front().size();
    if (on_close_) {
      auto cb = std::move(on_close_);
      on_close_ = nullptr;
      cb();
    }
  }

 private:
  void Enqueue(std::string bytes) {
    const size_t limit = server_->limits.max_stream_queue_bytes;
    // A client that keeps up (nothing queued) may take one chunk of any size.
    if (!queue_.empty() && queued_bytes_ + bytes.size() > limit) {
      const uint64_t dropped = ++server_->counters.dropped_slow_clients;
      log::Warn("http", "dropped a client that does not read its stream path={} queued_bytes={} limit={} dropped={}",
                path_, queued_bytes_, limit, dropped);
      return Shutdown();
    }
    queued_bytes_ += bytes.size();
    auto& peak = server_->counters.peak_stream_queue_bytes;
    if (queued_bytes_ > peak.load()) peak.store(queued_bytes_);
    queue_.push_back(std::move(bytes));
    if (queue_.size() == 1) WriteNext();
  }

  void WriteNext() {
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(queue_.front()), [self](boost::system::error_code ec, size_t) {
      if (ec || self->closed_) return self->Shutdown();
      self->queued_bytes_ -= self->queue_.front().size();
      self->queue_.pop_front();
      if (!self->queue_.empty()) return self->WriteNext();
      if (self->ended_) self->Shutdown();
    });
  }

  // A timer generation, so that a deadline that fired for an earlier read
  // cannot close the connection during a later one.
  void ArmTimer(int seconds) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::chrono::seconds(seconds));
    std::weak_ptr<Session> weak = shared_from_this();
    timer_.async_wait([weak, gen](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->timer_gen_ != gen) return;
      log::Debug("http", "closed a connection: no whole request in time timeout_s={}", self->server_->limits.read_timeout_s);
      self->Shutdown();
    });
  }
  void CancelTimer() {
    ++timer_gen_;
    timer_.cancel();
  }

  void ReadRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->limits.max_header_bytes));
    parser_->body_limit(server_->limits.max_body_bytes);
    ArmTimer(server_->limits.read_timeout_s);  // for the whole request
    auto self = shared_from_this();
    http::async_read_header(socket_, buffer_, *parser_, [self](boost::system::error_code ec, size_t) {
      if (ec) return self->ReadFailed(ec);
      self->OnHeader();
    });
  }

  // A client that sent "Expect: 100-continue" (curl, for bodies over 1 KiB)
  // waits for a 100 before sending its body.
  void OnHeader() {
    if (parser_->is_done()) return Dispatch();
    auto self = shared_from_this();
    auto read_body = [self] {
      http::async_read(self->socket_, self->buffer_, *self->parser_, [self](boost::system::error_code ec, size_t) {
        if (ec) return self->ReadFailed(ec);
        self->Dispatch();
      });
    };
    if (!boost::beast::iequals(parser_->get()[http::field::expect], "100-continue")) return read_body();
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue), [self, read_body](boost::system::error_code ec, size_t) {
      if (ec) return self->Shutdown();
      read_body();
    });
  }

  void ReadFailed(boost::system::error_code ec) {
    CancelTimer();
    if (closed_ || ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset)
      return Shutdown();
    keep_alive_ = false;
    awaiting_ = true;
    if (ec == http::error::body_limit)
      RespondError(413, "payload_too_large",
                   "request body over the limit of " + std::to_string(server_->limits.max_body_bytes) + " bytes");
    else if (ec == http::error::header_limit)
      RespondError(431, "headers_too_large",
                   "request headers over the limit of " + std::to_string(server_->limits.max_header_bytes) + " bytes");
    else
      RespondError(400, "bad_request", "malformed HTTP request: " + ec.message());
  }

  void Dispatch() {
    CancelTimer();
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    awaiting_ = true;
    HttpRequest req;
    req.method = std::string(msg.method_string());
    const std::string_view target(msg.target().data(), msg.target().size());
    if (target.empty() || target[0] != '/') {
      keep_alive_ = false;
      return RespondError(400, "bad_request", "request target must start with /");
    }
    req.path = std::string(target.substr(0, target.find('?')));
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(f.value());
    }
    req.body = std::move(msg.body());
    path_ = req.path;
    WatchPeer(++request_gen_);
    // The last line of defence: a handler that throws (it should not) is
    // answered 500 and logged; the worker goes on.
    try {
      server_->handler(req, shared_from_this());
    } catch (const std::exception& e) {
      HandlerThrew(req, e.what());
    } catch (...) {
      HandlerThrew(req, "unknown exception");
    }
  }

  // Notices a client that goes away while its request is being worked on:
  // the socket turns readable with EOF or a reset (common/peer_state.h).
  // Data instead (a pipelined request) ends the watch for this request; a
  // wakeup with nothing to say watches again.
  void WatchPeer(uint64_t gen) {
    auto self = shared_from_this();
    socket_.async_wait(tcp::socket::wait_read, [self, gen](boost::system::error_code ec) {
      if (ec || self->closed_ || !self->awaiting_ || self->request_gen_ != gen) return;
      switch (PeekPeer(self->socket_.native_handle())) {
        case PeerState::kGone:
          log::Debug("http", "client went away path={}", self->path_);
          return self->Shutdown();
        case PeerState::kQuiet: return self->WatchPeer(gen);
        case PeerState::kData: return;
      }
    });
  }

  void HandlerThrew(const HttpRequest& req, const std::string& what) {
    log::Error("http", "handler failed method={} path={} error={}", req.method, req.path, what);
    if (awaiting_ && !streaming_) {
      keep_alive_ = false;
      RespondError(500, "internal", "internal error: " + what);
    } else {
      Shutdown();
    }
  }

  std::shared_ptr<HttpServer::Impl> server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t key_;
  uint64_t timer_gen_ = 0, request_gen_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  std::string path_;
  std::function<void()> on_close_;
  // awaiting_: a request was dispatched and its answer is not complete.
  bool keep_alive_ = false, awaiting_ = false, streaming_ = false, ended_ = false, closed_ = false;
};

}  // namespace http_internal

namespace {

// Out of file descriptors (EMFILE, ENFILE) or another accept error: accepting
// again at once would spin; wait a little.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

}  // namespace

void HttpServer::Impl::Accept() {
  auto self = shared_from_this();
  acceptor->async_accept([self](boost::system::error_code ec, tcp::socket sock) {
    if (self->closed || !self->acceptor || !self->acceptor->is_open()) return;
    if (ec) {
      log::Warn("http", "accept failed error={}", ec.message());
      self->retry.expires_after(kAcceptRetry);
      self->retry.async_wait([self](boost::system::error_code wec) {
        if (!wec) self->Accept();
      });
      return;
    }
    boost::system::error_code ignore;
    if (static_cast<size_t>(self->counters.open_connections.load()) >= self->limits.max_connections) {
      const uint64_t refused = ++self->counters.refused_connections;
      if (PowerOfTwo(refused))
        log::Warn("http", "closed a connection: too many open open={} limit={} refused={}",
                  self->counters.open_connections.load(), self->limits.max_connections, refused);
      sock.close(ignore);
      return self->Accept();
    }
    sock.set_option(tcp::no_delay(true), ignore);
    const uint64_t key = ++self->next_session;
    auto s = std::make_shared<Session>(self, std::move(sock), key);
    self->sessions[key] = s;
    s->Start();
    self->Accept();
  });
}

HttpServer::HttpServer(asio::io_context& io, HttpHandler handler, HttpLimits limits)
    : impl_(std::make_shared<Impl>(io, std::move(handler), limits)) {}

HttpServer::~HttpServer() { Close(); }

Status HttpServer::Listen(const std::string& host_in, int port, bool allow_remote) {
  std::string host = host_in == "localhost" ? "127.0.0.1" : host_in;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (port < 0 || port > 65535) return InvalidArgument("port: must lie in [0, 65535], got " + std::to_string(port));
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("host: not an IP address: " + host_in);
  if (!addr.is_loopback() && !allow_remote)
    return PermissionDenied("host " + host_in + " is not a loopback address; binding it needs allow_remote");
  auto acc = std::make_unique<tcp::acceptor>(impl_->io);
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ErrnoStatus("listen on " + host + ":" + std::to_string(port), ec.value());
  impl_->acceptor = std::move(acc);
  impl_->Accept();
  log::Info("http", "listening host={} port={}", host, this->port());
  return Status::Ok();
}

int HttpServer::port() const {
  if (!impl_->acceptor) return 0;
  boost::system::error_code ec;
  return impl_->acceptor->local_endpoint(ec).port();
}

void HttpServer::Close() {
  impl_->closed = true;
  boost::system::error_code ec;
  if (impl_->acceptor) impl_->acceptor->close(ec);
  impl_->retry.cancel();
  std::vector<std::shared_ptr<Session>> open;
  for (auto& [key, weak] : impl_->sessions)
    if (auto s = weak.lock()) open.push_back(std::move(s));
  for (auto& s : open) s->Shutdown();
}

const HttpCounters& HttpServer::counters() const { return impl_->counters; }

}  // namespace tandem::inference

// tandemd's HTTP server; see http_server.h for the contract and limits.
#include "orchestrator/daemon/http_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <type_traits>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "common/log.h"
#include "common/peer_state.h"

namespace tandem::daemon {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using unix_proto = asio::local::stream_protocol;

void Exchange::RespondError(int status, std::string_view code, std::string_view message,
                            nlohmann::json details) {
  nlohmann::json err = {{"code", code}, {"message", message}};
  if (!details.is_null()) err["details"] = std::move(details);
  RespondJson(status, {{"error", err}});
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool PercentDecode(std::string_view in, std::string* out, bool plus_is_space) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

// Compares without an early exit, so timing does not reveal the token.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string_view ReasonPhrase(int status) {
  const auto r = http::obsolete_reason(static_cast<http::status>(status));
  return std::string_view(r.data(), r.size());
}

}  // namespace

Status ParseTarget(std::string_view target, std::string* path,
                   std::map<std::string, std::string>* query) {
  if (target.empty() || target[0] != '/') return InvalidArgument("request target must start with /");
  const size_t q = target.find('?');
  if (!PercentDecode(target.substr(0, q), path, false))
    return InvalidArgument("bad percent-encoding in path");
  query->clear();
  if (q == std::string_view::npos) return Status::Ok();
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string k, v;
    if (!PercentDecode(pair.substr(0, eq), &k, true) ||
        !PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), &v, true))
      return InvalidArgument("bad percent-encoding in query");
    (*query)[k] = v;
  }
  return Status::Ok();
}

namespace {

void ConfigureParser(http::request_parser<http::string_body>& p, const HttpLimits& limits) {
  p.header_limit(static_cast<uint32_t>(limits.max_header_bytes));
  p.body_limit(limits.max_body_bytes);
}

// Converts a parsed message; shared by sessions and ParseHttpRequest.
Status ToHttpRequest(http::request<http::string_body>& msg, HttpRequest* req) {
  req->method = std::string(msg.method_string());
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req->headers[name] = std::string(f.value());
  }
  req->body = std::move(msg.body());
  const auto target = msg.target();
  return ParseTarget(std::string_view(target.data(), target.size()), &req->path, &req->query);
}

}  // namespace

Status ParseHttpRequest(std::string_view bytes, const HttpLimits& limits, HttpRequest* out) {
  http::request_parser<http::string_body> p;
  ConfigureParser(p, limits);
  p.eager(true);
  boost::system::error_code ec;
  p.put(asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec == http::error::body_limit || ec == http::error::header_limit)
    return ResourceExhausted(ec.message());
  if (ec) return InvalidArgument(ec.message());
  if (!p.is_done()) return InvalidArgument("incomplete request");
  return ToHttpRequest(p.get(), out);
}

enum class Listener { kUnix, kTcp };

std::string PeerKey(const boost::asio::ip::address& address) {
  if (address.is_v4()) return address.to_v4().to_string();
  const boost::asio::ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6).to_string();
  boost::asio::ip::address_v6::bytes_type b = v6.to_bytes();
  for (size_t i = 8; i < b.size(); ++i) b[i] = 0;
  return boost::asio::ip::address_v6(b).to_string() + "/64";
}

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  asio::io_context& io;
  HttpHandler handler;
  HttpLimits limits;
  std::unique_ptr<unix_proto::acceptor> unix_acceptor;
  std::unique_ptr<tcp::acceptor> tcp_acceptor;
  asio::steady_timer unix_retry, tcp_retry;  // after a failed accept (EMFILE): wait, then accept again
  std::string token;
  size_t unix_connections = 0;
  size_t tcp_connections = 0;         // authenticated
  size_t tcp_unauthenticated = 0;
  std::map<std::string, size_t> unauthenticated_by_peer;  // PeerKey -> count (no zero entries)
  uint64_t tcp_refused = 0;           // closed at once: too many unauthenticated
  uint64_t tcp_refused_per_peer = 0;  // closed at once: too many unauthenticated from that peer
  bool closed = false;

  Impl(asio::io_context& i, HttpHandler h, HttpLimits l)
      : io(i), handler(std::move(h)), limits(l), unix_retry(i), tcp_retry(i) {}

  template <typename Socket>
  void StartSession(Socket socket, Listener listener);
  void AcceptUnix();
  void AcceptTcp();
};

namespace {

// One connection. Holds itself alive through the handlers it has in flight.
// A TCP connection counts as unauthenticated until a request header carries
// the token; the unix socket's are authenticated by the socket's file mode.
template <typename Socket>
class Session : public Exchange, public std::enable_shared_from_this<Session<Socket>> {
 public:
  Session(std::shared_ptr<HttpServer::Impl> server, Socket socket, Listener listener, std::string peer = "")
      : server_(std::move(server)), socket_(std::move(socket)), timer_(server_->io), listener_(listener),
        authenticated_(listener == Listener::kUnix), peer_(std::move(peer)) {
    if (listener_ == Listener::kUnix) {
      ++server_->unix_connections;
    } else {
      ++server_->tcp_unauthenticated;
      ++server_->unauthenticated_by_peer[peer_];
    }
  }
  ~Session() override {
    if (listener_ == Listener::kUnix) --server_->unix_connections;
    else if (authenticated_) --server_->tcp_connections;
    else LeaveUnauthenticated();
  }

  // No longer counted as unauthenticated (authenticated, or gone).
  void LeaveUnauthenticated() {
    --server_->tcp_unauthenticated;
    auto it = server_->unauthenticated_by_peer.find(peer_);
    if (it != server_->unauthenticated_by_peer.end() && --it->second == 0) server_->unauthenticated_by_peer.erase(it);
  }

  void Start() { ReadRequest(); }

  void Respond(int status, const std::string& content_type, std::string body) override {
    if (responded_ || closed_) return;
    responded_ = true;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "tandemd");
    res->set(http::field::content_type, content_type);
    res->keep_alive(keep_alive_ && status < 500 && status != 400 && status != 401 && status != 413 && status != 431);
    res->body() = std::move(body);
    res->prepare_payload();
    auto self = this->shared_from_this();
    http::async_write(socket_, *res, [self, res](boost::system::error_code ec, size_t) {
      if (ec || !res->keep_alive()) return self->Shutdown();
      self->ReadRequest();
    });
  }

  void BeginStream(const std::string& content_type) override {
    if (responded_ || closed_) return;
    responded_ = true;
    streaming_ = true;
    CancelTimer();
    Enqueue("HTTP/1.1 200 " + std::string(ReasonPhrase(200)) + "\r\nServer: tandemd\r\nContent-Type: " +
            content_type + "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
    WatchStreamPeer();
  }

  // Notices a client that goes away even while we have nothing to write. A
  // wakeup with nothing to say (common/peer_state.h) watches again; data
  // (the client wrote more) ends the watch.
  void WatchStreamPeer() {
    auto self = this->shared_from_this();
    socket_.async_wait(Socket::wait_read, [self](boost::system::error_code ec) {
      if (ec || self->closed_ || !self->socket_.is_open()) return;
      switch (PeekPeer(self->socket_.native_handle())) {
        case PeerState::kGone: return self->Shutdown();
        case PeerState::kQuiet: return self->WatchStreamPeer();
        case PeerState::kData: return;
      }
    });
  }

  void Write(std::string data) override {
    if (!streaming_ || closed_ || data.empty()) return;
    char head[20];
    std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    Enqueue(std::string(head) + data + "\r\n");
  }

  void End() override {
    if (!streaming_ || closed_ || ended_) return;
    ended_ = true;
    Enqueue("0\r\n\r\n");
  }

  bool closed() const override { return closed_; }
  void OnClose(std::function<void()> cb) override { on_close_ = std::move(cb); }
  bool backlogged() const override { return queued_bytes_ >= server_->limits.max_stream_queue_bytes / 2; }
  void OnDrain(std::function<void()> cb) override {
    if (closed_) return;
    if (queue_.empty()) return asio::post(server_->io, std::move(cb));
    on_drain_ = std::move(cb);
  }

 private:
  void Enqueue(std::string bytes) {
    queued_bytes_ += bytes.size();
    queue_.push_back(std::move(bytes));
    if (queued_bytes_ > server_->limits.max_stream_queue_bytes) {
      log::Warn("http", "dropped a client that does not read its stream target={} queued_bytes={} limit={}",
                target_, queued_bytes_, server_->limits.max_stream_queue_bytes);
      return Shutdown();
    }
    if (queue_.size() == 1) WriteNext();
  }

  void WriteNext() {
    auto self = this->shared_from_this();
    asio::async_write(socket_, asio::buffer(queue_.front()), [self](boost::system::error_code ec, size_t) {
      if (ec) return self->Shutdown();
      self->queued_bytes_ -= self->queue_.front().size();
      self->queue_.pop_front();
      if (!self->queue_.empty()) return self->WriteNext();
      if (self->ended_) return self->Shutdown();
      if (self->on_drain_) {
        auto cb = std::move(self->on_drain_);
        self->on_drain_ = nullptr;
        cb();
      }
    });
  }

  // A timer generation, so that a deadline that already fired for an earlier
  // read cannot close the connection during a later one.
  void ArmTimer(int seconds) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::chrono::seconds(seconds));
    std::weak_ptr<Session> weak = this->shared_from_this();
    timer_.async_wait([weak, gen](boost::system::error_code ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self || self->timer_gen_ != gen) return;
      if (!self->authenticated_)
        log::Debug("http", "closed an unauthenticated connection: no request header in time timeout_s={}",
                   self->server_->limits.auth_timeout_s);
      self->Shutdown();
    });
  }
  void CancelTimer() {
    ++timer_gen_;
    timer_.cancel();
  }

  // Handles a failed read; false when `ec` is no error.
  bool ReadFailed(boost::system::error_code ec) {
    CancelTimer();
    if (!ec) return false;
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || closed_) {
      Shutdown();
      return true;
    }
    keep_alive_ = false;
    if (ec == http::error::body_limit) RespondError(413, "payload_too_large", "request body over the limit");
    else if (ec == http::error::header_limit) RespondError(431, "headers_too_large", "request headers over the limit");
    else RespondError(400, "bad_request", ec.message());
    return true;
  }

  // The header is read first, under the short deadline while unauthenticated,
  // so that no body is read before the token is checked.
  void ReadRequest() {
    if (closed_) return;
    responded_ = false;
    parser_.emplace();
    ConfigureParser(*parser_, server_->limits);
    ArmTimer(authenticated_ ? server_->limits.read_timeout_s : server_->limits.auth_timeout_s);
    auto self = this->shared_from_this();
    http::async_read_header(socket_, buffer_, *parser_, [self](boost::system::error_code ec, size_t) {
      if (self->ReadFailed(ec)) return;
      self->OnHeader();
    });
  }

  void OnHeader() {
    const auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    if (listener_ == Listener::kTcp) {
      const auto auth = msg[http::field::authorization];
      const std::string expected = "Bearer " + server_->token;
      if (!ConstantTimeEquals(std::string_view(auth.data(), auth.size()), expected)) {
        keep_alive_ = false;
        return RespondError(401, "unauthorized", "missing or wrong bearer token");
      }
      if (!authenticated_) {
        if (server_->tcp_connections >= server_->limits.max_tcp_connections) {
          keep_alive_ = false;
          log::Warn("http", "refused a tcp client: too many connections tcp_connections={} limit={}",
                    server_->tcp_connections, server_->limits.max_tcp_connections);
          return RespondError(503, "overloaded", "too many connections");
        }
        LeaveUnauthenticated();
        ++server_->tcp_connections;
        authenticated_ = true;
      }
    }
    if (parser_->is_done()) return Dispatch();
    ArmTimer(server_->limits.read_timeout_s);
    auto self = this->shared_from_this();
    http::async_read(socket_, buffer_, *parser_, [self](boost::system::error_code ec, size_t) {
      if (self->ReadFailed(ec)) return;
      self->Dispatch();
    });
  }

  void Dispatch() {
    auto& msg = parser_->get();
    HttpRequest req;
    if (Status st = ToHttpRequest(msg, &req); !st.ok()) {
      keep_alive_ = false;
      return RespondError(400, "bad_request", st.message());
    }
    target_ = req.path;
    // The last line of defence: a handler that throws (it should not) is
    // answered 500 and logged; the daemon goes on.
    try {
      server_->handler(req, this->shared_from_this());
    } catch (const std::exception& e) {
      HandlerThrew(req, e.what());
    } catch (...) {
      HandlerThrew(req, "unknown exception");
    }
  }

  void HandlerThrew(const HttpRequest& req, const std::string& what) {
    log::Error("http", "handler failed method={} path={} error={}", req.method, req.path, what);
    if (!responded_) {
      keep_alive_ = false;
      RespondError(500, "internal", "internal error: " + what);
    } else {
      Shutdown();
    }
  }

  void Shutdown() {
    if (closed_) return;
    closed_ = true;
    CancelTimer();
    boost::system::error_code ec;
    socket_.shutdown(Socket::shutdown_both, ec);
    socket_.close(ec);
    // Free what will never be sent; the front is the buffer of the write in flight.
    if (queue_.size() > 1) queue_.erase(queue_.begin() + 1, queue_.end());
    on_drain_ = nullptr;
    if (on_close_) {
      auto cb = std::move(on_close_);
      cb();
    }
  }

  std::shared_ptr<HttpServer::Impl> server_;
  Socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  Listener listener_;
  bool authenticated_;
  std::string peer_;  // TCP: PeerKey of the remote address
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  std::string target_;
  std::function<void()> on_close_, on_drain_;
  bool keep_alive_ = false, responded_ = false, streaming_ = false, ended_ = false, closed_ = false;
};

}  // namespace

template <typename Socket>
void HttpServer::Impl::StartSession(Socket socket, Listener listener) {
  if (listener == Listener::kTcp && tcp_unauthenticated >= limits.max_tcp_unauthenticated) {
    // Closed without a word: answering would cost more than the flood.
    ++tcp_refused;
    if ((tcp_refused & (tcp_refused - 1)) == 0)  // the 1st, 2nd, 4th, 8th, ...: a flood is logged, not echoed
      log::Warn("http", "closed a tcp connection: too many unauthenticated unauthenticated={} limit={} refused={}",
                tcp_unauthenticated, limits.max_tcp_unauthenticated, tcp_refused);
    boost::system::error_code ec;
    socket.close(ec);
    return;
  }
  std::string peer;
  if constexpr (std::is_same_v<Socket, tcp::socket>) {
    boost::system::error_code ec;
    const tcp::endpoint remote = socket.remote_endpoint(ec);
    if (ec) {  // gone already
      socket.close(ec);
      return;
    }
    peer = PeerKey(remote.address());
    auto held = unauthenticated_by_peer.find(peer);
    if (held != unauthenticated_by_peer.end() && held->second >= limits.max_tcp_unauthenticated_per_peer) {
      ++tcp_refused_per_peer;
      if ((tcp_refused_per_peer & (tcp_refused_per_peer - 1)) == 0)  // 1st, 2nd, 4th, ...: logged, not echoed
        log::Warn("http", "closed a tcp connection: too many unauthenticated from one peer peer={} unauthenticated={} "
                  "limit={} refused={}", peer, held->second, limits.max_tcp_unauthenticated_per_peer,
                  tcp_refused_per_peer);
      socket.close(ec);
      return;
    }
  }
  auto s = std::make_shared<Session<Socket>>(shared_from_this(), std::move(socket), listener, std::move(peer));
  if (listener == Listener::kUnix && unix_connections > limits.max_unix_connections) {
    s->RespondError(503, "overloaded", "too many connections");
    return;
  }
  s->Start();
}

namespace {
// Out of file descriptors (EMFILE, ENFILE) or another accept error: accepting
// again at once would spin; wait a little.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
}  // namespace

void HttpServer::Impl::AcceptUnix() {
  auto self = shared_from_this();
  unix_acceptor->async_accept([self](boost::system::error_code ec, unix_proto::socket sock) {
    if (self->closed || !self->unix_acceptor || !self->unix_acceptor->is_open()) return;
    if (!ec) {
      self->StartSession(std::move(sock), Listener::kUnix);
      return self->AcceptUnix();
    }
    log::Warn("http", "accept failed listener=unix error={}", ec.message());
    self->unix_retry.expires_after(kAcceptRetry);
    self->unix_retry.async_wait([self](boost::system::error_code wec) {
      if (!wec) self->AcceptUnix();
    });
  });
}

void HttpServer::Impl::AcceptTcp() {
  auto self = shared_from_this();
  tcp_acceptor->async_accept([self](boost::system::error_code ec, tcp::socket sock) {
    if (self->closed || !self->tcp_acceptor || !self->tcp_acceptor->is_open()) return;
    if (!ec) {
      boost::system::error_code ignore;
      sock.set_option(tcp::no_delay(true), ignore);
      self->StartSession(std::move(sock), Listener::kTcp);
      return self->AcceptTcp();
    }
    log::Warn("http", "accept failed listener=tcp error={}", ec.message());
    self->tcp_retry.expires_after(kAcceptRetry);
    self->tcp_retry.async_wait([self](boost::system::error_code wec) {
      if (!wec) self->AcceptTcp();
    });
  });
}

HttpServer::HttpServer(asio::io_context& io, HttpHandler handler, HttpLimits limits)
    : impl_(std::make_shared<Impl>(io, std::move(handler), limits)) {}

HttpServer::~HttpServer() { Close(); }

Status HttpServer::ListenUnix(const std::filesystem::path& path) {
  if (path.string().size() >= sizeof(sockaddr_un::sun_path))
    return InvalidArgument("socket path too long (" + std::to_string(path.string().size()) + " bytes): " + path.string());
  std::error_code fec;
  std::filesystem::create_directories(path.parent_path(), fec);
  ::unlink(path.c_str());
  boost::system::error_code ec;
  auto acc = std::make_unique<unix_proto::acceptor>(impl_->io);
  const mode_t old = ::umask(0177);  // the socket is created 0600
  acc->open(unix_proto(), ec);
  if (!ec) acc->bind(unix_proto::endpoint(path.string()), ec);
  ::umask(old);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ErrnoStatus("listen on " + path.string(), ec.value());
  ::chmod(path.c_str(), 0600);
  impl_->unix_acceptor = std::move(acc);
  impl_->AcceptUnix();
  log::Info("http", "listening socket={}", path.string());
  return Status::Ok();
}

Status HttpServer::ListenTcp(const std::string& host_port, std::string token, bool allow_remote) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("--listen: expected HOST:PORT, got " + host_port);
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try { port = std::stoi(host_port.substr(colon + 1)); } catch (...) { port = -1; }
  if (port < 0 || port > 65535) return InvalidArgument("--listen: bad port in " + host_port);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("--listen: bad address " + host);
  if (!addr.is_loopback() && !allow_remote)
    return PermissionDenied("--listen " + host_port + " is not a loopback address; pass --allow-remote to bind it");
  if (token.empty()) return PermissionDenied("--listen needs a token (--token-file)");
  auto acc = std::make_unique<tcp::acceptor>(impl_->io);
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ErrnoStatus("listen on " + host_port, ec.value());
  impl_->token = std::move(token);
  impl_->tcp_acceptor = std::move(acc);
  impl_->AcceptTcp();
  log::Info("http", "listening tcp={}:{}", host, tcp_port());
  return Status::Ok();
}

int HttpServer::tcp_port() const {
  if (!impl_->tcp_acceptor) return 0;
  boost::system::error_code ec;
  return impl_->tcp_acceptor->local_endpoint(ec).port();
}

void HttpServer::Close() {
  impl_->closed = true;
  boost::system::error_code ec;
  if (impl_->unix_acceptor) impl_->unix_acceptor->close(ec);
  if (impl_->tcp_acceptor) impl_->tcp_acceptor->close(ec);
  impl_->unix_retry.cancel();
  impl_->tcp_retry.cancel();
}

}  // namespace tandem::daemon

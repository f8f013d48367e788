// The control socket: framing, handshake and error answers (control_server.h).
#include "orchestrator/control/control_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <boost/asio/write.hpp>

#include "common/control/control_codec.h"
#include "common/log.h"

namespace tandem::control {

namespace {
using json = nlohmann::json;
namespace asio = boost::asio;
using Socket = ControlConnection::Socket;
using tcp = asio::ip::tcp;
}  // namespace

StatusOr<tcp::endpoint> ParseHostPort(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("expected HOST:PORT, got \"" + host_port + "\"");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  const std::string port_text = host_port.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535)
    return InvalidArgument("bad port in \"" + host_port + "\"");
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("bad address \"" + host + "\" (a numeric IP or localhost)");
  return tcp::endpoint(addr, static_cast<unsigned short>(port));
}

std::string HostPort(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

ControlConnection::ControlConnection(Socket socket, ControlServer& server, uint64_t id, Transport transport)
    : socket_(std::move(socket)), server_(server), id_(id), transport_(transport), handshake_timer_(server.io_) {
  const int fd = socket_.native_handle();
  if (transport_ == Transport::kUnix) {
    peer_ = "unix";
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) peer_pid_ = cred.pid;
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    if (sa.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
      ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
      port = ntohs(in->sin_port);
    } else if (sa.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
      port = ntohs(in6->sin6_port);
    }
  }
  peer_ = std::string(host) + ":" + std::to_string(port);
}

void ControlConnection::Start() {
  handshake_timer_.expires_after(server_.options_.handshake_timeout);
  handshake_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->welcomed_ && !self->closed_) self->Refuse("deadline_exceeded", "no hello within the handshake timeout");
  });
  ReadMore();
}

void ControlConnection::ReadMore() {
  socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
    if (self->closed_) return;
    if (ec) return self->Shutdown();
    const size_t max = self->server_.options_.max_line_bytes;
    std::string_view data(self->buf_, n);
    while (!data.empty() && !self->closed_) {
      const size_t nl = data.find('\n');
      if (self->discarding_) {
        if (nl == std::string_view::npos) return self->ReadMore();
        self->discarding_ = false;
        data.remove_prefix(nl + 1);
        continue;
      }
      if (nl == std::string_view::npos) {
        self->in_.append(data);
        if (self->in_.size() >= max) {
          self->in_.clear();
          self->discarding_ = true;
          self->Send(ErrorLine(std::nullopt, "line_too_long", "line longer than " + std::to_string(max) + " bytes dropped"));
        }
        break;
      }
      self->in_.append(data.substr(0, nl));
      data.remove_prefix(nl + 1);
      std::string line;
      line.swap(self->in_);
      if (line.size() + 1 > max) {
        self->Send(ErrorLine(std::nullopt, "line_too_long", "line longer than " + std::to_string(max) + " bytes dropped"));
        continue;
      }
      self->OnLine(line);
    }
    if (!self->closed_ && !self->closing_) self->ReadMore();
  });
}

void ControlConnection::OnLine(std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (text.empty()) return;
  std::optional<int64_t> id;
  auto parsed = ParseLine(text, &id);
  if (!parsed.ok()) {
    if (!welcomed_) return Refuse("malformed", parsed.status().message());
    Send(ErrorLine(id, "malformed", parsed.status().message()));
    return;
  }
  // The delegate's handlers type-check what they read; should one still
  // throw (a nlohmann::json accessor on an unexpected type), the line is
  // answered as an internal error and the daemon goes on.
  try {
    if (!welcomed_) return OnHandshake(*parsed);
    server_.delegate_.OnMessage(shared_from_this(), *parsed);
  } catch (const std::exception& e) {
    log::Error("control", "connection {} peer={}: handler threw on a {} line: {}", id_, peer_, parsed->type, e.what());
    if (!welcomed_) return Refuse("internal", "the daemon could not handle this hello");
    Send(ErrorLine(id, "internal", "the daemon could not handle this line"));
  }
}

void ControlConnection::OnHandshake(const ParsedObject& msg) {
  if (msg.type != "hello") return Refuse("malformed", "the first line must be hello");
  const auto v = msg.body.find("protocol");
  if (v == msg.body.end() || !v->is_number_integer() || v->get<int64_t>() != kProtocolVersion) {
    return Refuse("unsupported_version", "this daemon speaks protocol " + std::to_string(kProtocolVersion));
  }
  auto hello = DecodeHello(msg.body);
  if (!hello.ok()) return Refuse("invalid_argument", hello.status().message());
  auto welcome = server_.delegate_.OnHello(shared_from_this(), *hello);
  if (!welcome.ok()) {
    const StatusCode code = welcome.status().code();
    return Refuse(code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
                          code == StatusCode::kPermissionDenied
                      ? ErrorCodeFor(code)
                      : "failed_precondition",
                  welcome.status().message());
  }
  json line = {{"type", "welcome"}, {"protocol", kProtocolVersion}};
  if (welcome->is_object()) {
    for (const auto& [k, val] : welcome->items()) line[k] = val;
  }
  welcomed_ = true;
  handshake_timer_.cancel();
  Send(line);
}

void ControlConnection::Refuse(std::string_view code, std::string_view message) {
  log::Warn("control", "connection {} refused peer={} pid={} code={}: {}", id_, peer_, peer_pid_, code, message);
  Send(ErrorLine(std::nullopt, code, message));
  Close();
}

void ControlConnection::Send(const json& line) {
  if (closed_ || closing_) return;
  out_.push_back(DumpLine(line) + "\n");
  if (!writing_) WriteNext();
}

void ControlConnection::WriteNext() {
  if (out_.empty()) {
    writing_ = false;
    if (closing_) Shutdown();
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()), [self = shared_from_this()](boost::system::error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->Shutdown();
    self->out_.pop_front();
    self->WriteNext();
  });
}

void ControlConnection::Close() {
  if (closed_ || closing_) return;
  closing_ = true;
  if (!writing_) Shutdown();
}

void ControlConnection::Shutdown() {
  if (closed_) return;
  closed_ = true;
  handshake_timer_.cancel();
  boost::system::error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
  server_.connections_.erase(id_);
  if (welcomed_ && !server_.closed_) server_.delegate_.OnClosed(shared_from_this());
}

ControlServer::ControlServer(asio::io_context& io, std::filesystem::path path, Delegate& delegate, Options options)
    : io_(io), acceptor_(io), path_(std::move(path)), delegate_(delegate), options_(options) {}

ControlServer::~ControlServer() { Close(); }

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Listen(asio::io_context& io, const std::filesystem::path& path,
                                                               Delegate& delegate, Options options) {
  std::unique_ptr<ControlServer> s(new ControlServer(io, path, delegate, options));
  std::error_code fec;
  std::filesystem::remove(path, fec);
  boost::system::error_code ec;
  s->acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) s->acceptor_.bind(asio::local::stream_protocol::endpoint(path.string()), ec);
  if (!ec) ::chmod(path.c_str(), 0600);
  if (!ec) s->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("control socket " + path.string() + ": " + ec.message());
  s->Accept(s->acceptor_, Transport::kUnix);
  log::Info("control", "listening on unix:{}", path.string());
  return s;
}

Status ControlServer::ListenTcp(const std::string& host_port) {
  if (tcp_acceptor_) return FailedPrecondition("control: already listening on tcp:" + tcp_address());
  TANDEM_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseHostPort(host_port), "control listen address");
  auto acc = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("control: listen on tcp:" + host_port + ": " + ec.message());
  tcp_acceptor_ = std::move(acc);
  Accept(*tcp_acceptor_, Transport::kTcp);
  log::Info("control", "listening on tcp:{}", tcp_address());
  return Status::Ok();
}

std::string ControlServer::tcp_address() const {
  if (!tcp_acceptor_) return "";
  boost::system::error_code ec;
  const tcp::endpoint ep = tcp_acceptor_->local_endpoint(ec);
  return ec ? "" : HostPort(ep);
}

template <typename Acceptor>
void ControlServer::Accept(Acceptor& acceptor, Transport transport) {
  // The peer socket is generic: either acceptor's protocol converts to it.
  auto socket = std::make_shared<Socket>(io_);
  acceptor.async_accept(*socket, [this, &acceptor, transport, socket](boost::system::error_code ec) {
    if (closed_ || ec == asio::error::operation_aborted) return;
    if (!ec) Adopt(std::move(*socket), transport);
    Accept(acceptor, transport);
  });
}

void ControlServer::Adopt(Socket socket, Transport transport) {
  auto c = std::make_shared<ControlConnection>(std::move(socket), *this, next_id_++, transport);
  connections_[c->id()] = c;
  c->Start();
}

void ControlServer::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (tcp_acceptor_) tcp_acceptor_->close(ec);
  auto conns = std::move(connections_);
  for (auto& [id, weak] : conns) {
    if (auto c = weak.lock()) c->Shutdown();
  }
  std::error_code fec;
  std::filesystem::remove(path_, fec);
}

}  // namespace tandem::control

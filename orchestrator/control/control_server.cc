// The control socket: framing, handshake and error answers (control_server.h).
#include "orchestrator/control/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <boost/asio/write.hpp>

#include "common/log.h"

namespace tandem::control {

namespace {
using json = nlohmann::json;
namespace asio = boost::asio;
using Socket = asio::local::stream_protocol::socket;

constexpr int kProtocolVersion = 1;
}  // namespace

json ErrorLine(const json& id, std::string_view code, std::string_view message) {
  return {{"type", "error"}, {"id", id}, {"code", code}, {"message", message}};
}

ControlConnection::ControlConnection(Socket socket, ControlServer& server, uint64_t id)
    : socket_(std::move(socket)), server_(server), id_(id), handshake_timer_(server.io_) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) peer_pid_ = cred.pid;
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
          self->Send(ErrorLine(nullptr, "line_too_long", "line longer than " + std::to_string(max) + " bytes dropped"));
        }
        break;
      }
      self->in_.append(data.substr(0, nl));
      data.remove_prefix(nl + 1);
      std::string line;
      line.swap(self->in_);
      if (line.size() + 1 > max) {
        self->Send(ErrorLine(nullptr, "line_too_long", "line longer than " + std::to_string(max) + " bytes dropped"));
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
  json msg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (msg.is_discarded() || !msg.is_object() || !msg.contains("type") || !msg["type"].is_string()) {
    json id = msg.is_object() && msg.contains("id") && msg["id"].is_number_integer() ? msg["id"] : json();
    Send(ErrorLine(id, "malformed", "expected a JSON object with a string \"type\""));
    return;
  }
  if (!welcomed_) {
    if (msg["type"] != "hello") return Refuse("malformed", "the first line must be hello");
    if (!msg.contains("protocol") || !msg["protocol"].is_number_integer() || msg["protocol"] != kProtocolVersion) {
      return Refuse("unsupported_version", "this daemon speaks protocol 1");
    }
    auto welcome = server_.delegate_.OnHello(shared_from_this(), msg);
    if (!welcome.ok()) {
      const StatusCode code = welcome.status().code();
      return Refuse(code == StatusCode::kInvalidArgument ? "invalid_argument"
                    : code == StatusCode::kNotFound ? "not_found"
                                                      : "failed_precondition",
                    welcome.status().message());
    }
    json line = {{"type", "welcome"}, {"protocol", kProtocolVersion}};
    for (const auto& [k, v] : welcome->items()) line[k] = v;
    welcomed_ = true;
    handshake_timer_.cancel();
    Send(line);
    return;
  }
  server_.delegate_.OnMessage(shared_from_this(), msg);
}

void ControlConnection::Refuse(std::string_view code, std::string_view message) {
  log::Warn("control", "connection {} (pid {}) refused: {}", id_, peer_pid_, message);
  Send(ErrorLine(nullptr, code, message));
  Close();
}

void ControlConnection::Send(const json& line) {
  if (closed_ || closing_) return;
  out_.push_back(line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
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
  socket_.shutdown(Socket::shutdown_both, ec);
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
  s->Accept();
  log::Info("control", "listening on unix:{}", path.string());
  return s;
}

void ControlServer::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, Socket socket) {
    if (closed_) return;
    if (!ec) {
      auto c = std::make_shared<ControlConnection>(std::move(socket), *this, next_id_++);
      connections_[c->id()] = c;
      c->Start();
    } else if (ec == asio::error::operation_aborted) {
      return;
    }
    Accept();
  });
}

void ControlServer::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  auto conns = std::move(connections_);
  for (auto& [id, weak] : conns) {
    if (auto c = weak.lock()) c->Shutdown();
  }
  std::error_code fec;
  std::filesystem::remove(path_, fec);
}

}  // namespace tandem::control

// The worker side of the control protocol: socket, handshake, dispatch
// (control_client.h; schemas/control.schema.json).
#include "workers/runtime/control_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace tandem::control {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

StatusOr<int> ConnectOnce(const Endpoint& ep) {
  if (ep.kind == Endpoint::Kind::kUnix) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoStatus("socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, ep.path.c_str(), ep.path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Status st = ErrnoStatus("connect " + ep.ToString());
      ::close(fd);
      return Unavailable(st.message());
    }
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return Unavailable("resolve " + ep.host + ": " + gai_strerror(rc));
  Status last = Unavailable("connect " + ep.ToString() + ": no address");
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last = Unavailable(ErrnoStatus("connect " + ep.ToString()).message());
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

// Waits before the next connect attempt: 50 ms, doubling up to 1 s, never
// past `deadline`.
void Backoff(milliseconds& delay, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  std::this_thread::sleep_for(std::max(milliseconds(0), std::min(delay, left)));
  delay = std::min(delay * 2, milliseconds(1000));
}

int PollMs(milliseconds timeout, Clock::time_point start) {
  if (timeout.count() < 0) return -1;
  auto left = timeout - std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

}  // namespace

ControlClient::ControlClient(Options options) : options_(std::move(options)) {
  handlers_["shutdown"] = [](const Command&) -> StatusOr<json> { return json::object(); };
}

ControlClient::~ControlClient() { Close(); }

void ControlClient::On(const std::string& type, Handler handler) { handlers_[type] = std::move(handler); }

void ControlClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
  discarding_ = false;
}

Residency ControlClient::CurrentResidency() const {
  return options_.residency ? options_.residency() : Residency{};
}

Status ControlClient::Connect(milliseconds connect_timeout) {
  auto start = Clock::now();
  milliseconds delay(50);
  for (;;) {
    Close();
    shutdown_ = false;
    answered_.clear();
    Status st = ConnectAndHandshake(connect_timeout - std::chrono::duration_cast<milliseconds>(Clock::now() - start));
    // A daemon that refused us, or listens but never welcomes, is final; a
    // connection that broke during the handshake (a daemon going down or
    // still coming up) is tried again within the connect window.
    if (st.ok() || st.code() == StatusCode::kFailedPrecondition || st.code() == StatusCode::kDeadlineExceeded ||
        Clock::now() - start >= connect_timeout) {
      return st;
    }
    log::Warn("control", "{}; trying again in {}ms", st.message(), delay.count());
    Backoff(delay, start + connect_timeout);
  }
}

Status ControlClient::ConnectAndHandshake(milliseconds connect_timeout) {
  auto start = Clock::now();
  milliseconds delay(50);
  Status last;
  for (;;) {
    auto fd = ConnectOnce(options_.endpoint);
    if (fd.ok()) {
      fd_ = *fd;
      break;
    }
    last = fd.status();
    if (Clock::now() - start >= connect_timeout)
      return last.WithContext("control: connect within " + std::to_string(connect_timeout.count()) + "ms");
    Backoff(delay, start + connect_timeout);
  }
  Hello hello = options_.hello;
  if (hello.capabilities.empty()) {
    for (const auto& [type, h] : handlers_) hello.capabilities.push_back(type);
    hello.capabilities.push_back("request_phase");
    hello.capabilities.push_back("metrics");
  }
  TANDEM_RETURN_IF_ERROR(Send(ToJson(hello, CurrentResidency())), "control: send hello");
  auto hs_start = Clock::now();
  for (;;) {
    int wait = PollMs(options_.handshake_timeout, hs_start);
    if (wait == 0) {
      Close();
      return DeadlineExceeded("control: no welcome from " + options_.endpoint.ToString() + " within " +
                              std::to_string(options_.handshake_timeout.count()) + "ms");
    }
    auto line = ReadLine(milliseconds(wait));
    if (!line.ok()) {
      if (line.status().code() == StatusCode::kDeadlineExceeded) continue;
      Close();
      return line.status().WithContext("control: handshake");
    }
    if (line->too_long) continue;
    ParsedLine p = ParseDaemonLine(line->text);
    if (!p.command) continue;  // the daemon sent garbage before welcome: ignore
    if (p.command->type == "welcome") {
      auto v = p.command->body.find("protocol");
      if (v == p.command->body.end() || !v->is_number_integer() || v->get<int>() != kProtocolVersion) {
        Close();
        return FailedPrecondition("control: daemon speaks protocol " + (v == p.command->body.end() ? std::string("?") : v->dump()) +
                                  ", this worker speaks " + std::to_string(kProtocolVersion));
      }
      welcome_ = p.command->body;
      log::Info("control", "connected endpoint={} role={} rank={}", options_.endpoint.ToString(), hello.role, hello.rank);
      return Status::Ok();
    }
    if (p.command->type == "error") {
      std::string msg = p.command->StringField("message");
      if (msg.empty()) msg = "refused";
      Close();
      return FailedPrecondition("control: daemon refused hello: " + msg);
    }
  }
}

Status ControlClient::SendLine(const std::string& line) {
  if (fd_ < 0) return Unavailable("control: not connected");
  std::string data = line + "\n";
  size_t off = 0;
  auto start = Clock::now();
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      int wait = PollMs(options_.write_timeout, start);
      if (wait == 0 || ::poll(&p, 1, wait) == 0)
        return DeadlineExceeded("control: daemon did not read for " + std::to_string(options_.write_timeout.count()) + "ms");
      continue;
    }
    const Status st = Unavailable(ErrnoStatus("control: send").message());
    Close();  // the daemon went away: the worker connects again (Connect)
    return st;
  }
  return Status::Ok();
}

Status ControlClient::Send(const json& j) { return SendLine(j.dump()); }

StatusOr<ControlClient::Line> ControlClient::ReadLine(milliseconds timeout) {
  if (fd_ < 0) return Unavailable("control: not connected");
  auto start = Clock::now();
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      Line line;
      if (discarding_) {
        // The tail of an over-long line: drop it, report once.
        buffer_.erase(0, nl + 1);
        discarding_ = false;
        line.too_long = true;
        return line;
      }
      if (nl + 1 > options_.max_line_bytes) {
        buffer_.erase(0, nl + 1);
        line.too_long = true;
        return line;
      }
      line.text = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (!line.text.empty() && line.text.back() == '\r') line.text.pop_back();
      return line;
    }
    if (!discarding_ && buffer_.size() >= options_.max_line_bytes) {
      discarding_ = true;
      buffer_.clear();
    } else if (discarding_) {
      buffer_.clear();
    }
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, PollMs(timeout, start));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Unavailable(ErrnoStatus("control: poll").message());
    if (rc == 0) return DeadlineExceeded("control: no line within " + std::to_string(timeout.count()) + "ms");
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status st = Unavailable(ErrnoStatus("control: recv").message());
      Close();  // reset: the worker connects again (Connect)
      return st;
    }
    if (n == 0) {
      Close();
      return Unavailable("control: daemon closed the connection");
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

StatusOr<std::optional<Command>> ControlClient::HandleLine(const Line& line) {
  if (line.too_long) {
    log::Warn("control", "line over {} bytes dropped", options_.max_line_bytes);
    TANDEM_RETURN_IF_ERROR(Send(MakeError(std::nullopt, "", "line_too_long",
                                          "line longer than " + std::to_string(options_.max_line_bytes) + " bytes",
                                          CurrentResidency())));
    return std::optional<Command>();
  }
  if (line.text.empty()) return std::optional<Command>();
  ParsedLine p = ParseDaemonLine(line.text);
  if (!p.command) {
    log::Warn("control", "malformed line: {}", p.status.message());
    TANDEM_RETURN_IF_ERROR(Send(MakeError(p.id, "", "malformed", p.status.message(), CurrentResidency())));
    return std::optional<Command>();
  }
  Command& c = *p.command;
  if (c.type == "welcome" || c.type == "phase_done" || c.type == "error") return std::optional<Command>(std::move(c));

  if (auto done = answered_.find(c.id); done != answered_.end()) {
    // A retry of a command already answered: same answer, handler not rerun.
    log::Debug("control", "repeated command id={} type={}: resending answer", c.id, c.type);
    TANDEM_RETURN_IF_ERROR(SendLine(done->second));
    return std::optional<Command>();
  }
  json answer;
  auto h = handlers_.find(c.type);
  if (h == handlers_.end()) {
    answer = MakeError(c.id, c.type, "unknown_command", "this worker has no handler for \"" + c.type + "\"", CurrentResidency());
  } else {
    auto start = Clock::now();
    StatusOr<json> result = InvalidArgument("unset");
    try {
      result = h->second(c);
    } catch (const std::exception& e) {
      result = Internal(std::string("handler threw: ") + e.what());
    } catch (...) {
      result = Internal("handler threw a non-standard exception");
    }
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    if (result.ok()) {
      answer = MakeAck(c, CurrentResidency(), us, *result);
      if (c.type == "shutdown") shutdown_ = true;
    } else {
      log::Warn("control", "command failed id={} type={}: {}", c.id, c.type, result.status().message());
      answer = MakeError(c.id, c.type, ErrorCodeFor(result.status().code()), result.status().message(), CurrentResidency());
    }
  }
  std::string text = answer.dump();
  if (answered_.size() >= 256) answered_.erase(answered_.begin());
  answered_[c.id] = text;
  TANDEM_RETURN_IF_ERROR(SendLine(text));
  return std::optional<Command>();
}

StatusOr<bool> ControlClient::ServeOnce(milliseconds timeout) {
  TANDEM_ASSIGN_OR_RETURN(Line line, ReadLine(timeout));
  TANDEM_ASSIGN_OR_RETURN(auto other, HandleLine(line));
  if (other && other->type == "phase_done")
    log::Warn("control", "phase_done id={} nobody waits for", other->id);
  return shutdown_;
}

Status ControlClient::Serve(milliseconds idle_timeout) {
  while (!shutdown_) {
    TANDEM_ASSIGN_OR_RETURN(bool done, ServeOnce(idle_timeout));
    if (done) break;
  }
  return Status::Ok();
}

Status ControlClient::RequestPhase(const std::string& phase, std::optional<int64_t> version, milliseconds timeout) {
  int64_t id = next_request_id_++;
  json req = {{"type", "request_phase"}, {"id", id}, {"phase", phase}};
  if (version) req["version"] = *version;
  TANDEM_RETURN_IF_ERROR(Send(req), "request_phase " + phase);
  auto start = Clock::now();
  while (!shutdown_) {
    int wait = PollMs(timeout, start);
    if (wait == 0) return DeadlineExceeded("request_phase " + phase + ": no phase_done within " + std::to_string(timeout.count()) + "ms");
    TANDEM_ASSIGN_OR_RETURN(Line line, ReadLine(milliseconds(wait)), "request_phase " + phase);
    TANDEM_ASSIGN_OR_RETURN(auto other, HandleLine(line), "request_phase " + phase);
    if (!other || other->id != id) continue;
    if (other->type == "phase_done") return Status::Ok();
    if (other->type == "error") {
      // `unavailable`: busy, or a worker not there yet; the same request may pass later.
      const std::string code = other->StringField("code");
      const std::string what = "request_phase " + phase + ": " + code + ": " + other->StringField("message");
      return code == "unavailable" ? Unavailable(what) : FailedPrecondition(what);
    }
  }
  return Unavailable("request_phase " + phase + ": shut down while waiting");
}

Status ControlClient::SendMetrics(const json& values, std::optional<int64_t> step) {
  json m = {{"type", "metrics"}, {"values", values}};
  if (step) m["step"] = *step;
  return Send(m);
}

}  // namespace tandem::control

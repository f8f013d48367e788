// libFuzzer target: the control protocol (docs/control-protocol.md), from raw
// bytes on a real control socket to what the daemon's handlers act on, and
// the worker's reading of daemon lines. The first byte picks the side:
//   0: pre-handshake: the bytes are the whole connection (the first line
//      should be a hello; DecodeHello runs on it);
//   1: post-handshake: a valid hello is said first, then the bytes follow and
//      every line is decoded as the handoff service does (ack, error,
//      request_phase, metrics);
//   2: the worker's side: each line through ParseDaemonLine and every
//      accessor of Command.
// The server is the daemon's ControlServer (framing, line limit, nesting
// bound, handshake) on a unix socket in /tmp. Nothing may crash, leak, hang
// or trip a sanitizer on any input.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "common/control/control_messages.h"
#include "orchestrator/control/control_server.h"

namespace {

using namespace tandem;
using nlohmann::json;

// Answers like the handoff service: decode by type, answer what is bad.
class Delegate : public control::ControlServer::Delegate {
 public:
  StatusOr<json> OnHello(const control::ControlServer::ConnectionPtr&, const control::Hello& h) override {
    if (h.token.empty()) return PermissionDenied("no token");
    return json{{"session", h.job_id + "/" + h.role}};
  }
  void OnMessage(const control::ControlServer::ConnectionPtr& c, const control::ParsedObject& m) override {
    Status st;
    if (m.type == "ack" || m.type == "error") {
      st = control::DecodeAnswer(m).status();
    } else if (m.type == "request_phase") {
      auto p = control::DecodePhaseRequest(m);
      st = p.status();
      if (p.ok()) c->Send(control::MakePhaseDone(p->id, p->phase, 1));
    } else if (m.type == "metrics") {
      auto v = control::DecodeMetrics(m);
      st = v.status();
      if (v.ok()) (void)control::DumpLine(v->values);
    } else {
      st = InvalidArgument("unknown message type " + m.type);
    }
    if (!st.ok()) c->Send(control::ErrorLine(m.id, "malformed", st.message()));
  }
  void OnClosed(const control::ControlServer::ConnectionPtr&) override {}
};

struct Harness {
  boost::asio::io_context io;
  Delegate delegate;
  std::unique_ptr<control::ControlServer> server;
  std::string path = "/tmp/tandem-control-fuzz-" + std::to_string(::getpid()) + ".sock";
  Harness() {
    control::ControlServer::Options o;
    o.max_line_bytes = 64 * 1024;
    o.handshake_timeout = std::chrono::milliseconds(2000);
    auto s = control::ControlServer::Listen(io, path, delegate, o);
    if (!s.ok()) __builtin_trap();
    server = std::move(s).value();
  }
};

Harness& H() {
  static Harness* h = new Harness();
  return *h;
}

// One connection: writes `bytes`, half-closes, and runs the server until it
// closes its end.
void Converse(std::string_view bytes) {
  Harness& h = H();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, h.path.c_str(), h.path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return;
  }
  size_t off = 0;
  bool shut = false;
  for (int turn = 0; turn < 20000; ++turn) {
    if (off < bytes.size()) {
      const ssize_t w = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (w > 0) off += static_cast<size_t>(w);
      else if (errno != EAGAIN) off = bytes.size();
    }
    if (off == bytes.size() && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    h.io.run_one_for(std::chrono::milliseconds(1));
    h.io.poll();
    char buf[65536];
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN)) break;
  }
  ::close(fd);
  h.io.poll();
}

void WorkerSide(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view line = bytes.substr(0, nl);
    bytes.remove_prefix(nl == std::string_view::npos ? bytes.size() : nl + 1);
    control::ParsedLine p = control::ParseDaemonLine(line);
    if (!p.command) continue;
    const control::Command& c = *p.command;
    (void)c.Tags();
    (void)c.Mode();
    (void)c.Version();
    (void)c.Source();
    (void)c.StringField("message");
    (void)control::DecodeHello(c.body);
    control::Residency r;
    (void)control::DumpLine(control::MakeAck(c, r, 0, c.body));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 256 * 1024) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      Converse(bytes);
      break;
    case 1:
      Converse(R"({"type":"hello","protocol":1,"job_id":"j","task_id":"j.r.0","role":"r","rank":0,"token":"t"})"
               "\n" + std::string(bytes));
      break;
    default:
      WorkerSide(bytes);
  }
  return 0;
}

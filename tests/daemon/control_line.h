// Test helper: one raw control-protocol connection to a real tandemd (TCP
// "tcp:HOST:PORT" or "unix:PATH"), line by line, for tests that play a worker
// or an attacker (control_tcp_test.cc, control_hostile_test.cc).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem::testing {

class ControlLine {
 public:
  explicit ControlLine(const std::string& where) {
    if (where.rfind("tcp:", 0) == 0) {
      const std::string hp = where.substr(4);
      const size_t colon = hp.rfind(':');
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(std::stoi(hp.substr(colon + 1))));
      ::inet_pton(AF_INET, hp.substr(0, colon).c_str(), &a.sin_addr);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Reset();
    } else {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", where.substr(5).c_str());
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Reset();
    }
    if (fd_ >= 0) {
      timeval tv{10, 0};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
  }
  ~ControlLine() { Reset(); }
  ControlLine(const ControlLine&) = delete;
  ControlLine& operator=(const ControlLine&) = delete;
  bool ok() const { return fd_ >= 0; }
  // Sends `j` (a JSON string is sent as its raw text) and a newline.
  bool Send(const nlohmann::json& j) {
    const std::string s = j.is_string() ? j.get<std::string>() + "\n" : j.dump() + "\n";
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Sends and reads the answer.
  nlohmann::json Say(const nlohmann::json& j) {
    if (!Send(j)) return {{"type", "write failed"}};
    return Read();
  }
  // The next line, parsed; {"type":"eof"} or {"type":"timeout"} when none.
  nlohmann::json Read() {
    for (;;) {
      if (size_t nl = in_.find('\n'); nl != std::string::npos) {
        nlohmann::json j = nlohmann::json::parse(in_.substr(0, nl), nullptr, false);
        in_.erase(0, nl + 1);
        return j;
      }
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return {{"type", n == 0 || errno == ECONNRESET ? "eof" : "timeout"}};
      in_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string in_;
};

}  // namespace tandem::testing

// Test harness: raw sockets to a real tandemd, for what the real client never
// sends (bytes that are not UTF-8, made-up methods, connections that never
// send or never read), and the daemon's resident memory from /proc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

namespace tandem::testing {

// A connected socket, or -1. `rcvbuf` > 0 shrinks the receive buffer first
// (a client that does not read then fills up sooner).
inline int ConnectUnix(const std::string& path, int rcvbuf = 0) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int ConnectTcp(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP connection to 127.0.0.1:port from the loopback address `source`
// (e.g. "127.0.0.2": another peer on the same host), or -1.
inline int ConnectTcpFrom(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  if (::inet_pton(AF_INET, source, &from.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct RawResponse {
  int status = 0;  // 0: none (closed or timed out)
  std::string head, body;
};

// Reads one response with a Content-Length body (what tandemd sends for
// every non-streaming answer), within `timeout`.
inline RawResponse ReadResponse(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  RawResponse r;
  std::string buf;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t want = std::string::npos;
  for (;;) {
    const size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos && want == std::string::npos) {
      r.head = buf.substr(0, end);
      std::string lower = r.head;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const size_t cl = lower.find("content-length:");
      want = end + 4 + (cl == std::string::npos ? 0 : std::stoul(lower.substr(cl + 15)));
    }
    if (want != std::string::npos && buf.size() >= want) {
      if (r.head.size() > 12) r.status = std::atoi(r.head.c_str() + 9);
      r.body = buf.substr(r.head.size() + 4, want - r.head.size() - 4);
      return r;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return r;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return r;
    char chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return r;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

// One request on a fresh unix-socket connection.
inline RawResponse RawRequest(const std::string& socket_path, const std::string& bytes) {
  const int fd = ConnectUnix(socket_path);
  if (fd < 0) return {};
  RawResponse r = SendAll(fd, bytes) ? ReadResponse(fd) : RawResponse{};
  ::close(fd);
  return r;
}

// VmRSS of a process in bytes (0 when unreadable).
inline size_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace tandem::testing

// Test harness: a blocking HTTP/1.1 client over raw POSIX sockets, for the
// rollout API's tests: whole requests (Connection: close, read to EOF, the
// chunked encoding undone), server-sent events split into their data
// payloads, and the raw socket for what a real client never does (stop
// reading, send half a request, go away mid-stream).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::inference::testing {

// A connected socket to 127.0.0.1:port, or -1. `rcvbuf` > 0 shrinks the
// receive buffer first (a client that does not read fills up sooner).
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

inline bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF or `timeout`; `*eof` says which.
inline std::string ReadUntilClosed(int fd, std::chrono::milliseconds timeout, bool* eof = nullptr) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (eof) *eof = false;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (eof) *eof = true;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

// Reads what is there within `timeout` until `needle` appears (or EOF).
inline std::string ReadUntil(int fd, const std::string& needle, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (out.find(needle) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct HttpReply {
  int status = 0;  // 0: no answer (closed, or not HTTP)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::string raw_body;                        // as sent
  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

inline HttpReply ParseReply(const std::string& raw) {
  HttpReply r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers[name] = line.substr(v);
    }
    pos = eol + 2;
  }
  r.raw_body = raw.substr(head_end + 4);
  if (r.header("transfer-encoding") != "chunked") {
    r.body = r.raw_body;
    return r;
  }
  size_t at = 0;
  while (at < r.raw_body.size()) {
    const size_t eol = r.raw_body.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(r.raw_body.substr(at, eol - at), nullptr, 16);
    if (len == 0) break;
    r.body += r.raw_body.substr(eol + 2, len);
    at = eol + 2 + len + 2;
  }
  return r;
}

// Reads one response with a Content-Length body (a keep-alive connection).
inline HttpReply ReadResponse(int fd, std::chrono::milliseconds timeout) {
  std::string raw = ReadUntil(fd, "\r\n\r\n", timeout);
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return {};
  HttpReply head = ParseReply(raw.substr(0, head_end + 4));
  const size_t want = head_end + 4 + std::stoul(head.headers.count("content-length") ? head.header("content-length") : "0");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (raw.size() < want && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - raw.size()), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  return ParseReply(raw);
}

inline std::string RequestText(const std::string& method, const std::string& path, const std::string& body,
                               const std::string& extra_headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a fresh connection; the answer read to EOF.
inline HttpReply Request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const int fd = ConnectTcp(port);
  if (fd < 0) return {};
  HttpReply r;
  if (SendAll(fd, RequestText(method, path, body))) r = ParseReply(ReadUntilClosed(fd, timeout));
  ::close(fd);
  return r;
}

// The data payloads of a text/event-stream body, in order.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    else out.push_back("<not a data line: " + event + ">");
    at = end + 2;
  }
  if (at < body.size()) out.push_back("<unterminated: " + body.substr(at) + ">");
  return out;
}

}  // namespace tandem::inference::testing

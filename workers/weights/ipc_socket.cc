// Unix-domain sockets with framed messages and descriptors (ipc_socket.h).
#include "workers/weights/ipc_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

namespace tandem::weights::ipc {
namespace {

bool NameByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

void Put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::string Hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

uint32_t Get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// sockaddr_un for `a` and its length.
socklen_t Fill(const SocketAddress& a, sockaddr_un* sun) {
  std::memset(sun, 0, sizeof *sun);
  sun->sun_family = AF_UNIX;
  if (a.abstract) {
    std::memcpy(sun->sun_path + 1, a.name.data(), a.name.size());
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + a.name.size());
  }
  std::memcpy(sun->sun_path, a.name.data(), a.name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + a.name.size() + 1);
}

int MsLeft(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : left > 1 << 30 ? 1 << 30 : static_cast<int>(left);
}

// Waits until `sock` is ready for `events`, or the deadline.
Status WaitFor(int sock, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{sock, events, 0};
    const int n = ::poll(&p, 1, MsLeft(deadline));
    if (n > 0) return Status::Ok();  // readable, writable, or an error/hangup the next call reports
    if (n == 0) return DeadlineExceeded(std::string(what) + ": no answer before the deadline (the peer is stopped or busy)");
    if (errno != EINTR) return ErrnoStatus(std::string("poll while ") + what);
  }
}

Status PeerClosed(const char* what, int err) {
  if (err == 0) return Unavailable(std::string(what) + ": the peer closed the connection");
  return Unavailable(std::string(what) + ": " + std::strerror(err) + " (the peer closed or reset the connection)");
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

StatusOr<SocketAddress> ParseSocketAddress(std::string_view text) {
  SocketAddress a;
  if (!text.empty() && text[0] == '@') {
    a.abstract = true;
    a.name = std::string(text.substr(1));
    if (a.name.empty() || a.name.size() > 100)
      return InvalidArgument("socket address \"" + std::string(text.substr(0, 120)) +
                             "\": an abstract name has 1 to 100 bytes");
    for (const char c : a.name)
      if (!NameByte(c))
        return InvalidArgument("socket address \"" + std::string(text.substr(0, 120)) +
                               "\": only letters, digits, '.', '_' and '-' are allowed after '@'");
    return a;
  }
  if (text.empty() || text[0] != '/')
    return InvalidArgument("socket address \"" + std::string(text.substr(0, 120)) +
                           "\": expected @NAME (abstract) or an absolute /PATH");
  a.abstract = false;
  a.name = std::string(text);
  if (a.name.size() > sizeof(sockaddr_un::sun_path) - 1)
    return InvalidArgument("socket path \"" + a.name.substr(0, 120) + "\": " + std::to_string(a.name.size()) +
                           " bytes, a unix socket path has at most " + std::to_string(sizeof(sockaddr_un::sun_path) - 1));
  if (a.name.find('\0') != std::string::npos) return InvalidArgument("socket path: contains a NUL byte");
  size_t at = 1;
  while (at <= a.name.size()) {
    const size_t slash = std::min(a.name.find('/', at), a.name.size());
    const std::string_view part(a.name.data() + at, slash - at);
    if (part == "." || part == ".." || (part.empty() && slash != a.name.size()))
      return InvalidArgument("socket path \"" + a.name + "\": an empty, \".\" or \"..\" component");
    at = slash + 1;
  }
  if (a.name.back() == '/') return InvalidArgument("socket path \"" + a.name + "\" names a directory");
  return a;
}

StatusOr<UniqueFd> Listen(const SocketAddress& address) {
  const std::string what = "listen on " + address.ToString();
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus(what + ": socket");
  if (!address.abstract) {
    struct stat st {};
    if (::lstat(address.name.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        return FailedPrecondition(what + ": the path exists and is not a socket");
      // Someone listening there is another publisher, not a leftover.
      UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un sun;
      const socklen_t len = Fill(address, &sun);
      if (probe.valid() && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&sun), len) == 0)
        return AlreadyExists(what + ": another process listens there");
      if (::unlink(address.name.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(what + ": remove the stale socket");
    }
  }
  sockaddr_un sun;
  const socklen_t len = Fill(address, &sun);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&sun), len) != 0) {
    if (errno == EADDRINUSE) return AlreadyExists(what + ": the address is in use (another publisher of this task?)");
    return ErrnoStatus(what + ": bind");
  }
  if (!address.abstract) ::chmod(address.name.c_str(), 0600);
  if (::listen(s.get(), 64) != 0) return ErrnoStatus(what + ": listen");
  return s;
}

StatusOr<UniqueFd> Accept(int listener) {
  UniqueFd c(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!c.valid()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
      return Unavailable("accept: no connection waiting");
    return ErrnoStatus("accept");
  }
  return c;
}

StatusOr<UniqueFd> Connect(const SocketAddress& address, Deadline deadline) {
  const std::string what = "connect to " + address.ToString();
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus(what + ": socket");
  sockaddr_un sun;
  const socklen_t len = Fill(address, &sun);
  for (;;) {
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&sun), len) == 0) return s;
    const int err = errno;
    if (err == ECONNREFUSED || err == ENOENT)
      return NotFound(what + ": nothing listens there (never published, freed, or its publisher is gone)");
    if (err == EAGAIN || err == EINTR) {  // the listener's backlog is full: retry until the deadline
      if (Clock::now() >= deadline) return DeadlineExceeded(what + ": the publisher accepts no connection (backlog full)");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    return ErrnoStatus(what, err);
  }
}

StatusOr<PeerCredentials> PeerOf(int sock) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return ErrnoStatus("getsockopt SO_PEERCRED");
  return PeerCredentials{cred.pid, cred.uid};
}

std::string_view FrameTypeName(FrameType t) {
  switch (t) {
    case FrameType::kRequest: return "request";
    case FrameType::kOffer: return "offer";
    case FrameType::kAck: return "ack";
    case FrameType::kAcked: return "acked";
    case FrameType::kError: return "error";
  }
  return "?";
}

std::array<unsigned char, kFrameHeaderBytes> EncodeFrameHeader(const FrameHeader& h) {
  std::array<unsigned char, kFrameHeaderBytes> out{};
  Put32(out.data(), kFrameMagic);
  Put32(out.data() + 4, static_cast<uint32_t>(h.type));
  Put32(out.data() + 8, h.payload_bytes);
  Put32(out.data() + 12, h.fd_count);
  return out;
}

StatusOr<FrameHeader> ParseFrameHeader(std::span<const unsigned char, kFrameHeaderBytes> bytes) {
  const uint32_t magic = Get32(bytes.data());
  if (magic != kFrameMagic)
    return DataLoss("ipc frame: magic " + Hex32(magic) + ", expected 0x31495754 (\"TWI1\"): not a tandem weights peer");
  const uint32_t type = Get32(bytes.data() + 4);
  if (type < 1 || type > 5) return DataLoss("ipc frame: unknown type " + std::to_string(type) + " (expected 1 to 5)");
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.payload_bytes = Get32(bytes.data() + 8);
  h.fd_count = Get32(bytes.data() + 12);
  if (h.payload_bytes > kMaxFramePayload)
    return DataLoss("ipc frame: payload of " + std::to_string(h.payload_bytes) + " bytes, the limit is " +
                    std::to_string(kMaxFramePayload));
  if (h.fd_count > kMaxFrameFds)
    return DataLoss("ipc frame: " + std::to_string(h.fd_count) + " descriptors, the limit is " + std::to_string(kMaxFrameFds));
  return h;
}

Status SendFrame(int sock, FrameType type, std::string_view payload, std::span<const int> fds, Deadline deadline) {
  if (payload.size() > kMaxFramePayload)
    return InvalidArgument("send " + std::string(FrameTypeName(type)) + ": payload of " + std::to_string(payload.size()) +
                           " bytes, the limit is " + std::to_string(kMaxFramePayload));
  if (fds.size() > kMaxFrameFds) return InvalidArgument("send: " + std::to_string(fds.size()) + " descriptors, the limit is 4");
  const auto header = EncodeFrameHeader({type, static_cast<uint32_t>(payload.size()), static_cast<uint32_t>(fds.size())});
  std::string what = "send " + std::string(FrameTypeName(type));
  // The header goes first, alone, with the descriptors.
  size_t sent = 0;
  while (sent < header.size()) {
    iovec iov{const_cast<unsigned char*>(header.data()) + sent, header.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
    if (sent == 0 && !fds.empty()) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TANDEM_RETURN_IF_ERROR(WaitFor(sock, POLLOUT, deadline, what.c_str()));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return PeerClosed(what.c_str(), errno);
    return ErrnoStatus(what);
  }
  for (size_t at = 0; at < payload.size();) {
    const ssize_t n = ::send(sock, payload.data() + at, payload.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      at += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TANDEM_RETURN_IF_ERROR(WaitFor(sock, POLLOUT, deadline, what.c_str()));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return PeerClosed(what.c_str(), errno);
    return ErrnoStatus(what);
  }
  return Status::Ok();
}

StatusOr<Frame> RecvFrame(int sock, Deadline deadline) {
  Frame f;
  std::array<unsigned char, kFrameHeaderBytes> header{};
  size_t got = 0;
  bool truncated = false;
  while (got < header.size()) {
    iovec iov{header.data() + got, header.size() - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFrameFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          f.fds.emplace_back(fd);
        }
      }
      if (msg.msg_flags & MSG_CTRUNC) truncated = true;
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return PeerClosed(got ? "receive a frame (mid-header)" : "receive a frame", 0);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      TANDEM_RETURN_IF_ERROR(WaitFor(sock, POLLIN, deadline, "receive a frame"));
      continue;
    }
    if (errno == ECONNRESET) return PeerClosed("receive a frame", errno);
    return ErrnoStatus("recvmsg");
  }
  if (truncated) return DataLoss("ipc frame: more descriptors than the limit of " + std::to_string(kMaxFrameFds) + " arrived");
  TANDEM_ASSIGN_OR_RETURN(FrameHeader h, ParseFrameHeader(header));
  if (f.fds.size() != h.fd_count)
    return DataLoss("ipc " + std::string(FrameTypeName(h.type)) + " frame: the header announces " +
                    std::to_string(h.fd_count) + " descriptors, " + std::to_string(f.fds.size()) + " arrived");
  f.type = h.type;
  f.payload.resize(h.payload_bytes);
  const std::string what = "receive the " + std::string(FrameTypeName(h.type)) + " frame's payload";
  for (size_t at = 0; at < f.payload.size();) {
    const ssize_t n = ::recv(sock, f.payload.data() + at, f.payload.size() - at, 0);
    if (n > 0) {
      at += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return PeerClosed(what.c_str(), 0);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      TANDEM_RETURN_IF_ERROR(WaitFor(sock, POLLIN, deadline, what.c_str()));
      continue;
    }
    if (errno == ECONNRESET) return PeerClosed(what.c_str(), errno);
    return ErrnoStatus("recv");
  }
  return f;
}

}  // namespace tandem::weights::ipc

// Unix-domain sockets for the cuda-ipc weight transport (docs/weights.md
// "The cuda-ipc transport"; issue #15 item 1): addresses, framed messages
// that may carry file descriptors (SCM_RIGHTS), and deadlines on every
// operation, so a peer that dies or stops answering is an error, never a
// hang. Torch-free and CUDA-free (unit-tested on CPU: tests/ipc_socket_test.cc).
//
// Addresses: "@NAME" is NAME in Linux's abstract namespace (no file; gone
// when its listener closes, so a killed publisher leaves nothing behind);
// "/PATH" is a socket file (its directory's permissions apply). NAME is 1
// to 100 bytes of [A-Za-z0-9._-]; PATH is absolute, at most 107 bytes, no
// NUL, no "." or ".." component.
//
// A frame on the stream is a 16-byte header, little-endian
//   magic "TWI1" (0x31495754) | type | payload_bytes | fd_count
// followed by payload_bytes of payload (JSON, ipc_messages.h). fd_count
// descriptors travel as SCM_RIGHTS ancillary data with the header's bytes.
// Every received header is hostile: a wrong magic, an unknown type, a
// payload over kMaxFramePayload, more than kMaxFrameFds descriptors, or a
// descriptor count that differs from what arrived is DataLoss naming it;
// descriptors that arrived with a refused frame are closed.
//
// Errors of the I/O calls: NotFound when nothing listens at the address
// (never served, freed, or its publisher is gone); Unavailable when the
// peer closed the connection or reset it; DeadlineExceeded when the
// deadline passed. Sockets are non-blocking and close-on-exec; sends use
// MSG_NOSIGNAL (a closed peer is an error value, not SIGPIPE).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::weights::ipc {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { const int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SocketAddress {
  bool abstract = true;
  std::string name;  // without the '@'; or the absolute path
  std::string ToString() const { return abstract ? "@" + name : name; }
};
StatusOr<SocketAddress> ParseSocketAddress(std::string_view text);

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline After(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// Binds and listens (backlog 64). A path whose file is a socket nobody
// listens on (a killed publisher's) is replaced; any other existing file is
// FailedPrecondition; an abstract name in use is AlreadyExists.
StatusOr<UniqueFd> Listen(const SocketAddress& address);
StatusOr<UniqueFd> Accept(int listener);  // a non-blocking connection; Unavailable(EAGAIN) when none waits
StatusOr<UniqueFd> Connect(const SocketAddress& address, Deadline deadline);

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
};
StatusOr<PeerCredentials> PeerOf(int sock);

enum class FrameType : uint32_t { kRequest = 1, kOffer = 2, kAck = 3, kAcked = 4, kError = 5 };
std::string_view FrameTypeName(FrameType t);

inline constexpr uint32_t kFrameMagic = 0x31495754;  // "TWI1" little-endian
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kMaxFramePayload = 16u << 20;
inline constexpr uint32_t kMaxFrameFds = 4;

struct FrameHeader {
  FrameType type = FrameType::kError;
  uint32_t payload_bytes = 0;
  uint32_t fd_count = 0;
};
std::array<unsigned char, kFrameHeaderBytes> EncodeFrameHeader(const FrameHeader& h);
StatusOr<FrameHeader> ParseFrameHeader(std::span<const unsigned char, kFrameHeaderBytes> bytes);

struct Frame {
  FrameType type = FrameType::kError;
  std::string payload;
  std::vector<UniqueFd> fds;
};
// Sends one frame; the descriptors in `fds` stay the caller's (the peer
// receives duplicates). InvalidArgument for a payload or fd count over the limits.
Status SendFrame(int sock, FrameType type, std::string_view payload, std::span<const int> fds, Deadline deadline);
StatusOr<Frame> RecvFrame(int sock, Deadline deadline);

}  // namespace tandem::weights::ipc

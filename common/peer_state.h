// What a stream socket that turned readable while a request is being served
// says about its peer. A watch for a client that goes away (an HTTP server
// streaming or working on a request) waits for readability; readable means
// the peer closed its end, reset the connection, or sent more data, but a
// wakeup can also be spurious (an event queued for a descriptor that was
// closed, whose number the socket now reuses). Looking with MSG_PEEK tells
// them apart without consuming or blocking.
#pragma once

#include <sys/socket.h>

#include <cerrno>

namespace tandem {

enum class PeerState {
  kGone,   // end of stream, or an error (reset, not connected)
  kData,   // bytes to read (a pipelined request)
  kQuiet,  // nothing happened: watch again
};

inline PeerState PeekPeer(int fd) {
  char c;
  for (;;) {
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return PeerState::kData;
    if (n == 0) return PeerState::kGone;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return PeerState::kQuiet;
    return PeerState::kGone;
  }
}

}  // namespace tandem

// A TCP listener for client tests (rollout_client_test.cc,
// teacher_client_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tandem::roles::testing {

// A TCP listener on a free port that accepts nothing (the kernel completes
// connections into its backlog; nobody reads or answers).
struct SilentListener {
  int fd = -1;
  int port = 0;
  SilentListener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

}  // namespace tandem::roles::testing

// PeekPeer (common/peer_state.h) on real sockets: a quiet peer, data (not
// consumed), an orderly close, and a TCP reset.
#include "common/peer_state.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(PeekPeerTest, QuietThenDataThenClosed) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_EQ(PeekPeer(sv[0]), PeerState::kQuiet);
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  EXPECT_EQ(PeekPeer(sv[0]), PeerState::kData);
  EXPECT_EQ(PeekPeer(sv[0]), PeerState::kData) << "the peek consumed the byte";
  char c = 0;
  ASSERT_EQ(::read(sv[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  EXPECT_EQ(PeekPeer(sv[0]), PeerState::kQuiet);
  ::close(sv[1]);
  EXPECT_EQ(PeekPeer(sv[0]), PeerState::kGone);
  ::close(sv[0]);
}

TEST(PeekPeerTest, ResetIsGoneAndABadDescriptorToo) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const int server = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  EXPECT_EQ(PeekPeer(server), PeerState::kQuiet);
  const linger hard{1, 0};  // close with RST
  ASSERT_EQ(::setsockopt(client, SOL_SOCKET, SO_LINGER, &hard, sizeof hard), 0);
  ::close(client);
  EXPECT_EQ(PeekPeer(server), PeerState::kGone);
  ::close(server);
  ::close(listener);
  EXPECT_EQ(PeekPeer(server), PeerState::kGone);  // EBADF
}

}  // namespace
}  // namespace tandem

// cuda-ipc's sockets and frames (ipc_socket.h) on CPU: addresses, the frame
// header against hostile bytes, descriptors passed with SCM_RIGHTS (a memfd
// stands for the VMM allocation's descriptor), and every bounded wait.
#include "workers/weights/ipc_socket.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

namespace tandem::weights::ipc {
namespace {

using std::chrono::milliseconds;

std::string UniqueName(const char* what) {
  static std::mt19937_64 rng(std::random_device{}());
  return std::string("tandem-test-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000);
}

std::pair<UniqueFd, UniqueFd> Pair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

TEST(IpcSocketTest, AddressesAreParsedStrictly) {
  auto a = ParseSocketAddress("@tandem-job-actor_0");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->abstract);
  EXPECT_EQ(a->ToString(), "@tandem-job-actor_0");
  auto p = ParseSocketAddress("/run/tandem/j/actor.sock");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->abstract);
  struct Bad {
    std::string text, message;
  };
  const std::vector<Bad> bad = {
      {"", "expected @NAME"},
      {"relative.sock", "expected @NAME"},
      {"@", "1 to 100 bytes"},
      {"@" + std::string(101, 'a'), "1 to 100 bytes"},
      {"@a/b", "only letters"},
      {"@a b", "only letters"},
      {"/" + std::string(120, 'a'), "at most 107"},
      {"/a/../b.sock", "\"..\" component"},
      {"/a//b.sock", "empty"},
      {"/a/./b", "component"},
      {"/a/", "names a directory"},
      {std::string("/a\0b", 4), "NUL"},
  };
  for (const Bad& b : bad) {
    auto r = ParseSocketAddress(b.text);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.message), std::string::npos) << b.text << ": " << r.status().message();
  }
}

TEST(IpcSocketTest, FrameHeaderRoundTripsAndRefusesHostileBytes) {
  const auto bytes = EncodeFrameHeader({FrameType::kOffer, 1234, 1});
  auto h = ParseFrameHeader(bytes);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->type, FrameType::kOffer);
  EXPECT_EQ(h->payload_bytes, 1234u);
  EXPECT_EQ(h->fd_count, 1u);
  struct Case {
    int at;
    unsigned char value;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{{0, 'X', "magic"}, {4, 0, "unknown type 0"}, {4, 6, "unknown type 6"},
                                         {11, 0x7f, "the limit is 16777216"}, {12, 5, "5 descriptors"}}) {
    auto b = bytes;
    b[static_cast<size_t>(c.at)] = c.value;
    auto r = ParseFrameHeader(b);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
}

TEST(IpcSocketTest, FramePassesADescriptorToTheSameFile) {
  auto pair = Pair();
  UniqueFd& a = pair.first;
  UniqueFd& b = pair.second;
  UniqueFd mem(::memfd_create("tandem-test", MFD_CLOEXEC));
  ASSERT_TRUE(mem.valid());
  ASSERT_EQ(::ftruncate(mem.get(), 8192), 0);
  const int fd = mem.get();
  const std::string payload(100000, 'p');  // larger than one socket buffer's first write
  std::thread sender([&] { EXPECT_TRUE(SendFrame(a.get(), FrameType::kOffer, payload, {&fd, 1}, After(milliseconds(2000))).ok()); });
  auto f = RecvFrame(b.get(), After(milliseconds(2000)));
  sender.join();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->type, FrameType::kOffer);
  EXPECT_EQ(f->payload, payload);
  ASSERT_EQ(f->fds.size(), 1u);
  struct stat s1 {}, s2 {};
  ASSERT_EQ(::fstat(mem.get(), &s1), 0);
  ASSERT_EQ(::fstat(f->fds[0].get(), &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino);
  EXPECT_NE(mem.get(), f->fds[0].get());
  EXPECT_EQ(s2.st_size, 8192);
}

TEST(IpcSocketTest, MissingDescriptorsAreDataLoss) {
  auto [a, b] = Pair();
  // A header that announces a descriptor, sent without one.
  const auto header = EncodeFrameHeader({FrameType::kOffer, 2, 1});
  ASSERT_EQ(::send(a.get(), header.data(), header.size(), 0), 16);
  ASSERT_EQ(::send(a.get(), "{}", 2, 0), 2);
  auto f = RecvFrame(b.get(), After(milliseconds(1000)));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("announces 1 descriptors, 0 arrived"), std::string::npos) << f.status().message();
}

TEST(IpcSocketTest, WaitsAreBoundedAndAClosedPeerIsUnavailable) {
  auto [a, b] = Pair();
  const auto t0 = Clock::now();
  auto f = RecvFrame(b.get(), After(milliseconds(150)));
  EXPECT_EQ(f.status().code(), StatusCode::kDeadlineExceeded) << f.status().ToString();
  EXPECT_LT(Clock::now() - t0, milliseconds(1500));
  // Half a header, then silence: still bounded.
  ASSERT_EQ(::send(a.get(), "TWI", 3, 0), 3);
  f = RecvFrame(b.get(), After(milliseconds(150)));
  EXPECT_EQ(f.status().code(), StatusCode::kDeadlineExceeded) << f.status().ToString();
  a.reset();
  f = RecvFrame(b.get(), After(milliseconds(1000)));
  EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
  EXPECT_NE(f.status().message().find("closed"), std::string::npos) << f.status().message();
  const Status st = SendFrame(b.get(), FrameType::kAck, "{}", {}, After(milliseconds(1000)));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
}

TEST(IpcSocketTest, ListenAndConnectOnAbstractNamesAndPaths) {
  const SocketAddress nobody{true, UniqueName("nobody")};
  auto c = Connect(nobody, After(milliseconds(500)));
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound) << c.status().ToString();
  EXPECT_NE(c.status().message().find("nothing listens"), std::string::npos);

  const SocketAddress abs{true, UniqueName("abs")};
  auto l = Listen(abs);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(Listen(abs).status().code(), StatusCode::kAlreadyExists);
  auto conn = Connect(abs, After(milliseconds(500)));
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto peer = PeerOf(conn->get());
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::geteuid());
  l->reset();  // the name goes with its listener
  EXPECT_EQ(Connect(abs, After(milliseconds(500))).status().code(), StatusCode::kNotFound);

  char dir[] = "/tmp/tandem-ipc-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const SocketAddress path{false, std::string(dir) + "/p.sock"};
  {
    auto first = Listen(path);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(Listen(path).status().code(), StatusCode::kAlreadyExists) << "someone listens there";
  }  // closed without unlinking: a killed publisher's stale socket file
  EXPECT_EQ(Connect(path, After(milliseconds(500))).status().code(), StatusCode::kNotFound);
  auto again = Listen(path);
  ASSERT_TRUE(again.ok()) << "the stale file is replaced: " << again.status().ToString();
  EXPECT_TRUE(Connect(path, After(milliseconds(500))).ok());
  again->reset();
  ::unlink(path.name.c_str());
  const SocketAddress file{false, std::string(dir) + "/regular"};
  std::ofstream(file.name) << "x";
  EXPECT_EQ(Listen(file).status().code(), StatusCode::kFailedPrecondition);
  ::unlink(file.name.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace tandem::weights::ipc

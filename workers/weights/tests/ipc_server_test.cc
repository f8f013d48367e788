// The cuda-ipc publisher's socket thread (ipc_server.h) with real readers
// (ipc_client.h) on CPU: a memfd stands for the version's VMM allocation,
// since what the server promises — which version is served, who gets the
// descriptor, when acks free it, what a hostile or silent peer gets — does
// not depend on what the descriptor is. The CUDA side runs in
// ipc_transport_test.cc on a device.
#include "workers/weights/ipc_server.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "workers/weights/ipc_client.h"
#include "workers/weights/ipc_messages.h"

namespace tandem::weights::ipc {
namespace {

using std::chrono::milliseconds;

class MemfdExport final : public IpcExport {
 public:
  explicit MemfdExport(uint64_t bytes, int* alive = nullptr) : fd_(::memfd_create("tandem-test-export", MFD_CLOEXEC)), bytes_(bytes), alive_(alive) {
    EXPECT_EQ(::ftruncate(fd_.get(), static_cast<off_t>(bytes)), 0);
    if (alive_) ++*alive_;
  }
  ~MemfdExport() override {
    if (alive_) --*alive_;
  }
  int fd() const override { return fd_.get(); }
  uint64_t bytes() const override { return bytes_; }

 private:
  UniqueFd fd_;
  uint64_t bytes_;
  int* alive_;
};

std::string Offer(int64_t version) {
  IpcOffer o;
  o.version = version;
  o.sealed = true;
  o.device_uuid = "GPU-00000000000000000000000000000001";
  o.allocation_bytes = 1 << 20;
  o.publisher_pid = ::getpid();
  o.manifest.version = version;
  o.manifest.buffers = {{model::DType::kF32, 4096}};
  o.manifest.tensors = {{"w", model::DType::kF32, {1024}, 0, 0}};
  return EncodeOffer(o);
}

SocketAddress UniqueAddress() {
  static std::mt19937_64 rng(std::random_device{}());
  return {true, "tandem-srvtest-" + std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000)};
}

struct Served {
  std::unique_ptr<IpcServer> server;
  int alive = 0;  // MemfdExports not yet freed
  void Offer(int64_t v, uint32_t expected) {
    server->Offer(v, ipc::Offer(v), std::make_unique<MemfdExport>(1 << 20, &alive), expected);
  }
};

Served Start(IpcServerOptions options = {}) {
  Served s;
  auto server = IpcServer::Start(UniqueAddress(), options);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  s.server = std::move(*server);
  return s;
}

StatusOr<IpcConnection> Ask(const IpcServer& server, int64_t version) {
  return IpcConnection::Request({server.address(), version}, milliseconds(2000));
}

TEST(IpcServerTest, ReaderGetsTheDescriptorAndItsAckFreesTheVersion) {
  Served s = Start();
  s.Offer(3, 1);
  EXPECT_EQ(s.server->HeldBytes(), 1u << 20);
  auto c = Ask(*s.server, 3);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->offer().version, 3);
  UniqueFd fd = c->TakeDescriptor();
  struct stat st {};
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20) << "the descriptor is the export's";
  auto acked = c->Ack(milliseconds(2000));
  ASSERT_TRUE(acked.ok()) << acked.status().ToString();
  EXPECT_EQ(acked->acks, 1u);
  EXPECT_TRUE(acked->freed);
  EXPECT_EQ(s.server->HeldBytes(), 0u) << "freed before the acked answer";
  EXPECT_EQ(s.alive, 0);
  auto late = Ask(*s.server, 3);
  EXPECT_EQ(late.status().code(), StatusCode::kNotFound);
  EXPECT_NE(late.status().message().find("freed after its 1 expected reader acknowledged"), std::string::npos)
      << late.status().message();
}

TEST(IpcServerTest, AcksCountOncePerConnectionUpToTheExpectedReaders) {
  Served s = Start();
  s.Offer(1, 2);
  auto a = Ask(*s.server, 1);
  auto b = Ask(*s.server, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->Ack(milliseconds(2000)).ok());
  auto again = a->Ack(milliseconds(2000));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->acks, 1u) << "a repeated ack counts once";
  EXPECT_EQ(s.server->HeldBytes(), 1u << 20);
  auto c = Ask(*s.server, 1);  // a third reader may still come before the second acks
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto done = b->Ack(milliseconds(2000));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->acks, 2u);
  EXPECT_TRUE(done->freed);
  EXPECT_EQ(s.server->HeldBytes(), 0u);
  auto third = c->Ack(milliseconds(2000));
  ASSERT_TRUE(third.ok()) << "an ack after the free is answered: " << third.status().ToString();
  EXPECT_TRUE(third->freed);
  EXPECT_EQ(s.server->counters().acks, 2u);
}

TEST(IpcServerTest, ReplacementAndReleaseAreNamedInTheRefusal) {
  Served s = Start();
  s.Offer(1, 0);
  s.Offer(2, 0);
  EXPECT_EQ(s.alive, 1) << "version 1 freed by the replacement";
  auto old = Ask(*s.server, 1);
  EXPECT_EQ(old.status().code(), StatusCode::kNotFound);
  EXPECT_NE(old.status().message().find("replaced by version 2"), std::string::npos) << old.status().message();
  auto never = Ask(*s.server, 9);
  EXPECT_EQ(never.status().code(), StatusCode::kNotFound);
  EXPECT_NE(never.status().message().find("serves version 2"), std::string::npos) << never.status().message();
  s.server->Release("released by its publisher (ReleaseAll)");
  EXPECT_EQ(s.alive, 0);
  EXPECT_EQ(s.server->HeldBytes(), 0u);
  EXPECT_NE(Ask(*s.server, 2).status().message().find("ReleaseAll"), std::string::npos);
}

TEST(IpcServerTest, ReaderThatDiesWithoutAckLeavesTheVersionHeld) {
  Served s = Start();
  s.Offer(1, 1);
  {
    auto c = Ask(*s.server, 1);
    ASSERT_TRUE(c.ok());
  }  // closed without an ack: a reader killed mid-load
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(s.server->HeldBytes(), 1u << 20);
  auto next = Ask(*s.server, 1);
  ASSERT_TRUE(next.ok()) << "another reader still gets it: " << next.status().ToString();
  ASSERT_TRUE(next->Ack(milliseconds(2000)).ok());
  EXPECT_EQ(s.server->HeldBytes(), 0u);
}

TEST(IpcServerTest, SilentAndHostilePeersAreDroppedWithoutStoppingOthers) {
  IpcServerOptions options;
  options.request_timeout = milliseconds(200);
  options.io_timeout = milliseconds(200);
  Served s = Start(options);
  s.Offer(1, 0);
  // Silent: connects, never asks.
  auto silent = Connect(s.server->address(), After(milliseconds(1000)));
  ASSERT_TRUE(silent.ok());
  // Garbage: a frame with a wrong magic.
  auto garbage = Connect(s.server->address(), After(milliseconds(1000)));
  ASSERT_TRUE(garbage.ok());
  ASSERT_EQ(::send(garbage->get(), "GARBAGE-GARBAGE-", 16, MSG_NOSIGNAL), 16);
  // Half a frame, then silence.
  auto half = Connect(s.server->address(), After(milliseconds(1000)));
  ASSERT_TRUE(half.ok());
  ASSERT_EQ(::send(half->get(), "TWI1", 4, MSG_NOSIGNAL), 4);
  // A reader sending a descriptor.
  auto sender = Connect(s.server->address(), After(milliseconds(1000)));
  ASSERT_TRUE(sender.ok());
  const int fd = 0;
  ASSERT_TRUE(SendFrame(sender->get(), FrameType::kRequest, EncodeVersionMessage(1), {&fd, 1}, After(milliseconds(1000))).ok());
  // An ack for a version never offered on the connection.
  auto early = Connect(s.server->address(), After(milliseconds(1000)));
  ASSERT_TRUE(early.ok());
  ASSERT_TRUE(SendFrame(early->get(), FrameType::kAck, EncodeVersionMessage(1), {}, After(milliseconds(1000))).ok());
  auto answer = RecvFrame(early->get(), After(milliseconds(2000)));
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->type, FrameType::kError);
  EXPECT_EQ(ParseError(answer->payload).code(), StatusCode::kFailedPrecondition);

  // A good reader is served meanwhile.
  auto good = Ask(*s.server, 1);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  // Every bad connection is closed by the server, within its timeouts.
  for (UniqueFd* c : {&*silent, &*garbage, &*half, &*sender}) {
    StatusOr<Frame> f = RecvFrame(c->get(), After(milliseconds(3000)));
    while (f.ok()) f = RecvFrame(c->get(), After(milliseconds(3000)));  // an error answer first, maybe
    EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
  }
  EXPECT_GE(s.server->counters().dropped, 4u);
  EXPECT_TRUE(good->Ack(milliseconds(2000)).ok());
}

TEST(IpcServerTest, DestroyedServerClosesConnectionsAndTheName) {
  Served s = Start();
  s.Offer(1, 1);
  auto c = Ask(*s.server, 1);
  ASSERT_TRUE(c.ok());
  const SocketAddress address = s.server->address();
  s.server.reset();
  EXPECT_EQ(s.alive, 0) << "the destructor frees the version";
  auto ack = c->Ack(milliseconds(2000));
  EXPECT_EQ(ack.status().code(), StatusCode::kUnavailable) << ack.status().ToString();
  EXPECT_NE(ack.status().message().find("ack not delivered"), std::string::npos) << ack.status().message();
  auto after = IpcConnection::Request({address, 1}, milliseconds(500));
  EXPECT_EQ(after.status().code(), StatusCode::kNotFound) << after.status().ToString();
}

TEST(IpcServerTest, StoppedPublisherIsADeadlineNotAHang) {
  // A listener that accepts (the kernel queues the connection) but never answers.
  const SocketAddress address = UniqueAddress();
  auto l = Listen(address);
  ASSERT_TRUE(l.ok());
  const auto t0 = Clock::now();
  auto c = IpcConnection::Request({address, 1}, milliseconds(300));
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  EXPECT_NE(c.status().message().find("ipc:@" + address.name + "#v1"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace tandem::weights::ipc

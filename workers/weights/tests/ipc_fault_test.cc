// The cuda-ipc transport under faults, with real processes on one GPU
// (issue #15 item 3): a reader killed mid-load (before or after its copy,
// never acknowledged) leaves the export to the publisher, which still
// serves and frees it; a publisher killed while a reader holds its offer
// leaves that reader's copy whole and its ack a clear error; a reader of a
// killed publisher gets NotFound at once; a stopped publisher is a deadline,
// never a hang. The other process is weights_peer (TANDEM_BIN_DIR),
// started fresh with posix_spawn; every process killed here is a child
// this test started, killed by its pid. Skips without a GPU.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "workers/weights/ipc_transport.h"
#include "workers/weights/tests/ipc_fault_config.h"
#include "workers/weights/tests/peer_process.h"
#include "workers/weights/tests/transport_suite.h"

namespace tandem::weights::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kVocab = 60000;
const at::Device kCuda0(at::kCUDA, 0);

std::string UniqueJob() {
  static std::mt19937_64 rng(std::random_device{}());
  return "ipcfault" + std::to_string(::getpid()) + "x" + std::to_string(rng() % 1000000000);
}

class IpcFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status st = IpcTransportAvailable(0); !st.ok()) GTEST_SKIP() << "cuda-ipc needs a CUDA device: " << st.ToString();
    if (::access(Peer::Binary().c_str(), X_OK) != 0) GTEST_SKIP() << "no " << Peer::Binary() << " (TANDEM_BIN_DIR)";
  }
};

TEST_F(IpcFaultTest, ReaderKilledMidLoadLeavesTheExportToThePublisher) {
  const model::ModelConfig c = FaultConfig(kVocab);
  const model::ParameterSet a = RandomParameters(c, 11, kCuda0);
  IpcPublisher pub({UniqueJob(), "actor", 1});
  auto source = pub.Publish(1, a);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const uint64_t held = pub.ExportedBytes();
  ASSERT_GT(held, 0u);
  std::mt19937_64 rng(std::random_device{}());
  int after_copy = 0, before_copy = 0;
  for (int i = 0; i < 6; ++i) {
    Peer reader({"read", *source, std::to_string(kVocab), "11", "60000"});  // holds its ack for a minute
    ASSERT_TRUE(reader.started());
    if (i % 2 == 0) {
      // Killed once it copied and before it acknowledged.
      const std::string line = reader.ReadLine(milliseconds(30000));
      ASSERT_EQ(line, "loaded match") << "the reader in another process got the bytes";
      ++after_copy;
    } else {
      // Killed at a random moment of its start, connection, import or copy.
      std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
      ++before_copy;
    }
    reader.Signal(SIGKILL);
    reader.Reap();
    EXPECT_EQ(pub.ExportedBytes(), held) << "no ack came: the export is still held";
  }
  // The publisher still serves the version, and the next reader's ack frees it.
  Peer last({"read", *source, std::to_string(kVocab), "11", "0"});
  EXPECT_EQ(last.ReadLine(milliseconds(30000)), "loaded match");
  EXPECT_EQ(last.ReadLine(milliseconds(10000)), "acked");
  EXPECT_FALSE(last.Reap());
  EXPECT_EQ(pub.ExportedBytes(), 0u) << "the one expected reader acknowledged from its own process";
  std::cout << "[weights] ipc reader kills: " << after_copy << " after the copy, " << before_copy
            << " at random points before it\n";
}

TEST_F(IpcFaultTest, PublisherKilledIsAClearErrorNeverAHang) {
  const model::ModelConfig c = FaultConfig(kVocab);
  const model::ParameterSet want = RandomParameters(c, 12, kCuda0);
  Peer publisher({"publish", UniqueJob(), "actor", "4", std::to_string(kVocab), "12"});
  ASSERT_TRUE(publisher.started());
  const std::string line = publisher.ReadLine(milliseconds(60000));
  ASSERT_EQ(line.rfind("published ipc:@", 0), 0u) << line;
  const std::string source = line.substr(10);
  // Reader A loads (copy done, not acked); reader B has the offer and its mapping, no copy yet.
  const model::ParameterSet ra = PoisonedParameters(c, at::kFloat, kCuda0), rb = PoisonedParameters(c, at::kFloat, kCuda0);
  auto a = OpenWeightSource(source);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->LoadParameters(ra).ok());
  EXPECT_EQ(FirstDifference(want, ra), "") << "bytes from another process, bit for bit";
  auto b = OpenWeightSource(source);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  publisher.Signal(SIGKILL);
  EXPECT_TRUE(publisher.Reap());
  // B's own mapping keeps the memory: its copy is whole.
  ASSERT_TRUE((*b)->LoadParameters(rb).ok());
  EXPECT_EQ(FirstDifference(want, rb), "") << "a reader that mapped the export keeps it past its publisher";
  const auto t0 = Clock::now();
  const Status ack = (*a)->Acknowledge();
  EXPECT_EQ(ack.code(), StatusCode::kUnavailable) << ack.ToString();
  EXPECT_NE(ack.message().find("ack not delivered"), std::string::npos) << ack.message();
  auto again = OpenWeightSource(source);
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound) << again.status().ToString();
  EXPECT_NE(again.status().message().find("nothing listens"), std::string::npos) << again.status().message();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000)) << "errors come at once, not after a timeout";
}

TEST_F(IpcFaultTest, StoppedPublisherIsADeadline) {
  Peer publisher({"publish", UniqueJob(), "actor", "1", std::to_string(kVocab), "13"});
  ASSERT_TRUE(publisher.started());
  const std::string line = publisher.ReadLine(milliseconds(60000));
  ASSERT_EQ(line.rfind("published ipc:", 0), 0u) << line;
  publisher.Signal(SIGSTOP);
  const auto t0 = Clock::now();
  auto r = OpenIpcSource(line.substr(14), {milliseconds(500)});
  const auto took = Clock::now() - t0;
  publisher.Signal(SIGCONT);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("the peer is stopped or busy"), std::string::npos) << r.status().message();
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_GE(took, milliseconds(450));
}

}  // namespace
}  // namespace tandem::weights::testing

// The cuda-ipc transport (ipc_transport.h) runs the shared suite on CUDA
// device 0 — publisher and readers in this process, each reader importing
// the export's descriptor from the socket like another process would — plus
// what only it promises: the source's form, device placement checks, a
// reader that imported a version keeps it across a replacement, hostile
// publishers (a manifest that fails its checks, an allocation smaller than
// claimed, an export on another GPU). Without a usable GPU every case skips
// with the reason (CI); the process-level faults are in ipc_fault_test.cc.
#include "workers/weights/ipc_transport.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <random>

#include "workers/weights/cuda_vmm.h"
#include "workers/weights/ipc_messages.h"
#include "workers/weights/ipc_server.h"
#include "workers/weights/tests/transport_suite.h"

namespace tandem::weights::testing {
namespace {

using std::chrono::milliseconds;

std::string UniqueJob() {
  static std::mt19937_64 rng(std::random_device{}());
  return "ipctest" + std::to_string(::getpid()) + "x" + std::to_string(rng() % 1000000000);
}

std::string WhyUnavailable() {
  const Status st = IpcTransportAvailable(0);
  return st.ok() ? "" : "cuda-ipc needs a CUDA device: " + st.ToString();
}

const at::Device kCuda0(at::kCUDA, 0);

// A descriptor received from a publisher, served again by a hostile one.
class ReceivedExport final : public ipc::IpcExport {
 public:
  ReceivedExport(ipc::UniqueFd fd, uint64_t bytes) : fd_(std::move(fd)), bytes_(bytes) {}
  int fd() const override { return fd_.get(); }
  uint64_t bytes() const override { return bytes_; }

 private:
  ipc::UniqueFd fd_;
  uint64_t bytes_;
};

// What the real publisher at `uri` offers: the payload and its descriptor.
ipc::Frame FetchOffer(const ipc::IpcUri& uri) {
  auto sock = ipc::Connect(uri.address, ipc::After(milliseconds(5000)));
  EXPECT_TRUE(sock.ok()) << sock.status().ToString();
  EXPECT_TRUE(ipc::SendFrame(sock->get(), ipc::FrameType::kRequest, ipc::EncodeVersionMessage(uri.version), {},
                             ipc::After(milliseconds(5000)))
                  .ok());
  auto f = ipc::RecvFrame(sock->get(), ipc::After(milliseconds(5000)));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->type, ipc::FrameType::kOffer);
  return std::move(*f);
}

// Takes over `address` (a socket file: unlinked, then bound by a server of
// ours) and serves `payload` with `fd` as version `version`.
std::unique_ptr<ipc::IpcServer> Hijack(const ipc::SocketAddress& address, int64_t version, std::string payload,
                                       ipc::UniqueFd fd, uint64_t bytes) {
  if (!address.abstract) ::unlink(address.name.c_str());
  auto s = ipc::IpcServer::Start(address);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  (*s)->Offer(version, std::move(payload), std::make_unique<ReceivedExport>(std::move(fd), bytes), 0);
  return std::move(*s);
}

class IpcHarness final : public TransportHarness {
 public:
  IpcHarness() {
    char dir[] = "/tmp/tandem-ipc-suite-XXXXXX";
    if (::mkdtemp(dir)) dir_ = dir;
  }
  ~IpcHarness() override {
    hostile_.clear();
    if (!dir_.empty()) model::testing::RemoveTree(dir_);
  }
  std::unique_ptr<WeightPublisher> MakePublisher(const model::ModelConfig&, uint32_t expected_readers) override {
    // Socket files in a directory of ours, so that the damage below can take a publisher's place.
    return std::make_unique<IpcPublisher>(IpcOptions{job_, "actor_" + std::to_string(n_++), expected_readers, dir_, {}});
  }
  bool durable() const override { return false; }
  std::string Unavailable() const override { return WhyUnavailable(); }
  std::string CorruptManifest(const std::string& source) override {
    const ipc::IpcUri uri = *ipc::ParseIpcUri(source.substr(4));
    ipc::Frame f = FetchOffer(uri);
    nlohmann::json j = nlohmann::json::parse(f.payload);
    j["manifest"]["tensors"][0]["offset"] = 2;  // not a multiple of 4 (F32)
    const uint64_t bytes = j["allocation_bytes"].get<uint64_t>();
    hostile_.push_back(Hijack(uri.address, uri.version, j.dump(), std::move(f.fds[0]), bytes));
    return "offer.manifest: tensors[0].offset: 2 is not a multiple of 4";
  }
  std::string Truncate(const std::string& source) override {
    // The real descriptor, offered as 64 MiB larger than it is.
    const ipc::IpcUri uri = *ipc::ParseIpcUri(source.substr(4));
    ipc::Frame f = FetchOffer(uri);
    nlohmann::json j = nlohmann::json::parse(f.payload);
    const uint64_t bytes = j["allocation_bytes"].get<uint64_t>() + (64u << 20);
    j["allocation_bytes"] = bytes;
    hostile_.push_back(Hijack(uri.address, uri.version, j.dump(), std::move(f.fds[0]), bytes));
    return "(truncated)";
  }

 private:
  std::string job_ = UniqueJob();
  std::string dir_;
  int n_ = 0;
  std::vector<std::unique_ptr<ipc::IpcServer>> hostile_;
};

INSTANTIATE_TEST_SUITE_P(Ipc, TransportSuite,
                         ::testing::Values(TransportCase{"ipc", [] { return std::make_unique<IpcHarness>(); }, kCuda0}),
                         TransportCaseName);

class IpcTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = WhyUnavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(IpcTransportTest, SourceNamesTheAbstractSocketAndTheVersion) {
  const std::string job = UniqueJob();
  IpcPublisher pub({job, "actor-0", 1});
  auto source = pub.Publish(3, RandomParameters(SuiteConfig(), 1, kCuda0));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(*source, "ipc:@tandem-" + job + "-actor_0#v3");
  auto from = OpenWeightSource(*source);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  EXPECT_EQ((*from)->version(), 3);
  EXPECT_EQ((*from)->Describe(), *source);
  EXPECT_TRUE((*from)->Acknowledge().ok());
  EXPECT_EQ(pub.ExportedBytes(), 0u);
  EXPECT_EQ(pub.counters().offers, 1u);
}

TEST_F(IpcTransportTest, ParametersMustBeOnTheExportsGpu) {
  const model::ModelConfig c = SuiteConfig();
  IpcPublisher pub({UniqueJob(), "actor", 1});
  auto host = pub.Publish(1, RandomParameters(c, 1));
  EXPECT_EQ(host.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(host.status().message().find("cuda-ipc moves device buffers"), std::string::npos) << host.status().message();
  auto source = pub.Publish(2, RandomParameters(c, 1, kCuda0));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const model::ParameterSet on_host = PoisonedParameters(c, at::kFloat);
  const Status st = OpenAndLoad(*source, on_host);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(FirstDifference(on_host, PoisonedParameters(c, at::kFloat)), "") << "a refused load wrote nothing";
}

TEST_F(IpcTransportTest, ImportedVersionStaysReadableAfterItIsReplaced) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet a = RandomParameters(c, 1, kCuda0), b = RandomParameters(c, 2, kCuda0);
  IpcPublisher pub({UniqueJob(), "actor", 1});
  auto v1 = pub.Publish(1, a);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  auto opened = OpenWeightSource(*v1);  // a reader mid-load when v2 comes: it has mapped v1
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_TRUE(pub.Publish(2, b).ok());
  EXPECT_EQ(OpenWeightSource(*v1).status().code(), StatusCode::kNotFound);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat, kCuda0);
  ASSERT_TRUE((*opened)->LoadParameters(reader).ok());
  EXPECT_EQ(FirstDifference(a, reader), "") << "the reader's own mapping kept v1's memory";
  EXPECT_TRUE((*opened)->Acknowledge().ok()) << "an ack of a replaced version is answered";
  EXPECT_GT(pub.ExportedBytes(), 0u) << "and does not free v2";
}

TEST_F(IpcTransportTest, ExportedBytesTrackTheAllocation) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 1, kCuda0);
  IpcPublisher pub({UniqueJob(), "actor", 1});
  EXPECT_EQ(pub.ExportedBytes(), 0u);
  auto source = pub.Publish(1, p);
  ASSERT_TRUE(source.ok());
  const uint64_t bytes = pub.ExportedBytes();
  EXPECT_GE(bytes, static_cast<uint64_t>(p.buffers()[0].nbytes()));
  EXPECT_LE(bytes, static_cast<uint64_t>(p.buffers()[0].nbytes()) + (4u << 20)) << "rounded to the granularity";
  pub.ReleaseAll();
  EXPECT_EQ(pub.ExportedBytes(), 0u);
  const Status st = OpenAndLoad(*source, PoisonedParameters(c, at::kFloat, kCuda0));
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("ReleaseAll"), std::string::npos) << st.message();
}

TEST_F(IpcTransportTest, ExportOfAnotherGpuIsRefused) {
  const model::ModelConfig c = SuiteConfig();
  char dir[] = "/tmp/tandem-ipc-gpu-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  {
    IpcPublisher pub({UniqueJob(), "actor", 1, dir, {}});
    auto source = pub.Publish(1, RandomParameters(c, 1, kCuda0));
    ASSERT_TRUE(source.ok());
    const ipc::IpcUri uri = *ipc::ParseIpcUri(source->substr(4));
    ipc::Frame f = FetchOffer(uri);
    nlohmann::json j = nlohmann::json::parse(f.payload);
    j["device_uuid"] = "GPU-00000000000000000000000000000000";
    auto hostile = Hijack(uri.address, 1, j.dump(), std::move(f.fds[0]), j["allocation_bytes"].get<uint64_t>());
    const Status st = OpenAndLoad(*source, PoisonedParameters(c, at::kFloat, kCuda0));
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("not one of this process's"), std::string::npos) << st.message();
  }
  model::testing::RemoveTree(dir);
}

}  // namespace
}  // namespace tandem::weights::testing

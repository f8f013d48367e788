// The shm transport (shm_transport.h) runs the shared suite, plus what only
// it promises: a reader that opened a version keeps it across a replacement,
// the segment's name and cleanup, and OpenWeightSource's routing.
#include "workers/weights/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "workers/weights/shm_segment.h"
#include "workers/weights/tests/shm_tamper.h"
#include "workers/weights/tests/transport_suite.h"

namespace tandem::weights::testing {
namespace {

std::string UniqueJob() {
  static std::mt19937_64 rng(std::random_device{}());
  return "shmtest" + std::to_string(::getpid()) + "x" + std::to_string(rng() % 1000000000);
}

class ShmHarness final : public TransportHarness {
 public:
  ~ShmHarness() override { RemoveSegments(JobSegmentPrefix(job_)); }
  std::unique_ptr<WeightPublisher> MakePublisher(const model::ModelConfig&, uint32_t expected_readers) override {
    return std::make_unique<ShmPublisher>(ShmOptions{job_, "actor_" + std::to_string(n_++), expected_readers});
  }
  bool durable() const override { return false; }
  std::string CorruptManifest(const std::string& source) override {
    TamperShm(source.substr(4), [](unsigned char* p, size_t n) { p[n - 20] ^= 0x01; });  // inside the manifest's JSON
    return "corrupt manifest";
  }
  std::string Truncate(const std::string& source) override {
    const int fd = ::shm_open(source.substr(4).c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0);
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(::ftruncate(fd, st.st_size / 2), 0);
    ::close(fd);
    return "truncated";
  }

 private:
  std::string job_ = UniqueJob();
  int n_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Shm, TransportSuite,
                         ::testing::Values(TransportCase{"shm", [] { return std::make_unique<ShmHarness>(); }}),
                         TransportCaseName);

TEST(ShmTransportTest, SourceNamesTheJobTaskAndVersion) {
  const std::string job = UniqueJob();
  ShmPublisher pub({job, "actor-0", 1});
  auto source = pub.Publish(3, RandomParameters(SuiteConfig(), 1));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(*source, "shm:/tandem-" + job + "-actor_0-v3");
  auto from = OpenWeightSource(*source);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  EXPECT_EQ((*from)->version(), 3);
}

TEST(ShmTransportTest, OpenedVersionStaysReadableAfterItIsReplaced) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet a = RandomParameters(c, 1), b = RandomParameters(c, 2);
  ShmPublisher pub({UniqueJob(), "actor", 1});
  auto v1 = pub.Publish(1, a);
  ASSERT_TRUE(v1.ok());
  auto opened = OpenWeightSource(*v1);  // a reader mid-load when v2 comes
  ASSERT_TRUE(opened.ok());
  ASSERT_TRUE(pub.Publish(2, b).ok());
  EXPECT_EQ(OpenWeightSource(*v1).status().code(), StatusCode::kNotFound);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat);
  ASSERT_TRUE((*opened)->LoadParameters(reader).ok());
  EXPECT_EQ(FirstDifference(a, reader), "");
  EXPECT_TRUE((*opened)->Acknowledge().ok());  // the name is gone already: still fine
}

TEST(ShmTransportTest, CorruptBytesAreRefusedBeforeAnyCopy) {
  const model::ModelConfig c = SuiteConfig();
  ShmPublisher pub({UniqueJob(), "actor", 1});
  auto v1 = pub.Publish(1, RandomParameters(c, 1));
  ASSERT_TRUE(v1.ok());
  const int fd = ::shm_open(v1->substr(4).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  unsigned char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, 4096 + 777), 1);
  byte ^= 0x80;
  ASSERT_EQ(::pwrite(fd, &byte, 1, 4096 + 777), 1);
  ::close(fd);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat), untouched = PoisonedParameters(c, at::kFloat);
  const Status st = OpenAndLoad(*v1, reader);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("corrupt bytes"), std::string::npos) << st.message();
  EXPECT_EQ(FirstDifference(untouched, reader), "");
}

TEST(ShmTransportTest, OpenWeightSourceRoutesSchemes) {
  EXPECT_EQ(OpenWeightSource("shm:/tandem-none-here-v1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenWeightSource("shm:relative").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenWeightSource("shm:/a/../b").status().code(), StatusCode::kInvalidArgument);
  auto nccl = OpenWeightSource("nccl:group");
  EXPECT_EQ(nccl.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("expected nccl:HOST:PORT/e<EPOCH>/n<READERS>#v<VERSION>"), std::string::npos)
      << nccl.status().message();
  // ipc: names a socket and a version (ipc_transport.h); the daemon's old short form is refused.
  auto ipc = OpenWeightSource("ipc:v1");
  EXPECT_EQ(ipc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ipc.status().message().find("expected ipc:@NAME#vVERSION"), std::string::npos) << ipc.status().message();
  EXPECT_EQ(OpenWeightSource("ipc:@tandem-nobody-here#v1").status().code(), StatusCode::kNotFound);
  EXPECT_NE(OpenWeightSource("s3:bucket").status().message().find("unknown scheme"), std::string::npos);
}

TEST(ShmTransportTest, ExportedBytesTrackTheSegment) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 1);
  ShmPublisher pub({UniqueJob(), "actor", 1});
  EXPECT_EQ(pub.ExportedBytes(), 0u);
  ASSERT_TRUE(pub.Publish(1, p).ok());
  const uint64_t bytes = pub.ExportedBytes();
  EXPECT_GE(bytes, static_cast<uint64_t>(p.buffers()[0].nbytes()));
  EXPECT_LE(bytes, static_cast<uint64_t>(p.buffers()[0].nbytes()) + (1u << 20));
  pub.ReleaseAll();
  EXPECT_EQ(pub.ExportedBytes(), 0u);
  EXPECT_TRUE(ListSegments(pub.prefix()).empty());
}

}  // namespace
}  // namespace tandem::weights::testing

// The file transport (file_transport.h) runs the shared suite, plus what
// only it promises: each version is a Hugging Face directory, renamed into
// place, and a dead publisher's temporary is cleaned up; the background
// publisher snapshots before it returns and reports its write's error; a
// reader waits for a version being written.
#include "workers/weights/file_transport.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "workers/model/checkpoint.h"
#include "workers/weights/tests/transport_suite.h"

namespace tandem::weights::testing {
namespace {

std::string MakeTempDir() {
  std::string tmpl = "/tmp/tandem-weights-file-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

class FileHarness final : public TransportHarness {
 public:
  ~FileHarness() override { model::testing::RemoveTree(root_); }
  std::unique_ptr<WeightPublisher> MakePublisher(const model::ModelConfig& config, uint32_t) override {
    return std::make_unique<FilePublisher>(FileOptions{root_ + "/pub" + std::to_string(n_++), config});
  }
  bool durable() const override { return true; }
  std::string CorruptManifest(const std::string& source) override {
    // The safetensors header is the file's manifest: break its JSON.
    const std::string file = source.substr(5) + "/model.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('#');
    return file;
  }
  std::string Truncate(const std::string& source) override {
    const std::string file = source.substr(5) + "/model.safetensors";
    struct stat st {};
    EXPECT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(::truncate(file.c_str(), st.st_size / 2), 0);
    return file;
  }

 private:
  std::string root_ = MakeTempDir();
  int n_ = 0;
};

INSTANTIATE_TEST_SUITE_P(File, TransportSuite,
                         ::testing::Values(TransportCase{"file", [] { return std::make_unique<FileHarness>(); }}),
                         TransportCaseName);

TEST(FileTransportTest, VersionIsAHuggingFaceDirectory) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 1);
  FilePublisher pub({root + "/weights", c});
  auto source = pub.Publish(4, p);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(*source, "file:" + root + "/weights/v4");
  auto model = model::LoadPretrained(root + "/weights/v4", at::Device(at::kCPU), at::kFloat);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(FirstDifference(p, (*model)->parameters()), "");
  EXPECT_FALSE(Exists(root + "/weights/.v4.tmp"));
  model::testing::RemoveTree(root);
}

TEST(FileTransportTest, DeadPublishersTemporaryAndOlderVersionsAreRemoved) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 1);
  {
    FilePublisher first({root, c});
    ASSERT_TRUE(first.Publish(1, p).ok());
  }
  // A publisher killed mid-publish of v2 left its temporary: no reader is told about it.
  ASSERT_EQ(::mkdir((root + "/.v2.tmp").c_str(), 0755), 0);
  std::ofstream(root + "/.v2.tmp/model.safetensors") << "partial";
  FilePublisher restarted({root, c});
  ASSERT_TRUE(restarted.Publish(3, p).ok());
  EXPECT_FALSE(Exists(root + "/.v2.tmp"));
  EXPECT_FALSE(Exists(root + "/v1"));
  EXPECT_TRUE(Exists(root + "/v3/config.json"));
  model::testing::RemoveTree(root);
}

TEST(FileTransportTest, BackgroundPublisherWritesTheParametersAsTheyWereWhenItReturned) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  model::ParameterSet p = RandomParameters(c, 1);
  BackgroundFilePublisher pub({root + "/weights", c});
  auto source = pub.Publish(1, p);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(*source, "file:" + root + "/weights/v1");
  for (const at::Tensor& b : p.buffers()) b.zero_();  // the next train step, while v1 is written
  ASSERT_TRUE(pub.Wait().ok());
  const model::ParameterSet loaded = PoisonedParameters(c, at::kFloat);
  const Status read = OpenAndLoad(*source, loaded);
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(FirstDifference(RandomParameters(c, 1), loaded), "");
  // v2 replaces v1; a version that does not grow is refused at once.
  ASSERT_TRUE(pub.Publish(2, p).ok());
  const auto again = pub.Publish(2, p);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  EXPECT_NE(again.status().message().find("versions must grow"), std::string::npos) << again.status().ToString();
  ASSERT_TRUE(pub.Wait().ok());
  EXPECT_TRUE(Exists(root + "/weights/v2/config.json"));
  EXPECT_FALSE(Exists(root + "/weights/v1"));
  model::testing::RemoveTree(root);
}

// A directory that cannot be made fails Publish at once; a write that
// fails on the writer thread (RLIMIT_FSIZE: EFBIG, the path of a full disk)
// comes back from Wait and from every later Publish.
TEST(FileTransportTest, BackgroundPublisherReportsAWriteThatFailed) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 1);
  std::ofstream(root + "/file") << "not a directory";
  BackgroundFilePublisher bad({root + "/file/weights", c});
  const auto refused = bad.Publish(1, p);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("mkdir " + root + "/file/weights"), std::string::npos)
      << refused.status().ToString();

  BackgroundFilePublisher pub({root + "/weights", c});
  ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const rlimit small{1024, before.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const auto queued = pub.Publish(1, p);
  const Status failed = pub.Wait();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  ASSERT_TRUE(queued.ok()) << "the write fails later, on its thread: " << queued.status().ToString();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("File too large"), std::string::npos) << failed.ToString();
  EXPECT_FALSE(Exists(root + "/weights/.v1.pending")) << "a reader sent v1 is not kept waiting";
  const auto next = pub.Publish(2, p);
  ASSERT_FALSE(next.ok()) << "the next SYNC fails with it";
  EXPECT_NE(next.status().message().find("the durable copy of an earlier version"), std::string::npos)
      << next.status().ToString();
  model::testing::RemoveTree(root);
}

// A disk slower than the steps: Publish does not wait for the write in
// flight. v1's write is held; v2 and then v3 queue behind it (v3 replaces
// v2, which is never written); a reader sent v3 meanwhile waits on its
// .pending marker and gets v3's parameters as they were when Publish(3)
// returned; in the end only v3 is there.
TEST(FileTransportTest, BackgroundPublisherQueuesTheLatestVersionBehindASlowWrite) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<int64_t> written;
  BackgroundFilePublisher pub({root + "/weights", c}, [&](int64_t version) {
    std::unique_lock<std::mutex> l(mu);
    written.push_back(version);
    cv.wait(l, [&] { return release; });
  });
  model::ParameterSet p = RandomParameters(c, 1);
  ASSERT_TRUE(pub.Publish(1, p).ok());
  p = RandomParameters(c, 2);
  ASSERT_TRUE(pub.Publish(2, p).ok()) << "queued behind v1's write";
  EXPECT_TRUE(Exists(root + "/weights/.v2.pending"));
  p = RandomParameters(c, 3);
  const auto v3 = pub.Publish(3, p);
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_FALSE(Exists(root + "/weights/.v2.pending")) << "v2 was replaced before its write began";
  EXPECT_TRUE(Exists(root + "/weights/.v3.pending"));
  for (const at::Tensor& b : p.buffers()) b.zero_();  // the next train step

  const model::ParameterSet loaded = PoisonedParameters(c, at::kFloat);
  Status read = Internal("not read");
  std::thread reader([&] { read = OpenAndLoad(*v3, loaded); });  // waits on the marker
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  reader.join();
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(FirstDifference(RandomParameters(c, 3), loaded), "");
  ASSERT_TRUE(pub.Wait().ok());
  EXPECT_EQ(written, (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(Exists(root + "/weights/v1"));
  EXPECT_FALSE(Exists(root + "/weights/v2"));
  EXPECT_FALSE(Exists(root + "/weights/.v3.pending"));
  EXPECT_TRUE(Exists(root + "/weights/v3/config.json"));
  model::testing::RemoveTree(root);
}

TEST(FileTransportTest, AReaderWaitsForAVersionBeingWrittenNotForOneThatIsNot) {
  const std::string root = MakeTempDir();
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 3);
  ASSERT_EQ(::mkdir((root + "/.v5.tmp").c_str(), 0755), 0);  // the publisher started v5
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    FilePublisher pub({root, c});
    EXPECT_TRUE(pub.Publish(5, p).ok());
  });
  const model::ParameterSet loaded = PoisonedParameters(c, at::kFloat);
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = OpenAndLoad("file:" + root + "/v5", loaded);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  publisher.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(waited, 0.5);
  EXPECT_EQ(FirstDifference(p, loaded), "");
  // v6: nobody is writing it. An error at once.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE(OpenAndLoad("file:" + root + "/v6", loaded).ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 5.0);
  model::testing::RemoveTree(root);
}

}  // namespace
}  // namespace tandem::weights::testing

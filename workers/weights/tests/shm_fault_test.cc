// The shm transport under faults, with real processes (issue #15 item 3):
// a writer killed with SIGKILL at a random point of Publish leaves nothing
// a reader accepts and the previous version loadable; a reader killed
// mid-load leaves the segment to the publisher, which still frees it; a
// publisher killed after publishing leaves a segment the job's end removes.
// Every process killed here is a child this test forked, killed by its pid.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "workers/weights/shm_segment.h"
#include "workers/weights/shm_transport.h"
#include "workers/weights/tests/transport_suite.h"

namespace tandem::weights::testing {
namespace {

using Clock = std::chrono::steady_clock;

// ~30 MiB of fp32 parameters (vocab 60000 x hidden 64, untied): a publish
// long enough to be killed in the middle of.
model::ModelConfig LargeConfig() {
  model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false, /*layers=*/1);
  c.vocab_size = 60000;
  return c;
}

std::string UniqueJob() {
  static std::mt19937_64 rng(std::random_device{}());
  return "faulttest" + std::to_string(::getpid()) + "x" + std::to_string(rng() % 1000000000);
}

// Forks a child that runs `body` after telling the parent it started (one
// byte on a pipe); returns its pid once that byte arrived. The child never
// returns into the test: it _exits with body's result.
pid_t ForkStarted(const std::function<int()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const char x = 'x';
    if (::write(fds[1], &x, 1) != 1) ::_exit(3);
    ::_exit(body());
  }
  ::close(fds[1]);
  char x = 0;
  const ssize_t n = pid > 0 ? ::read(fds[0], &x, 1) : -1;
  ::close(fds[0]);
  return n == 1 ? pid : -1;
}

// SIGKILLs our child `pid` and reaps it; true when the signal ended it
// (false: it had exited on its own first).
bool KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(status);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(ShmFaultTest, WriterKilledMidPublishLeavesThePreviousVersion) {
  const model::ModelConfig c = LargeConfig();
  const model::ParameterSet a = RandomParameters(c, 1), b = RandomParameters(c, 2);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat);
  const std::string job = UniqueJob();
  ShmPublisher parent({job, "actor", 0});
  const auto t0 = Clock::now();
  auto v1 = parent.Publish(1, a);
  const double publish_s = Seconds(Clock::now() - t0);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();

  std::mt19937_64 rng(std::random_device{}());
  std::string good = *v1;                  // the version a reader must still get
  const model::ParameterSet* good_params = &a;
  int partial = 0, whole = 0, iterations = 0;
  double scale = 1.0;  // halved after each kill that came too late: a loaded machine's child may publish faster
  for (; iterations < 16 && !(iterations >= 4 && partial >= 2); ++iterations) {
    const int64_t version = 10 + iterations;
    const pid_t pid = ForkStarted([&]() -> int {
      ShmPublisher child({job, "actor", 0});  // the same task's publisher, restarted
      (void)child.Publish(version, b);
      // Then it lives until the SIGKILL: returning would run the
      // publisher's destructor, which removes every segment of the task
      // (v1 and this version too) -- a clean exit, not the fault tested.
      for (;;) ::pause();
    });
    ASSERT_GT(pid, 0);
    const double delay = scale * publish_s * std::uniform_real_distribution<double>(0.05, 0.9)(rng);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    KillAndReap(pid);

    const std::string source = "shm:" + SegmentPrefix(job, "actor") + std::to_string(version);
    auto opened = OpenWeightSource(source);
    if (opened.ok()) {  // the kill came after the seal: the version is whole
      ASSERT_TRUE((*opened)->LoadParameters(reader).ok());
      EXPECT_EQ(FirstDifference(b, reader), "") << "a sealed version is whole";
      good = source, good_params = &b;
      ++whole;
      scale *= 0.5;
      continue;
    }
    const Status& st = opened.status();
    if (st.code() == StatusCode::kFailedPrecondition) {
      ++partial;
      EXPECT_NE(st.message().find("died mid-publish"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(source.substr(4)), std::string::npos) << st.message();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << "killed before it created the segment: " << st.ToString();
    }
    const Status load = OpenAndLoad(good, reader);
    ASSERT_TRUE(load.ok()) << "the previous version " << good << ": " << load.ToString();
    EXPECT_EQ(FirstDifference(*good_params, reader), "");
  }
  EXPECT_GE(partial, 1) << "no kill landed mid-publish in " << iterations << " tries (publish takes " << publish_s
                        << " s; " << whole << " completed)";
  // The next publish removes every leftover of the dead writers.
  ASSERT_TRUE(parent.Publish(100, a).ok());
  EXPECT_EQ(ListSegments(SegmentPrefix(job, "actor")), std::vector<std::string>{SegmentPrefix(job, "actor") + "100"});
  std::cout << "[weights] writer kills: " << partial << " mid-publish, " << whole << " after the seal, of "
            << iterations << " (publish " << publish_s << " s)\n";
}

TEST(ShmFaultTest, ReaderKilledMidLoadLeavesTheSegmentToThePublisher) {
  const model::ModelConfig c = LargeConfig();
  const model::ParameterSet a = RandomParameters(c, 3);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat);
  const std::string job = UniqueJob();
  auto pub = std::make_unique<ShmPublisher>(ShmOptions{job, "actor", 1});
  int64_t version = 1;
  auto source = pub->Publish(version, a);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const auto t0 = Clock::now();
  ASSERT_TRUE(OpenAndLoad(*source, reader).ok());  // no ack: timing only
  const double load_s = Seconds(Clock::now() - t0);

  std::mt19937_64 rng(std::random_device{}());
  int killed = 0;
  for (int i = 0; i < 6 && killed < 2; ++i) {
    const pid_t pid = ForkStarted([&] {
      auto from = OpenWeightSource(*source);
      if (!from.ok() || !(*from)->LoadParameters(reader).ok()) return 1;
      return (*from)->Acknowledge().ok() ? 0 : 1;
    });
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::duration<double>(load_s * std::uniform_real_distribution<double>(0.0, 0.8)(rng)));
    const bool signalled = KillAndReap(pid);
    // The segment is gone once its one expected reader acknowledged: the
    // reader finished, or the kill landed between its ack and its exit.
    if (pub->ExportedBytes() == 0) {
      source = pub->Publish(++version, a);
      ASSERT_TRUE(source.ok());
      continue;
    }
    EXPECT_TRUE(signalled) << "a reader that exited on its own acknowledged, freeing the segment";
    ++killed;
    const model::ParameterSet fresh = PoisonedParameters(c, at::kFloat);
    ASSERT_TRUE(OpenAndLoad(*source, fresh).ok()) << "a new reader loads after a reader died";
    EXPECT_EQ(FirstDifference(a, fresh), "");
  }
  EXPECT_GE(killed, 1) << "no kill landed mid-load (load takes " << load_s << " s)";
  const std::string name = source->substr(4);
  pub.reset();  // the job's publisher goes: what no reader acknowledged is freed
  EXPECT_EQ(SegmentSize(name).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ListSegments(SegmentPrefix(job, "actor")).empty());
  // And a new publisher and reader work as before.
  ShmPublisher again({job, "actor", 1});
  auto v = again.Publish(1, a);
  ASSERT_TRUE(v.ok());
  const model::ParameterSet fresh = PoisonedParameters(c, at::kFloat);
  ASSERT_TRUE(OpenAndLoad(*v, fresh).ok());
  EXPECT_EQ(FirstDifference(a, fresh), "");
}

TEST(ShmFaultTest, KilledPublishersSegmentIsRemovedWhenTheJobEnds) {
  const model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false, /*layers=*/1);
  const model::ParameterSet a = RandomParameters(c, 4);
  const std::string job = UniqueJob();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ShmPublisher pub({job, "actor", 1});
    auto s = pub.Publish(1, a);
    const char x = s.ok() ? 'y' : 'n';
    if (::write(fds[1], &x, 1) != 1) ::_exit(3);
    ::pause();  // until killed: no destructor runs
    ::_exit(0);
  }
  ASSERT_GT(pid, 0);
  ::close(fds[1]);
  char x = 0;
  ASSERT_EQ(::read(fds[0], &x, 1), 1);
  ::close(fds[0]);
  EXPECT_EQ(x, 'y');
  EXPECT_TRUE(KillAndReap(pid));
  const std::string source = "shm:" + SegmentPrefix(job, "actor") + "1";
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat);
  ASSERT_TRUE(OpenAndLoad(source, reader).ok()) << "a sealed version outlives its publisher's process";
  EXPECT_EQ(FirstDifference(a, reader), "");
  EXPECT_EQ(RemoveSegments(JobSegmentPrefix(job)), 1u);  // the job ends
  EXPECT_EQ(OpenWeightSource(source).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::weights::testing

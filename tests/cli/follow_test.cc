// `tandem logs -f` and `tandem events -f` with stdout on a pipe, as a user
// who pipes them into grep: each line reaches the reader while the job still
// runs (not in 16 KiB batches or at the job's end); `tandem logs` without
// --task on a job of several tasks and `tandem events` with several targets
// (a glob that matched several run dirs) answer for people. Real tandemd,
// real tandem, real tasks (docs/cli.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cli/cli_process.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class Follow : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = MakeTempDir("cli-follow");
    daemon_ = std::make_unique<DaemonProcess>(tmp_ / "state", std::vector<std::string>{"--gpus", "none"});
    daemon_->Start();
    socket_ = (tmp_ / "state" / "tandemd.sock").string();
  }
  void TearDown() override {
    daemon_.reset();
    fs::remove_all(tmp_);
  }
  fs::path tmp_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string socket_;
};

// The task prints a line, then is quiet for kQuietS seconds before its last
// line (and its end); the first line must reach the reader well before.
constexpr int kQuietS = 6;

TEST_F(Follow, LogsFollowHandsEachLineToAPipeWhileTheTaskRuns) {
  const std::string id = daemon_->Submit(
      BashJob("logs", "echo first; sleep " + std::to_string(kQuietS) + "; echo second"));
  ASSERT_FALSE(id.empty());
  const auto start = Clock::now();
  PipedCommand logs("tandem", {"--socket", socket_, "logs", id, "-f"}, tmp_ / "logs.err");
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs.ReadLine().value_or("(end)"), "first");
  const auto first_at = Clock::now() - start;
  EXPECT_LT(first_at, std::chrono::seconds(kQuietS - 2)) << "the first line waited for the task's end";
  EXPECT_EQ(daemon_->JobState(id), "running") << "the first line came after the job ended";
  EXPECT_EQ(logs.ReadLine().value_or("(end)"), "second");
  EXPECT_EQ(logs.ReadLine(), std::nullopt);
  EXPECT_EQ(logs.Close(), 0) << ReadFile(tmp_ / "logs.err");
}

TEST_F(Follow, EventsFollowHandsEachEventToAPipeWhileTheJobRuns) {
  const std::string id = daemon_->Submit(BashJob("events", "sleep " + std::to_string(kQuietS)));
  ASSERT_FALSE(id.empty());
  const auto start = Clock::now();
  PipedCommand events("tandem", {"--socket", socket_, "events", id, "-f"}, tmp_ / "events.err");
  ASSERT_TRUE(events.ok());
  const std::string first = events.ReadLine().value_or("(end)");
  EXPECT_THAT(first, HasSubstr("job submitted"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(kQuietS - 2)) << "the first event waited for the job's end";
  EXPECT_EQ(daemon_->JobState(id), "running");
  std::string last;
  while (auto line = events.ReadLine()) last = *line;
  EXPECT_THAT(last, HasSubstr("job succeeded"));
  EXPECT_EQ(events.Close(), 0) << ReadFile(tmp_ / "events.err");
}

TEST_F(Follow, LogsWithoutTaskOnAJobOfSeveralTasksNamesThem) {
  const std::string id = daemon_->Submit(BashJob("two", "echo hi", 2));
  ASSERT_FALSE(id.empty());
  daemon_->WaitJob(id);
  CliRun r = RunBinary(tmp_, "tandem", {"--socket", socket_, "logs", id});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "") << "the API's error body went to stdout";
  EXPECT_THAT(r.err, HasSubstr("tandem logs: job " + id + " has several tasks; name one with --task (main.0, main.1)"));

  CliRun wrong = RunBinary(tmp_, "tandem", {"--socket", socket_, "logs", id, "--task", "main.7"});
  EXPECT_EQ(wrong.rc, 5);
  EXPECT_EQ(wrong.out, "");
  EXPECT_THAT(wrong.err, HasSubstr("has no task main.7; its tasks: main.0, main.1"));

  CliRun one = RunBinary(tmp_, "tandem", {"--socket", socket_, "logs", id, "--task", "main.1"});
  EXPECT_EQ(one.rc, 0) << one.err;
  EXPECT_EQ(one.out, "hi\n");
}

TEST_F(Follow, SeveralTargetsAreRefusedWithWhatTheyWere) {
  fs::create_directories(tmp_ / "runs" / "a");
  fs::create_directories(tmp_ / "runs" / "b");
  for (const std::string cmd : {"events", "residency", "timeline"}) {
    SCOPED_TRACE(cmd);
    CliRun r = RunBinary(tmp_, "tandem", {cmd, (tmp_ / "runs/a").string(), (tmp_ / "runs/b").string()});
    EXPECT_EQ(r.rc, 2);
    EXPECT_THAT(r.err, HasSubstr("tandem " + cmd + ": expected one JOB or RUN_DIR, got 2:"));
    EXPECT_THAT(r.err, HasSubstr("a glob that matched several run dirs?"));
  }
}

}  // namespace
}  // namespace tandem::testing

// Test-only fault injection (fault_injection.h): the point list tandemd
// reads from TANDEM_TEST_FAULTS, a crash point killing its own process, and
// the wrapping executor around a real local executor (faults at Start,
// everything else forwarded; unarmed, it changes nothing).
#include "backends/fault_injection.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "backends/local/tests/local_test_util.h"

namespace tandem::backends::testing {
namespace {

TEST(FaultPoints, ParsesAListOfPoints) {
  auto f = FaultPoints::Parse("slurm.after_submit, local.start.unavailable");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->Armed("slurm.after_submit"));
  EXPECT_TRUE((*f)->Armed("local.start.unavailable"));
  EXPECT_FALSE((*f)->Armed("slurm.after_step_start"));
  for (const char* bad : {"", "a,,b", "a,", "Slurm.x", "a;b", "a\nb"})
    EXPECT_FALSE(FaultPoints::Parse(bad).ok()) << bad;
}

TEST(FaultPointsDeathTest, AnArmedCrashPointKillsItsProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto f = FaultPoints::Parse("x.y");
  ASSERT_TRUE(f.ok());
  (*f)->CrashIfArmed("x.z", "not armed: nothing happens");
  EXPECT_EXIT((*f)->CrashIfArmed("x.y", "after something"), ::testing::KilledBySignal(SIGKILL), "");
}

class FaultInjectingExecutorTest : public ExecutorTestBase, public ::testing::Test {
 protected:
  void SetUp() override { Init(LocalHarness()); }
};

TEST_F(FaultInjectingExecutorTest, StartUnavailableStartsNothingAndOtherCallsPassThrough) {
  auto armed = FaultPoints::Parse("local.start.unavailable");
  ASSERT_TRUE(armed.ok());
  FaultInjectingExecutor faulty(*exec_, *armed);
  EXPECT_EQ(faulty.kind(), "local");
  auto r = Request("refused", {"sh", "-c", "echo ran"});
  auto ref = faulty.Start(r);
  ASSERT_FALSE(ref.ok());
  EXPECT_TRUE(IsRetryableStart(ref.status())) << ref.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(r.stdout_path)) << "nothing was started";

  auto none = FaultPoints::Parse("slurm.after_submit");
  ASSERT_TRUE(none.ok());
  FaultInjectingExecutor clean(*exec_, *none);
  auto r2 = Request("runs", {"sleep", "30"});
  auto ref2 = clean.Start(r2);
  ASSERT_TRUE(ref2.ok()) << ref2.status().ToString();
  EXPECT_TRUE(clean.Alive(*ref2));
  ASSERT_TRUE(clean.Signal(*ref2, SIGTERM).ok());
  auto x = WaitExit(r2.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGTERM);
  EXPECT_FALSE(clean.Alive(*ref2));
  EXPECT_TRUE(clean.Kill(*ref2).ok());
}

}  // namespace
}  // namespace tandem::backends::testing

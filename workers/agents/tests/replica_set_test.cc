// Replica choice (replica_set.h): the fewest outstanding calls, a session
// kept on its replica, replicas a call already tried left out, a replica
// down until down_for passed and then read again from its port file (a
// restarted replica's new port), a port file of another job waited past.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "workers/agents/replica_set.h"
#include "workers/roles/port_file.h"

namespace tandem::agents {
namespace {

class ReplicaSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-replicas-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    unsetenv("TANDEM_JOB_ID");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(int i) const { return dir_ + "/rollout." + std::to_string(i) + ".port"; }
  std::string dir_;
};

TEST_F(ReplicaSetTest, FewestOutstandingStickySessionsAndTried) {
  ASSERT_TRUE(roles::WritePortFile(File(0), 1000).ok());
  ASSERT_TRUE(roles::WritePortFile(File(1), 1001).ok());
  ReplicaOptions o;
  o.port_files = {File(0), File(1)};
  ReplicaSet set(o);
  const std::vector<bool> none(2, false);
  ASSERT_EQ(set.Pick("", none), 0u);
  set.Begin(0);
  EXPECT_EQ(set.Pick("", none), 1u);
  set.Begin(1);
  set.Begin(1);
  EXPECT_EQ(set.Pick("", none), 0u);
  // A session stays on the replica it was first given, however busy.
  EXPECT_EQ(set.Pick("s", none), 0u);
  set.Begin(0);
  set.Begin(0);
  EXPECT_EQ(set.Pick("s", none), 0u);
  EXPECT_EQ(set.Pick("t", none), 1u);
  // ...unless the call already tried it: then the other, and the session moves.
  EXPECT_EQ(set.Pick("s", {true, false}), 1u);
  EXPECT_EQ(set.Pick("s", none), 1u);
  EXPECT_FALSE(set.Pick("s", {true, true}).has_value());
  set.ForgetSession("s");
  EXPECT_EQ(set.port(1), 1001);
}

TEST_F(ReplicaSetTest, ADownReplicaIsReadAgainFromItsPortFile) {
  ASSERT_TRUE(roles::WritePortFile(File(0), 2000).ok());
  ReplicaOptions o;
  o.port_files = {File(0), File(1)};  // replica 1 has not written its file yet
  o.down_for = std::chrono::milliseconds(200);
  ReplicaSet set(o);
  const std::vector<bool> none(2, false);
  EXPECT_TRUE(set.up(0));
  EXPECT_FALSE(set.up(1));
  set.Begin(0);
  set.Done(0, /*replica_failed=*/true);
  EXPECT_FALSE(set.up(0));
  EXPECT_FALSE(set.Pick("", none).has_value()) << "0 down, 1 not started";
  // Replica 0 restarted on another port; replica 1 started.
  ASSERT_TRUE(roles::WritePortFile(File(0), 2001).ok());
  ASSERT_TRUE(roles::WritePortFile(File(1), 2002).ok());
  EXPECT_FALSE(set.Pick("", none).has_value()) << "not before down_for";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(set.Pick("", none).has_value());
  EXPECT_EQ(set.port(0), 2001);
  EXPECT_EQ(set.port(1), 2002);
  EXPECT_EQ(set.outstanding(0), 0);
}

TEST_F(ReplicaSetTest, APortFileOfAnotherJobIsWaitedPast) {
  setenv("TANDEM_JOB_ID", "old-job", 1);
  ASSERT_TRUE(roles::WritePortFile(File(0), 3000).ok());
  unsetenv("TANDEM_JOB_ID");
  ReplicaOptions o;
  o.port_files = {File(0)};
  o.job = "this-job";
  o.down_for = std::chrono::milliseconds(0);
  ReplicaSet set(o);
  EXPECT_FALSE(set.Pick("", {false}).has_value());
  setenv("TANDEM_JOB_ID", "this-job", 1);
  ASSERT_TRUE(roles::WritePortFile(File(0), 3001).ok());
  unsetenv("TANDEM_JOB_ID");
  EXPECT_EQ(set.Pick("", {false}), 0u);
  EXPECT_EQ(set.port(0), 3001);
}

}  // namespace
}  // namespace tandem::agents

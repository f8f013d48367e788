// No process outlives its task, end to end through tandemd (issue #12 point
// 2; docs/processes.md): /healthz says how the daemon contains processes,
// and the escapes seen on the marker scan (a SIGTERM-ignoring child of a
// cancelled task whose parent died of the SIGTERM, `sleep 600 &` after exit
// 0, the background children of each failed launch of an on-failure task,
// the command of a kill -9'd shim running beside its relaunch) leave nothing
// running. Skipped where the daemon runs in marker mode (no writable cgroup2).
#include <signal.h>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

class DaemonContainmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-contain");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--grace", "0.5"});
    d_->Start();
    auto r = d_->client().Request("GET", "/healthz");
    ASSERT_TRUE(r.ok());
    health_ = r->Json();
    if (health_["process_containment"].value("mode", "") != "cgroup")
      GTEST_SKIP() << "marker mode: " << health_.dump();
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Pids the task scripts appended to `file`, one a line.
  std::vector<pid_t> Pids(const fs::path& file) {
    std::vector<pid_t> out;
    std::istringstream in(ReadFile(file));
    for (long p; in >> p;) out.push_back(static_cast<pid_t>(p));
    return out;
  }
  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
  json health_;
};

TEST_F(DaemonContainmentTest, HealthzShowsTheCgroupSubtree) {
  const auto& c = health_["process_containment"];
  EXPECT_EQ(c.value("mode", ""), "cgroup");
  EXPECT_NE(c.value("cgroup", "").find("/tandemd-"), std::string::npos) << c.dump();
  EXPECT_TRUE(fs::exists(c.value("cgroup", ""))) << c.dump();
  EXPECT_FALSE(c.value("kill", "").empty());
}

TEST_F(DaemonContainmentTest, CancelLeavesNoChildThatIgnoredSigterm) {
  const fs::path pids = dir_ / "pids";
  // The child ignores SIGTERM; its parent (bash, waiting) dies of it.
  const std::string script = "(trap '' TERM; exec sleep 300) & echo $! >> " + pids.string() + "; wait";
  const std::string id = d_->Submit(BashJob("stubborn", script));
  ASSERT_TRUE(WaitFor([&] { return Pids(pids).size() == 1; }));
  const pid_t child = Pids(pids)[0];
  auto r = d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(d_->WaitJob(id, std::chrono::seconds(30)), "cancelled");
  EXPECT_FALSE(ProcessAlive(child)) << "child " << child << " survived the cancel";
}

TEST_F(DaemonContainmentTest, ASucceededTaskLeavesNoBackgroundChild) {
  const fs::path pids = dir_ / "pids";
  const std::string id = d_->Submit(BashJob("bg", "sleep 600 & echo $! >> " + pids.string() + "; exit 0"));
  ASSERT_EQ(d_->WaitJob(id), "succeeded");
  ASSERT_EQ(Pids(pids).size(), 1u);
  EXPECT_FALSE(ProcessAlive(Pids(pids)[0])) << "sleep 600 & outlived its succeeded task";
}

TEST_F(DaemonContainmentTest, EachFailedLaunchUnderOnFailureLeavesNoBackgroundChild) {
  const fs::path pids = dir_ / "pids";
  json spec = BashJob("flaky", "sleep 600 & echo $! >> " + pids.string() + "; exit 1", 1,
                      {{"restart", {{"policy", "on-failure"}, {"max_restarts", 2}, {"backoff_s", 0.05}}}});
  const std::string id = d_->Submit(spec);
  ASSERT_EQ(d_->WaitJob(id), "failed");
  ASSERT_EQ(Pids(pids).size(), 3u) << "three launches";
  for (pid_t p : Pids(pids)) EXPECT_FALSE(ProcessAlive(p)) << "background child " << p << " of a failed launch";
}

TEST_F(DaemonContainmentTest, KillNineOfTheShimStopsTheOldCommandBeforeTheRelaunch) {
  const fs::path pids = dir_ / "pids";
  // Each launch appends "<shim pid> <command pid>"; the first launch sleeps.
  const std::string script = "echo $PPID $$ >> " + pids.string() + "; [ $(wc -l < " + pids.string() +
                             ") -ge 2 ] && exit 0; exec sleep 600";
  json spec = BashJob("shim9", script, 1,
                      {{"restart", {{"policy", "on-failure"}, {"max_restarts", 1}, {"backoff_s", 0.05}}}});
  const std::string id = d_->Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return Pids(pids).size() == 2; }));
  const pid_t shim = Pids(pids)[0], command = Pids(pids)[1];
  ASSERT_EQ(::kill(shim, SIGKILL), 0);
  ASSERT_EQ(d_->WaitJob(id), "succeeded") << d_->Job(id).dump(2);
  EXPECT_EQ(Pids(pids).size(), 4u) << "relaunched once";
  EXPECT_FALSE(ProcessAlive(command)) << "the old command " << command << " runs beside its relaunch";
}

}  // namespace
}  // namespace tandem::testing

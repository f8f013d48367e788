// Redis jobs wait for capacity instead of failing (issue #6 follow-up;
// docs/redis.md "Placement", "Waiting for capacity"). Real tandemd with
// `--redis`, real agents in network namespaces (netns_cluster.h):
//   - a job submitted while no agent is registered stays pending, saying
//     why; it stays pending across a kill -9 of tandemd (journal replay) and
//     runs once an agent registers;
//   - a job needing GPUs another job holds waits while that job runs, then
//     runs; a later job that would fit on the free GPU queues behind it
//     (head of line) instead of jumping ahead, and cancelling it while it
//     waits starts nothing;
//   - a task whose node's lease lapsed and whose restart policy restarts it
//     waits for a node when none has room, and the job carries on once one
//     registers.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon/daemon_process.h"
#include "tests/multihost/netns_test.h"

namespace tandem::multihost {
namespace {

using json = nlohmann::json;
using testing::DaemonProcess;
using testing::WaitFor;

class CapacityWaitTest : public NetnsTest {
 protected:
  CapacityWaitTest() : NetnsTest("tandem-wait") {}

  void Up(const std::string& gpus) {
    auto st = cluster_->Up(1, 1.0, {{"--gpus", gpus}});
    ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << cluster_->AllAgentLogs();
  }
  void StartDaemon() {
    daemon_ = std::make_unique<DaemonProcess>(dir_ / "state", cluster_->DaemonFlags());
    daemon_->Start();
  }
  Host& Node() { return cluster_->hosts().front(); }

  // A job of one task (role `role`) on `gpus` GPUs that records each launch in
  // <dir>/<role>.launches, then waits for <dir>/<role>.go and exits 0.
  json WaitingJob(const std::string& role, int gpus, json extra = json::object()) {
    const std::string d = dir_.string();
    json r = {{"command", {"bash", "-c", "echo $$ >> " + d + "/" + role + ".launches; while [ ! -e " + d + "/" +
                                            role + ".go ]; do sleep 0.05; done"}},
              {"gpus_per_replica", gpus}};
    r.update(extra);
    return {{"name", role}, {"backend", {{"kind", "redis"}}}, {"devices", {{"count", gpus}}}, {"roles", {{role, r}}}};
  }
  void Go(const std::string& role) { std::ofstream(dir_ / (role + ".go")) << "go"; }
  size_t Launches(const std::string& role) {
    std::ifstream in(dir_ / (role + ".launches"));
    size_t n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  }
  std::string Detail(const std::string& id) {
    json j = daemon_->Job(id);
    return j.is_object() ? j.value("detail", "") : "";
  }
  // The job is in `state` and its detail contains `text`.
  bool Shows(const std::string& id, const std::string& state, const std::string& text) {
    json j = daemon_->Job(id);
    return j.is_object() && j.value("state", "") == state && j.value("detail", "").find(text) != std::string::npos;
  }
};

TEST_F(CapacityWaitTest, JobWaitsForAnAgentAcrossADaemonRestart) {
  Up("0");
  Node().agent->Stop();  // SIGTERM: the agent removes its registration
  ASSERT_TRUE(WaitFor([&] { return cluster_->LiveNodes() == 0; }, std::chrono::seconds(5)));
  StartDaemon();
  const std::string id = daemon_->Submit(WaitingJob("early", 1));
  ASSERT_TRUE(WaitFor([&] { return Shows(id, "pending", "waiting for capacity"); }, std::chrono::seconds(10)))
      << daemon_->Job(id).dump(2);
  EXPECT_NE(Detail(id).find("no node holds a live lease"), std::string::npos) << Detail(id);
  // Still waiting after a few retries, not failed.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(daemon_->JobState(id), "pending") << daemon_->Job(id).dump(2);
  EXPECT_EQ(Launches("early"), 0u);

  // The waiting job survives a kill -9 of the daemon (journal replay).
  daemon_->Kill9();
  StartDaemon();
  ASSERT_TRUE(WaitFor([&] { return Shows(id, "pending", "waiting for capacity"); }, std::chrono::seconds(10)))
      << daemon_->Job(id).dump(2);

  // An agent registers: the job starts within the retry period, and succeeds.
  ASSERT_TRUE(cluster_->StartAgent(Node()).ok());
  ASSERT_TRUE(WaitFor([&] { return daemon_->JobState(id) == "running" && Launches("early") == 1; },
                      std::chrono::seconds(15)))
      << daemon_->Job(id).dump(2) << cluster_->AllAgentLogs();
  EXPECT_EQ(Detail(id), "");
  Go("early");
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  EXPECT_EQ(Launches("early"), 1u);
}

TEST_F(CapacityWaitTest, JobsQueueForGpusInOrderAndAWaitingJobCanBeCancelled) {
  Up("0,1");
  StartDaemon();
  const std::string one = daemon_->Submit(WaitingJob("one", 1));
  ASSERT_TRUE(WaitFor([&] { return daemon_->JobState(one) == "running" && Launches("one") == 1; }))
      << daemon_->Job(one).dump(2);
  // Two needs both GPUs of the node: it waits, naming what the node has free.
  const std::string two = daemon_->Submit(WaitingJob("two", 2));
  ASSERT_TRUE(WaitFor([&] { return Shows(two, "pending", "waiting for capacity"); }, std::chrono::seconds(10)))
      << daemon_->Job(two).dump(2);
  EXPECT_NE(Detail(two).find("h1 1/2"), std::string::npos) << Detail(two);
  // Three would fit on the free GPU, but queues behind two (head of line).
  const std::string three = daemon_->Submit(WaitingJob("three", 1));
  ASSERT_TRUE(WaitFor([&] { return Shows(three, "pending", "queued behind job " + two); }, std::chrono::seconds(10)))
      << daemon_->Job(three).dump(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a few retries
  EXPECT_EQ(daemon_->JobState(two), "pending");
  EXPECT_EQ(daemon_->JobState(three), "pending");
  EXPECT_EQ(Launches("two") + Launches("three"), 0u);

  // Cancelling a waiting job: cancelled at once, nothing was started.
  auto c = daemon_->client().Request("POST", "/v1/jobs/" + three + "/cancel");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->status, 202) << c->body;
  EXPECT_EQ(daemon_->WaitJob(three, std::chrono::seconds(10)), "cancelled") << daemon_->Job(three).dump(2);

  // One ends: two gets both GPUs and runs.
  Go("one");
  EXPECT_EQ(daemon_->WaitJob(one), "succeeded") << daemon_->Job(one).dump(2);
  ASSERT_TRUE(WaitFor([&] { return daemon_->JobState(two) == "running" && Launches("two") == 1; },
                      std::chrono::seconds(10)))
      << daemon_->Job(two).dump(2);
  Go("two");
  EXPECT_EQ(daemon_->WaitJob(two), "succeeded") << daemon_->Job(two).dump(2);
  EXPECT_EQ(Launches("three"), 0u) << "a cancelled waiting job started a task";
}

TEST_F(CapacityWaitTest, LostTaskWaitsForANodeToRestartOn) {
  Up("0");
  StartDaemon();
  const std::string id = daemon_->Submit(
      WaitingJob("svc", 1, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 2}, {"backoff_s", 0.1}}}}));
  ASSERT_TRUE(WaitFor([&] { return daemon_->JobState(id) == "running" && Launches("svc") == 1; }))
      << daemon_->Job(id).dump(2);
  // The only node dies: its task is lost after the lease, and the restart waits.
  Node().agent->Signal(SIGKILL);
  ASSERT_TRUE(Node().agent->Reap(std::chrono::seconds(5)));
  ASSERT_TRUE(WaitFor([&] { return Shows(id, "running", "waiting for capacity"); }, std::chrono::seconds(15)))
      << daemon_->Job(id).dump(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  EXPECT_EQ(daemon_->JobState(id), "running") << daemon_->Job(id).dump(2);
  EXPECT_EQ(Launches("svc"), 1u);
  // The node comes back: the task restarts there and the job succeeds.
  ASSERT_TRUE(cluster_->StartAgent(Node()).ok());
  ASSERT_TRUE(WaitFor([&] { return Launches("svc") == 2; }, std::chrono::seconds(15)))
      << daemon_->Job(id).dump(2) << cluster_->AllAgentLogs();
  Go("svc");
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  EXPECT_EQ(Detail(id), "");
}

}  // namespace
}  // namespace tandem::multihost

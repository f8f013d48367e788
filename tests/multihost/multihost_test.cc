// A three-node tandem cluster on one machine (issue #6 "Done when"): three
// network namespaces, each with its own address and `tandem-agent`, Redis
// and tandemd in the root namespace (netns_cluster.h). Jobs go through a
// real tandemd with `--redis`; the tests cover placement across nodes with
// colocation, `tandem logs` of a task on an agent, kill -9 of an agent (its
// tasks are killed, reported lost after the lease and restarted elsewhere),
// cutting a host off the network (the agent fences its tasks), restarting
// Redis mid-job and kill -9 of tandemd (nothing lost, nothing started twice),
// and a wrong Redis password (refused with a clear message); each node's own
// --gpus mapping (colocated roles share physical ids, replicas get disjoint
// ones, a node with too few GPUs gets nothing), and `tandem logs` served by
// an agent whose run directory the daemon cannot read.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <sstream>

#include "tests/daemon/daemon_process.h"
#include "tests/multihost/netns_test.h"

namespace tandem::multihost {
namespace {

using json = nlohmann::json;
using testing::DaemonProcess;
using testing::WaitFor;

class MultiHostTest : public NetnsTest {
 protected:
  MultiHostTest() : NetnsTest("tandem-mh") {}

  void Up(double lease_s, int hosts = 3, const std::vector<std::vector<std::string>>& agent_flags = {}) {
    auto st = cluster_->Up(hosts, lease_s, agent_flags);
    ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << cluster_->AllAgentLogs();
    StartDaemon();
  }
  void StartDaemon() {
    auto flags = cluster_->DaemonFlags();
    flags.insert(flags.end(), {"--gpus", "0,1,2"});
    daemon_ = std::make_unique<DaemonProcess>(dir_ / "state", flags);
    daemon_->Start();
  }

  json Task(const std::string& job, const std::string& name) {
    json j = daemon_->Job(job);
    if (j.is_object())
      for (const auto& t : j["tasks"])
        if (t.value("name", "") == name) return t;
    return json::object();
  }
  std::string NodeOf(const json& task) {
    return task.contains("ref") && task["ref"].is_object() && task["ref"]["data"].is_object()
               ? task["ref"]["data"].value("node", "")
               : "";
  }
  bool AllRunning(const std::string& job, int n) {
    json j = daemon_->Job(job);
    int running = 0;
    if (j.is_object())
      for (const auto& t : j["tasks"]) running += t.value("state", "") == "running";
    return running == n;
  }
  // Lines of a file the tasks append to (one per launch).
  static std::vector<std::string> Lines(const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  // A task script: record "<node address> <pid>" in <dir>/<task>.launches,
  // then wait for <dir>/go (or `seconds`), then exit 0.
  std::string Recorder(const std::string& wait = "go") {
    const std::string d = dir_.string();
    return "export PATH=$PATH:/usr/sbin:/sbin; echo \"$(ip -4 -o addr show | grep -o '10\\.[0-9]*\\.[0-9]*\\.2' | head -1) $$\" >> " + d +
           "/$TANDEM_ROLE.$TANDEM_RANK.launches; echo started on $(ip -4 -o addr show | grep -o '10\\.[0-9]*\\.[0-9]*\\.2' "
           "| head -1); while [ ! -e " + d + "/" + wait + " ]; do sleep 0.05; done; echo done";
  }
  json RecorderJob(const std::string& name, int replicas, json extra = json::object()) {
    json role = {{"command", {"bash", "-c", Recorder()}}, {"replicas", replicas}};
    role.update(extra);
    return {{"name", name}, {"backend", {{"kind", "redis"}}}, {"roles", {{"svc", role}}}};
  }
  void Go() { std::ofstream(dir_ / "go") << "go"; }
};

TEST_F(MultiHostTest, ColocatedJobRunsAcrossNodesAndLogsAreServed) {
  Up(2.0);
  // Three colocation groups (logical GPUs 0, 1, 2), each an actor and a rollout.
  // Each task also leaves a shm weight segment named as its publisher's would
  // be (docs/weights.md "The shm segment") and says where in <dir>/<task>.segment.
  const std::string segment =
      "id() { printf %s \"$1\" | tr -c 'A-Za-z0-9._' _; }; seg=/dev/shm/tandem-$(id \"$TANDEM_JOB_ID\")-$(id "
      "\"$TANDEM_TASK_ID\")-v1; echo x > $seg; echo $seg > " + dir_.string() + "/$TANDEM_ROLE.$TANDEM_RANK.segment; ";
  json role = {{"command", {"bash", "-c", segment + Recorder()}}, {"replicas", 3}, {"gpus_per_replica", 1}};
  json rollout = role;
  rollout["colocate_with"] = "actor";
  json spec = {{"name", "colocated"}, {"backend", {{"kind", "redis"}}}, {"devices", {{"count", 3}}},
               {"roles", {{"actor", role}, {"rollout", rollout}}}};
  const std::string id = daemon_->Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 6); })) << daemon_->Job(id).dump(2);
  std::set<std::string> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::string a = "actor." + std::to_string(i), r = "rollout." + std::to_string(i);
    // Colocated roles: the same node and the same devices.
    EXPECT_EQ(NodeOf(Task(id, a)), NodeOf(Task(id, r))) << daemon_->Job(id).dump(2);
    EXPECT_EQ(Task(id, a)["logical_devices"], Task(id, r)["logical_devices"]);
    nodes.insert(NodeOf(Task(id, a)));
    // The task ran in that node's namespace: its address is the node's.
    ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / (a + ".launches")).size() == 1; }));
    Host* h = cluster_->FindHost(NodeOf(Task(id, a)));
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(Lines(dir_ / (a + ".launches"))[0].rfind(h->ip + " ", 0), 0u) << Lines(dir_ / (a + ".launches"))[0];
  }
  EXPECT_EQ(nodes.size(), 3u) << "the three groups should spread over the three nodes";
  // `tandem logs` of a task that runs on an agent.
  Host* rollout_host = cluster_->FindHost(NodeOf(Task(id, "rollout.1")));
  ASSERT_NE(rollout_host, nullptr);
  std::string body;
  EXPECT_TRUE(WaitFor([&] {
    auto logs = daemon_->client().Request("GET", "/v1/jobs/" + id + "/logs?task=rollout.1");
    body = logs.ok() ? logs->body : logs.status().ToString();
    return body.find("started on " + rollout_host->ip) != std::string::npos;
  }, std::chrono::seconds(10))) << body;
  std::vector<std::string> segments;
  for (const char* t : {"actor.0", "actor.1", "actor.2", "rollout.0", "rollout.1", "rollout.2"}) {
    ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / (std::string(t) + ".segment")).size() == 1; })) << t;
    segments.push_back(Lines(dir_ / (std::string(t) + ".segment"))[0]);
    EXPECT_TRUE(fs::exists(segments.back())) << segments.back();
  }
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  for (const char* t : {"actor.0", "actor.1", "actor.2", "rollout.0", "rollout.1", "rollout.2"})
    EXPECT_EQ(Lines(dir_ / (std::string(t) + ".launches")).size(), 1u) << t;
  // Each agent's tandem-exec removed its task's segment when the task ended.
  for (const std::string& seg : segments) {
    EXPECT_FALSE(fs::exists(seg)) << seg << " outlived its task";
    fs::remove(seg);
  }
}

TEST_F(MultiHostTest, KilledAgentsTasksDieAndAreRestartedElsewhere) {
  Up(1.0);
  const std::string id = daemon_->Submit(RecorderJob(
      "agentkill", 2, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 2}, {"backoff_s", 0.1}}}}));
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 2); })) << daemon_->Job(id).dump(2);
  ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / "svc.0.launches").size() == 1; }));
  const std::string victim = NodeOf(Task(id, "svc.0"));
  Host* h = cluster_->FindHost(victim);
  ASSERT_NE(h, nullptr);
  const pid_t old_pid = std::atoi(Lines(dir_ / "svc.0.launches")[0].substr(Lines(dir_ / "svc.0.launches")[0].find(' ') + 1).c_str());
  ASSERT_GT(old_pid, 0);
  h->agent->Signal(SIGKILL);
  ASSERT_TRUE(h->agent->Reap(std::chrono::seconds(5)));
  // Lost after the lease, restarted on another node per the restart policy ...
  ASSERT_TRUE(WaitFor([&] {
    json t = Task(id, "svc.0");
    return t.value("restarts", 0) == 1 && t.value("state", "") == "running";
  }, std::chrono::seconds(15))) << daemon_->Job(id).dump(2);
  EXPECT_NE(NodeOf(Task(id, "svc.0")), victim);
  // ... and the old launch is dead (the dead agent's watchdog killed it).
  EXPECT_FALSE(PidRunning(old_pid)) << "the task of the killed agent still runs";
  ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / "svc.0.launches").size() == 2; }));
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
}

TEST_F(MultiHostTest, PartitionedHostFencesItsTasks) {
  Up(1.0);
  const std::string id = daemon_->Submit(RecorderJob(
      "partition", 1, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 2}, {"backoff_s", 0.1}}}}));
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 1); })) << daemon_->Job(id).dump(2);
  ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / "svc.0.launches").size() == 1; }));
  const std::string first = Lines(dir_ / "svc.0.launches")[0];
  const pid_t old_pid = std::atoi(first.substr(first.find(' ') + 1).c_str());
  Host* h = cluster_->FindHost(NodeOf(Task(id, "svc.0")));
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(cluster_->SetLink(*h, false).ok());
  const auto t0 = std::chrono::steady_clock::now();
  // The partitioned agent kills its task by itself once its lease lapses.
  EXPECT_TRUE(WaitFor([&] { return !PidRunning(old_pid); }, std::chrono::seconds(6)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_NE(cluster_->AgentLog(*h).find("fencing"), std::string::npos) << cluster_->AgentLog(*h);
  // The daemon restarts it on a node it can reach.
  ASSERT_TRUE(WaitFor([&] {
    json t = Task(id, "svc.0");
    return t.value("restarts", 0) == 1 && t.value("state", "") == "running";
  }, std::chrono::seconds(15))) << daemon_->Job(id).dump(2);
  EXPECT_NE(NodeOf(Task(id, "svc.0")), h->name);
  // Healing the partition: the agent registers again; its late report of the
  // fenced launch does not end the launch running elsewhere.
  ASSERT_TRUE(cluster_->SetLink(*h, true).ok());
  ASSERT_TRUE(WaitFor([&] { return cluster_->AgentLog(*h).find("lease regained") != std::string::npos; },
                      std::chrono::seconds(10))) << cluster_->AgentLog(*h);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Task(id, "svc.0").value("state", ""), "running") << daemon_->Job(id).dump(2);
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  EXPECT_EQ(Lines(dir_ / "svc.0.launches").size(), 2u);
}

TEST_F(MultiHostTest, RedisRestartMidJobLosesAndDuplicatesNothing) {
  Up(3.0);
  const std::string id = daemon_->Submit(RecorderJob("redisrestart", 3));
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 3); })) << daemon_->Job(id).dump(2);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(WaitFor([&] { return Lines(dir_ / ("svc." + std::to_string(i) + ".launches")).size() == 1; }));
  // Down for less than a lease: nothing fences; everyone reconnects with backoff.
  auto st = cluster_->RestartRedis(std::chrono::milliseconds(500));
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(cluster_->WaitNodes(3).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(AllRunning(id, 3)) << daemon_->Job(id).dump(2);
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  for (int i = 0; i < 3; ++i) {
    const std::string t = "svc." + std::to_string(i);
    EXPECT_EQ(Lines(dir_ / (t + ".launches")).size(), 1u) << t << " started twice";
    EXPECT_EQ(Task(id, t).value("restarts", -1), 0);
  }
  EXPECT_EQ(cluster_->AllAgentLogs().find("fencing"), std::string::npos) << cluster_->AllAgentLogs();
}

TEST_F(MultiHostTest, Kill9OfTheDaemonMidJobLosesAndDuplicatesNothing) {
  Up(2.0);
  json spec = RecorderJob("daemonkill", 2);
  spec["roles"]["quick"] = {{"command", {"bash", "-c", "sleep 2; echo quick"}}};
  const std::string id = daemon_->Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 3); })) << daemon_->Job(id).dump(2);
  const std::string node0 = NodeOf(Task(id, "svc.0"));
  daemon_->Kill9();
  // While the daemon is down the quick task ends on its agent.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  StartDaemon();
  ASSERT_TRUE(WaitFor([&] { return Task(id, "quick.0").value("state", "") == "succeeded"; }))
      << daemon_->Job(id).dump(2);
  EXPECT_EQ(Task(id, "svc.0").value("state", ""), "running") << daemon_->Job(id).dump(2);
  EXPECT_EQ(NodeOf(Task(id, "svc.0")), node0);
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
  for (const char* t : {"svc.0", "svc.1"}) {
    EXPECT_EQ(Lines(dir_ / (std::string(t) + ".launches")).size(), 1u) << t << " started twice";
    EXPECT_EQ(Task(id, t).value("restarts", -1), 0);
  }
}

TEST_F(MultiHostTest, WrongPasswordIsRefusedClearly) {
  auto st = cluster_->Up(1, 1.0);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const fs::path wrong = dir_ / "wrong.password";
  std::ofstream(wrong) << "not-the-password\n";
  fs::permissions(wrong, fs::perms::owner_read | fs::perms::owner_write);
  // tandemd refuses to start and says why.
  auto flags = cluster_->DaemonFlags();
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == "--redis-password-file") flags[i + 1] = wrong.string();
  std::string cmd = (BinDir() / "tandemd").string() + " --state-dir " + (dir_ / "state-wrong").string();
  for (const auto& f : flags) cmd += " " + f;
  cmd += " 2>" + (dir_ / "wrong.log").string();
  EXPECT_NE(std::system(("timeout 20 " + cmd).c_str()), 0);
  const std::string log = testing::ReadFile(dir_ / "wrong.log");
  EXPECT_NE(log.find("AUTH refused"), std::string::npos) << log;
  // An agent with the wrong password never registers and logs why.
  Host& h = cluster_->hosts()[0];
  h.agent->Stop();
  ASSERT_TRUE(cluster_->StartAgent(h, wrong.string()).ok());
  EXPECT_TRUE(WaitFor([&] { return cluster_->AgentLog(h).find("AUTH refused") != std::string::npos; },
                      std::chrono::seconds(5))) << cluster_->AgentLog(h);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(cluster_->LiveNodes(), 0);
}

TEST_F(MultiHostTest, EachNodeMapsLogicalGpusOntoItsOwnPhysicalIds) {
  // h1 has four GPUs with physical ids 4..7, h2 a single one with id 1.
  Up(2.0, 2, {{"--gpus", "4,5,6,7"}, {"--gpus", "1"}});
  const std::string d = dir_.string();
  const std::string script = "echo \"$CUDA_VISIBLE_DEVICES\" > " + d + "/$TANDEM_ROLE.$TANDEM_RANK.cvd; while [ ! -e " +
                             d + "/go ]; do sleep 0.05; done";
  // Two actor+rollout groups of two GPUs each, and a one-GPU task of its own.
  json actor = {{"command", {"bash", "-c", script}}, {"replicas", 2}, {"gpus_per_replica", 2}};
  json rollout = actor;
  rollout["colocate_with"] = "actor";
  json solo = {{"command", {"bash", "-c", script}}, {"gpus_per_replica", 1}};
  json spec = {{"name", "gpumap"}, {"backend", {{"kind", "redis"}}}, {"devices", {{"count", 5}}},
               {"roles", {{"actor", actor}, {"rollout", rollout}, {"solo", solo}}}};
  const std::string id = daemon_->Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 5); })) << daemon_->Job(id).dump(2) << cluster_->AllAgentLogs();
  auto cvd = [&](const std::string& task) {
    std::string v;
    WaitFor([&] {
      v = testing::ReadFile(dir_ / (task + ".cvd"));
      return !v.empty();
    });
    return v.substr(0, v.find('\n'));
  };
  // The two-GPU groups cannot go to h2: both are on h1, colocated roles on identical physical ids.
  std::set<std::string> seen;
  for (int i = 0; i < 2; ++i) {
    const std::string a = "actor." + std::to_string(i), r = "rollout." + std::to_string(i);
    EXPECT_EQ(NodeOf(Task(id, a)), "h1") << daemon_->Job(id).dump(2);
    EXPECT_EQ(NodeOf(Task(id, r)), "h1");
    EXPECT_EQ(cvd(a), cvd(r)) << a << " and " << r << " are colocated";
    std::stringstream ids(cvd(a));
    for (std::string g; std::getline(ids, g, ',');) {
      EXPECT_TRUE(g == "4" || g == "5" || g == "6" || g == "7") << a << " got " << cvd(a);
      EXPECT_TRUE(seen.insert(g).second) << "GPU " << g << " given to two replicas";
    }
  }
  EXPECT_EQ(seen.size(), 4u);
  // The one-GPU task fits only on h2, and sees h2's physical id.
  EXPECT_EQ(NodeOf(Task(id, "solo.0")), "h2") << daemon_->Job(id).dump(2);
  EXPECT_EQ(cvd("solo.0"), "1");
  EXPECT_EQ(Task(id, "solo.0")["logical_devices"], json::array({4}));
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
}

TEST_F(MultiHostTest, LogsOfATaskWhoseRunDirOnlyItsNodeHasComeFromTheAgent) {
  // The agent keeps its tasks' files under its own --run-root, which the daemon never reads.
  const fs::path agent_runs = dir_ / "h1-runs";
  Up(2.0, 1, {{"--gpus", "0", "--run-root", agent_runs.string()}});
  const std::string d = dir_.string();
  // 1.2 MB of output, then two short lines: the tail is bounded at 1 MiB.
  const std::string script = "head -c 1200000 /dev/zero | tr '\\0' x; echo; echo remote-line-1; echo remote-line-2; "
                             "while [ ! -e " + d + "/go ]; do sleep 0.05; done";
  json spec = {{"name", "remotelogs"}, {"backend", {{"kind", "redis"}}},
               {"roles", {{"talker", {{"command", {"bash", "-c", script}}}}}}};
  const std::string id = daemon_->Submit(spec);
  ASSERT_TRUE(WaitFor([&] { return AllRunning(id, 1); })) << daemon_->Job(id).dump(2);
  const fs::path daemon_file = fs::path(daemon_->Job(id).value("run_dir", std::string())) / "tasks" / "talker.0.out";
  const fs::path agent_file = agent_runs / id / "tasks" / "talker.0.out";
  ASSERT_TRUE(WaitFor([&] { return testing::ReadFile(agent_file).find("remote-line-2") != std::string::npos; }))
      << cluster_->AllAgentLogs();
  // The CLI, through tandemd's HTTP API.
  const fs::path out = dir_ / "cli.out";
  const std::string cli = (BinDir() / "tandem").string() + " --socket " + (dir_ / "state" / "tandemd.sock").string() +
                          " logs " + id + " --task talker.0 > " + out.string() + " 2>&1";
  ASSERT_EQ(std::system(cli.c_str()), 0) << testing::ReadFile(out) << daemon_->log();
  const std::string body = testing::ReadFile(out);
  EXPECT_EQ(body.size(), 1u << 20) << "the remote tail is the last MiB";
  EXPECT_NE(body.find("remote-line-1\nremote-line-2\n"), std::string::npos) << body.substr(body.size() > 200 ? body.size() - 200 : 0);
  EXPECT_FALSE(fs::exists(daemon_file)) << "the daemon's run directory has the file: the test would not exercise the agent";
  Go();
  EXPECT_EQ(daemon_->WaitJob(id), "succeeded") << daemon_->Job(id).dump(2);
}

}  // namespace
}  // namespace tandem::multihost

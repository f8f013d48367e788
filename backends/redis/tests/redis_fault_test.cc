// Fault tests of the redis backend with real processes (issue #6 part 5):
// kill -9 of an agent (its watchdog kills its tasks, which are reported lost
// after the lease; a restarted agent takes work again), malformed messages in both streams
// (nothing crashes), and Redis going down (agents fence: their tasks are
// killed after the lease; everything recovers once Redis is back).
#include <signal.h>

#include <cstdlib>
#include <string>

#include "backends/redis/tests/redis_test_util.h"

namespace tandem::backends::testing {
namespace {

constexpr double kLeaseS = 1.0;

// Running and not a zombie (an orphan's zombie waits for whoever reaps it).
bool PidAlive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class RedisFaultTest : public OneAgentRedisTest {
 protected:
  RedisFaultTest() : OneAgentRedisTest("fault", kLeaseS) {}

  // A field of the launch's task hash (its key is in the ref).
  std::string HashField(const TaskRef& ref, const std::string& field) {
    auto c = redis::RedisConn::Connect(cfg_);
    if (!c.ok()) return "";
    auto r = (*c)->Command({"HGET", ref.data.value("key", ""), field});
    return r.ok() ? r->str : "";
  }

  pid_t WaitStartedPid(const TaskRef& ref) {
    pid_t pid = 0;
    WaitUntil([&] {
      pid = std::atoi(HashField(ref, "pid").c_str());
      return pid > 0;
    }, std::chrono::seconds(10));
    return pid;
  }

  Status RedisCommand(const std::vector<std::string>& args) {
    TANDEM_ASSIGN_OR_RETURN(auto c, redis::RedisConn::Connect(cfg_), "connect");
    return c->Command(args).status();
  }

  int RedisScript(const std::string& verb) {
    std::string script = std::string(std::getenv("TANDEM_SOURCE_DIR") ? std::getenv("TANDEM_SOURCE_DIR") : ".") +
                         "/scripts/services/redis.sh";
    return std::system((script + " " + verb + " >/dev/null 2>&1").c_str());
  }
};

TEST_F(RedisFaultTest, MalformedMessagesCrashNeitherAgentNorExecutor) {
  const std::string cmds = cluster_.prefix + ":agent:node0:cmds";
  const std::string events = cluster_.prefix + ":events";
  for (std::string junk : {"not json", "[1,2]", "{\"op\":\"start\"}", "{\"op\":\"start\",\"task_id\":\"x\"}",
                           "{\"op\":\"start\",\"task_id\":\"y\",\"request\":{\"argv\":[]}}",
                           "{\"op\":\"signal\",\"task_id\":\"z\",\"sig\":\"TERM\"}", "{\"op\":42,\"task_id\":7}"}) {
    // Signed, so the agent's parser sees them (unsigned ones: redis_signing_test.cc).
    std::vector<std::string> xadd = {"XADD", cmds, "*"};
    for (auto& f : redis::SignCommand(TestClusterKey(), cmds, junk)) xadd.push_back(f);
    ASSERT_TRUE(RedisCommand(xadd).ok());
    ASSERT_TRUE(RedisCommand({"XADD", events, "*", "msg", junk}).ok());
  }
  ASSERT_TRUE(RedisCommand({"XADD", cmds, "*", "other", "field"}).ok());
  ASSERT_TRUE(RedisCommand({"XADD", events, "*", "msg", "{\"task_id\":\"suite.ok.1\",\"state\":\"exited\",\"exit\":5}"}).ok());
  auto r = Request("ok", {"sh", "-c", "exit 3"});
  StartOrDie(r);
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x) << AgentLog();
  EXPECT_EQ(x->exit_code, 3);
  EXPECT_TRUE(cluster_.agents[0]->Running()) << AgentLog();
  EXPECT_NE(AgentLog().find("malformed"), std::string::npos) << AgentLog();
}

TEST_F(RedisFaultTest, KilledAgentsTasksAreKilledByItsWatchdogAndLostAfterTheLease) {
  auto r = Request("orphan", {"sleep", "60"});
  TaskRef ref = StartOrDie(r);
  pid_t pid = WaitStartedPid(ref);
  ASSERT_GT(pid, 0) << AgentLog();
  cluster_.agents[0]->Signal(SIGKILL);
  ASSERT_TRUE(cluster_.agents[0]->Reap(std::chrono::seconds(5)));
  auto t0 = std::chrono::steady_clock::now();
  // The agent's watchdog kills what the dead agent ran (no orphaned work) ...
  EXPECT_TRUE(WaitUntil([&] { return !PidAlive(pid); }, std::chrono::seconds(5))) << AgentLog();
  EXPECT_TRUE(WaitUntil([&] { return AgentLog().find("watchdog killed task=" + r.task_id) != std::string::npos; },
                        std::chrono::seconds(5))) << AgentLog();
  // ... and the daemon side reports the task lost once the node's lease lapsed.
  auto x = WaitExit(r.task_id, std::chrono::seconds(10));
  ASSERT_TRUE(x);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(static_cast<int>(kLeaseS * 1000) + 3000));
  EXPECT_FALSE(x->status_known) << x->ToJson().dump();
  EXPECT_NE(x->detail.find("lease expired"), std::string::npos) << x->detail;
  EXPECT_FALSE(exec_->Alive(ref));
  EXPECT_EQ(HashField(ref, "state"), "lost");
  // An agent restarted under the same name takes new work.
  auto again = std::make_unique<AgentProcess>("node0", cluster_.prefix, kLeaseS,
                                              (dir_.path() / (cluster_.prefix + "-agent0.log")).string());
  ASSERT_TRUE(again->Spawn());
  cluster_.agents[0] = std::move(again);
  ASSERT_TRUE(cluster_.WaitNodes(1).ok());
  auto r2 = Request("after", {"true"});
  StartOrDie(r2);
  auto x2 = WaitExit(r2.task_id);
  ASSERT_TRUE(x2) << AgentLog();
  EXPECT_TRUE(x2->succeeded());
}

TEST_F(RedisFaultTest, RedisDownFencesTasksAndRecovers) {
  auto r = Request("fenced", {"sleep", "60"});
  TaskRef ref = StartOrDie(r);
  pid_t pid = WaitStartedPid(ref);
  ASSERT_GT(pid, 0) << AgentLog();
  ASSERT_EQ(RedisScript("stop"), 0);
  auto t0 = std::chrono::steady_clock::now();
  // The agent kills its task by itself once its lease lapses.
  bool died = WaitUntil([&] { return !PidAlive(pid); }, std::chrono::seconds(8));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(RedisScript("start"), 0);
  ASSERT_TRUE(died) << AgentLog();
  EXPECT_LT(took, std::chrono::milliseconds(static_cast<int>(kLeaseS * 1000) + 3000));
  EXPECT_NE(AgentLog().find("fencing"), std::string::npos);
  // Once Redis is back the daemon learns of the end (fenced, or lost) exactly once.
  auto x = WaitExit(r.task_id, std::chrono::seconds(15));
  ASSERT_TRUE(x) << AgentLog();
  EXPECT_FALSE(x->succeeded());
  EXPECT_TRUE(x->detail.find("fenced") != std::string::npos || x->detail.find("lease expired") != std::string::npos)
      << x->ToJson().dump();
  // And the node takes work again once its agent holds a fresh lease.
  ASSERT_TRUE(WaitUntil([&] { return AgentLog().find("lease regained") != std::string::npos; },
                        std::chrono::seconds(15))) << AgentLog();
  auto r2 = Request("recovered", {"sh", "-c", "exit 0"});
  TaskRef ref2;
  ASSERT_TRUE(WaitUntil([&] {
    auto started = exec_->Start(r2);
    if (started.ok()) ref2 = *started;
    return started.ok();
  }, std::chrono::seconds(10)));
  auto x2 = WaitExit(r2.task_id);
  ASSERT_TRUE(x2) << AgentLog();
  EXPECT_TRUE(x2->succeeded()) << x2->ToJson().dump() << "\n" << AgentLog();
  ExpectExactlyOnce();
}

TEST_F(RedisFaultTest, AgentServesLogTails) {
  auto r = Request("tail", {"sh", "-c", "echo first line; echo hello-tail; sleep 30"});
  TaskRef ref = StartOrDie(r);
  ASSERT_GT(WaitStartedPid(ref), 0) << AgentLog();
  auto* redis_exec = static_cast<redis::RedisExecutor*>(exec_.get());
  std::string out;
  ASSERT_TRUE(WaitUntil([&] {
    auto t = redis_exec->Tail(ref, "stdout", 1 << 20);
    out = t.ok() ? *t : t.status().ToString();
    return out.find("hello-tail") != std::string::npos;
  }, std::chrono::seconds(5))) << out << "\n" << AgentLog();
  EXPECT_EQ(out, "first line\nhello-tail\n");
  // Bounded: only the last bytes.
  auto last = redis_exec->Tail(ref, "stdout", 5);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(*last, "tail\n");
  // A launch the node never ran.
  TaskRef other = ref;
  other.data["launch"] = r.task_id + "~0000000000000000";
  auto none = redis_exec->Tail(other, "stdout", 100);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
  ASSERT_TRUE(exec_->Kill(ref).ok());
  ASSERT_TRUE(WaitExit(r.task_id));
}

// No live node: Start says "retry later" (the daemon keeps the task waiting,
// executor.h) and queues nothing; once an agent registers the same request starts.
TEST_F(RedisFaultTest, StartWithoutLiveNodesIsRetryableAndQueuesNothing) {
  cluster_.agents[0]->Stop();
  auto r = Request("nobody", {"sh", "-c", "exit 4"});
  auto ref = exec_->Start(r);
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.status().code(), StatusCode::kUnavailable) << ref.status().ToString();
  EXPECT_TRUE(IsRetryableStart(ref.status()));
  EXPECT_NE(ref.status().ToString().find("no node"), std::string::npos) << ref.status().ToString();
  auto queued = conn_->Command({"XLEN", cluster_.prefix + ":agent:node0:cmds"});
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->integer, 0) << "a start command was queued with no node to run it";
  auto hashes = conn_->Command({"KEYS", cluster_.prefix + ":task:*"});
  ASSERT_TRUE(hashes.ok());
  EXPECT_TRUE(hashes->elements.empty()) << "a task hash was written for a launch that never happened";

  ASSERT_TRUE(cluster_.agents[0]->Spawn());
  ASSERT_TRUE(cluster_.WaitNodes(1).ok()) << AgentLog();
  StatusOr<TaskRef> again = Unavailable("not tried");
  ASSERT_TRUE(WaitUntil([&] {  // the executor's view of the nodes is at most lease_check old
    again = exec_->Start(r);
    return again.ok();
  }, std::chrono::seconds(5))) << again.status().ToString();
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x) << AgentLog();
  EXPECT_EQ(x->exit_code, 4);
}

}  // namespace
}  // namespace tandem::backends::testing

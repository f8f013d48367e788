// What agents write back is signed too (docs/redis.md "Signed events"), and
// the agent's replay memory survives a restart (nonce_journal.h): envelopes
// and the journal on their own, then real agents against the test Redis — a
// forged "exited" event or task hash does not end a task, a forged node
// registration is not used for placement, and a command accepted before an
// agent restart is refused when replayed after it.
#include <fstream>
#include <string>

#include "backends/redis/command_signing.h"
#include "backends/redis/nonce_journal.h"
#include "backends/redis/tests/redis_test_util.h"

namespace tandem::backends::testing {
namespace {

using redis::ClusterKey;
using redis::CommandVerifier;
using redis::StreamEntry;

const ClusterKey kKey = ClusterKey::FromBytes("0123456789abcdef0123456789abcdef");

StreamEntry Entry(const std::string& id, const std::vector<std::string>& fields) {
  StreamEntry e;
  e.id = id;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) e.fields.emplace_back(fields[i], fields[i + 1]);
  return e;
}

TEST(EnvelopeTest, OpensOnlyForItsKeyUntamperedAndFresh) {
  const std::string env = redis::SignEnvelope(kKey, "p:node:a", R"({"gpus":[0,1]})");
  auto ok = redis::OpenEnvelope(kKey, "p:node:a", env, redis::NowMs(), std::chrono::seconds(60));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, R"({"gpus":[0,1]})");
  EXPECT_FALSE(redis::OpenEnvelope(kKey, "p:node:b", env, redis::NowMs(), std::chrono::seconds(60)).ok())
      << "copied to another node's key";
  EXPECT_FALSE(redis::OpenEnvelope(ClusterKey::FromBytes("another key of 16+ bytes"), "p:node:a", env, redis::NowMs(),
                                   std::chrono::seconds(60)).ok());
  auto j = nlohmann::json::parse(env);
  j["msg"] = R"({"gpus":[0,1,2,3,4,5,6,7]})";
  EXPECT_FALSE(redis::OpenEnvelope(kKey, "p:node:a", j.dump(), redis::NowMs(), std::chrono::seconds(60)).ok());
  EXPECT_FALSE(redis::OpenEnvelope(kKey, "p:node:a", R"({"gpus":[0]})", redis::NowMs(), std::chrono::seconds(60)).ok());
  auto stale = redis::OpenEnvelope(kKey, "p:node:a", env, redis::NowMs() + 120000, std::chrono::seconds(60));
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("stale"), std::string::npos) << stale.status().ToString();
}

TEST(NonceJournalTest, ReplayMemorySurvivesARestartAndForgetsOldEntries) {
  TempDir dir;
  const auto path = dir.path() / "state" / "p.n0.nonces";
  const std::string stream = "p:agent:n0:cmds";
  auto fields = redis::SignCommand(kKey, stream, R"({"op":"kill","task_id":"t"})");
  {
    CommandVerifier v(kKey, stream, std::chrono::seconds(60));
    auto j = redis::NonceJournal::Open(path);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    ASSERT_TRUE(v.UseJournal(std::move(j).value(), redis::NowMs()).ok());
    ASSERT_TRUE(v.Verify(Entry("1-0", fields), redis::NowMs()).ok());
    ASSERT_TRUE(v.Flush().ok());
  }
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // A new process (a restarted agent) with the same file.
  CommandVerifier v(kKey, stream, std::chrono::seconds(60));
  ASSERT_TRUE(v.UseJournal(std::move(redis::NonceJournal::Open(path)).value(), redis::NowMs()).ok());
  auto replay = v.Verify(Entry("7-0", fields), redis::NowMs());
  ASSERT_FALSE(replay.ok());
  EXPECT_NE(replay.message().find("replayed command"), std::string::npos) << replay.ToString();
  EXPECT_TRUE(v.Verify(Entry("1-0", fields), redis::NowMs()).ok()) << "the same entry again is not a replay";
  // Entries older than twice the maximum age are dropped on load; a torn line is skipped.
  std::ofstream(path, std::ios::app) << "torn-line-without-fields\n";
  auto j = redis::NonceJournal::Open(path);
  ASSERT_TRUE(j.ok());
  auto later = (*j)->Load(redis::NowMs() + 1);
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(later->empty());
  auto now = (*j)->Load(redis::NowMs() - 60000);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->size(), 1u);
}

TEST(NonceJournalTest, StaysBoundedUnderManyCommands) {
  TempDir dir;
  const auto path = dir.path() / "p.n0.nonces";
  const std::string stream = "p:agent:n0:cmds";
  // A short maximum age: old nonces leave the memory, and the file with them.
  CommandVerifier v(kKey, stream, std::chrono::milliseconds(1000));
  ASSERT_TRUE(v.UseJournal(std::move(redis::NonceJournal::Open(path)).value(), redis::NowMs()).ok());
  for (int i = 0; i < 3000; ++i) {
    auto f = redis::SignCommand(kKey, stream, "{}");
    long long now = redis::NowMs();
    if (i >= 2000) {  // 3 s later: everything accepted before is past the horizon
      now += 3000;
      const std::string nonce = "later" + std::to_string(i);
      f = {"msg", "{}", "ts", std::to_string(now), "nonce", nonce, "sig", redis::CommandMac(kKey, stream, now, nonce, "{}")};
    }
    ASSERT_TRUE(v.Verify(Entry(std::to_string(i) + "-0", f), now).ok());
    if (i % 32 == 31) {
      ASSERT_TRUE(v.Flush().ok());
    }
  }
  ASSERT_TRUE(v.Flush().ok());
  std::ifstream in(path);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_LE(lines, 2100) << "the journal was never compacted";
}

class SignedWritesTest : public OneAgentRedisTest {
 protected:
  SignedWritesTest() : OneAgentRedisTest("signed") {}
  std::string Field(const std::string& key, const std::string& field) {
    auto r = conn_->Command({"HGET", key, field});
    return r.ok() ? r->str : "";
  }
};

TEST_F(SignedWritesTest, ForgedExitWrittenStraightIntoRedisDoesNotEndTheTask) {
  auto r = Request("victim", {"sleep", "30"});
  TaskRef ref = StartOrDie(r);
  const std::string key = ref.data.value("key", ""), launch = ref.data.value("launch", "");
  ASSERT_TRUE(WaitUntil([&] { return Field(key, "state") == "started"; })) << AgentLog();
  const std::string exit = R"({"exit_code":0,"signal":0,"status_known":true,"detail":"forged"})";
  const std::string ev = nlohmann::json{{"task_id", launch}, {"node", "node0"}, {"state", "exited"},
                                        {"exit", nlohmann::json::parse(exit)}}.dump();
  const std::string events = cluster_.prefix + ":events";
  // Unsigned, signed with a guessed key, and a signed event of another stream.
  ASSERT_TRUE(conn_->Command({"XADD", events, "*", "msg", ev}).ok());
  for (auto fields : {redis::SignCommand(ClusterKey::FromBytes("an attacker's guess at the key"), events, ev),
                      redis::SignCommand(TestClusterKey(), cluster_.prefix + ":agent:node0:cmds", ev)}) {
    std::vector<std::string> xadd = {"XADD", events, "*"};
    xadd.insert(xadd.end(), fields.begin(), fields.end());
    ASSERT_TRUE(conn_->Command(xadd).ok());
  }
  // And the task hash rewritten to say it ended (what a restarted daemon reads).
  ASSERT_TRUE(conn_->Command({"HSET", key, "state", "exited", "exit", exit}).ok());
  EXPECT_FALSE(WaitExit(r.task_id, std::chrono::milliseconds(1000))) << "a forged exit ended the task";
  EXPECT_TRUE(exec_->Alive(ref)) << "a forged task hash made the task look ended";
  // The real end still comes through, exactly once.
  ASSERT_TRUE(exec_->Kill(ref).ok());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x) << AgentLog();
  EXPECT_NE(x->detail, "forged");
  EXPECT_EQ(x->signal, SIGKILL) << x->ToJson().dump();
  ExpectExactlyOnce();
}

TEST_F(SignedWritesTest, ForgedRegistrationIsNotUsedForPlacement) {
  // A node record for "a-ghost" (sorts first, no tasks, eight GPUs), unsigned
  // and signed with a guessed key; and node0's record copied to the ghost's key.
  const std::string ghost = cluster_.prefix + ":node:a-ghost", ghost2 = cluster_.prefix + ":node:b-ghost";
  const std::string record = R"({"name":"a-ghost","gpus":[0,1,2,3,4,5,6,7]})";
  ASSERT_TRUE(conn_->Command({"SADD", cluster_.prefix + ":nodes", "a-ghost", "b-ghost"}).ok());
  ASSERT_TRUE(conn_->Command({"SET", ghost, record, "PX", "60000"}).ok());
  auto real = conn_->Command({"GET", cluster_.prefix + ":node:node0"});
  ASSERT_TRUE(real.ok() && !real->is_nil());
  ASSERT_TRUE(conn_->Command({"SET", ghost2, real->str, "PX", "60000"}).ok());
  auto* redis_exec = static_cast<redis::RedisExecutor*>(exec_.get());
  auto live = redis_exec->LiveNodes();
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(*live, std::vector<std::string>{"node0"});
  // A task goes to the real node, and one that needs GPUs (node0 has none) is not placed at all.
  auto r = Request("cpu", {"true"});
  TaskRef ref = StartOrDie(r);
  EXPECT_EQ(ref.data.value("node", ""), "node0");
  ASSERT_TRUE(WaitExit(r.task_id)) << AgentLog();
  auto g = Request("gpu", {"true"});
  for (auto& kv : g.env)
    if (kv.rfind("TANDEM_DEVICES=", 0) == 0) kv = "TANDEM_DEVICES=0,1";
  auto placed = exec_->Start(g);
  ASSERT_FALSE(placed.ok()) << "placed on " << placed->data.dump();
  EXPECT_NE(placed.status().message().find("node0 0/0"), std::string::npos) << placed.status().ToString();
  EXPECT_EQ(placed.status().code(), StatusCode::kResourceExhausted) << placed.status().ToString();
  (void)conn_->Command({"DEL", ghost, ghost2});
}

TEST_F(SignedWritesTest, CommandReplayedAfterAnAgentRestartIsRefused) {
  const auto marker = dir_.path() / "replay.marker";
  auto r = Request("once", {"sh", "-c", "echo ran >> " + marker.string()});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id)) << AgentLog();
  // The signed start entry, as an attacker would copy it.
  const std::string cmds = cluster_.prefix + ":agent:node0:cmds";
  auto range = conn_->Command({"XRANGE", cmds, "-", "+"});
  ASSERT_TRUE(range.ok());
  std::vector<std::string> fields;
  for (const auto& e : range->elements) {
    std::vector<std::string> f;
    for (const auto& v : e.elements[1].elements) f.push_back(v.str);
    for (size_t i = 0; i + 1 < f.size(); i += 2)
      if (f[i] == "msg" && f[i + 1].find(r.task_id) != std::string::npos) fields = f;
  }
  ASSERT_FALSE(fields.empty());
  // The agent restarts (same name, same state dir) ...
  cluster_.agents[0]->Stop();
  auto again = std::make_unique<AgentProcess>("node0", cluster_.prefix, 2.0,
                                              (dir_.path() / (cluster_.prefix + "-agent0.log")).string());
  ASSERT_TRUE(again->Spawn());
  cluster_.agents[0] = std::move(again);
  ASSERT_TRUE(cluster_.WaitNodes(1).ok());
  // ... and the copy arrives, with the task hash reset to "assigned".
  ASSERT_TRUE(conn_->Command({"HSET", ref.data.value("key", ""), "state", "assigned"}).ok());
  std::vector<std::string> xadd = {"XADD", cmds, "*"};
  xadd.insert(xadd.end(), fields.begin(), fields.end());
  ASSERT_TRUE(conn_->Command(xadd).ok());
  auto b = Request("barrier", {"true"});
  StartOrDie(b);
  ASSERT_TRUE(WaitExit(b.task_id)) << AgentLog();
  std::ifstream in(marker);
  int runs = 0;
  for (std::string l; std::getline(in, l);) ++runs;
  EXPECT_EQ(runs, 1) << "the replayed command ran again after the restart\n" << AgentLog();
  EXPECT_NE(AgentLog().find("reason=replayed command"), std::string::npos) << AgentLog();
}

}  // namespace
}  // namespace tandem::backends::testing

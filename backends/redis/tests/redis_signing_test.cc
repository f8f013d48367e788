// Signed agent commands (issue #6 "Security"; command_signing.h): the
// verifier's checks on their own, then real agents against the test Redis —
// a command written straight into Redis without the cluster key is never run,
// and a signed command replayed into the stream does not run twice.
#include <unistd.h>

#include <fstream>
#include <string>

#include "backends/redis/command_signing.h"
#include "backends/redis/tests/redis_test_util.h"

namespace tandem::backends::testing {
namespace {

using redis::ClusterKey;
using redis::CommandVerifier;
using redis::StreamEntry;

StreamEntry Entry(const std::string& id, const std::vector<std::string>& fields) {
  StreamEntry e;
  e.id = id;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) e.fields.emplace_back(fields[i], fields[i + 1]);
  return e;
}

const ClusterKey kKey = ClusterKey::FromBytes("0123456789abcdef0123456789abcdef");
const std::string kStream = "p:agent:n0:cmds";

TEST(CommandVerifierTest, AcceptsASignedCommandOnce) {
  CommandVerifier v(kKey, kStream, std::chrono::seconds(60));
  auto fields = redis::SignCommand(kKey, kStream, R"({"op":"kill","task_id":"t"})");
  EXPECT_TRUE(v.Verify(Entry("1-0", fields), redis::NowMs()).ok());
  // The same entry delivered again (pending after a reconnect) is not a replay ...
  EXPECT_TRUE(v.Verify(Entry("1-0", fields), redis::NowMs()).ok());
  // ... the same bytes under a new entry id are.
  auto replay = v.Verify(Entry("2-0", fields), redis::NowMs());
  ASSERT_FALSE(replay.ok());
  EXPECT_NE(replay.message().find("replayed"), std::string::npos) << replay.ToString();
}

TEST(CommandVerifierTest, RefusesUnsignedTamperedMisdirectedAndStaleCommands) {
  CommandVerifier v(kKey, kStream, std::chrono::seconds(60));
  const std::string msg = R"({"op":"start","task_id":"t"})";
  auto Reason = [&](const std::vector<std::string>& f) { return v.Verify(Entry("9-0", f), redis::NowMs()).message(); };
  EXPECT_NE(Reason({"msg", msg}).find("unsigned"), std::string::npos);
  auto f = redis::SignCommand(kKey, kStream, msg);
  auto tampered = f;
  tampered[1] = R"({"op":"start","task_id":"u"})";
  EXPECT_NE(Reason(tampered).find("bad signature"), std::string::npos);
  EXPECT_NE(Reason(redis::SignCommand(ClusterKey::FromBytes("another key, 16+ bytes"), kStream, msg)).find("bad signature"),
            std::string::npos);
  EXPECT_NE(Reason(redis::SignCommand(kKey, "p:agent:n1:cmds", msg)).find("bad signature"), std::string::npos);
  const long long old = redis::NowMs() - 120000;
  const std::string nonce = "00112233445566778899aabbccddeeff";
  EXPECT_NE(Reason({"msg", msg, "ts", std::to_string(old), "nonce", nonce, "sig",
                    redis::CommandMac(kKey, kStream, old, nonce, msg)})
                .find("stale"),
            std::string::npos);
}

TEST(ClusterKeyTest, RefusesKeyFilesOthersMayReadAndShortKeys) {
  TempDir dir;
  const std::string path = (dir.path() / "key").string();
  std::ofstream(path) << "0123456789abcdef0123\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                         std::filesystem::perms::group_read);
  auto k = ClusterKey::FromFile(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("chmod 600"), std::string::npos) << k.status().ToString();
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_TRUE(ClusterKey::FromFile(path).ok());
  EXPECT_EQ(ClusterKey::FromFile(path)->bytes(), "0123456789abcdef0123");
  std::ofstream(path) << "short\n";
  EXPECT_FALSE(ClusterKey::FromFile(path).ok());
}

class RedisSigningTest : public OneAgentRedisTest {
 protected:
  RedisSigningTest() : OneAgentRedisTest("sign") {}
  std::string Cmds() { return cluster_.prefix + ":agent:node0:cmds"; }

  // A start command for a task that appends a line to `marker` each time it runs.
  std::string StartMessage(const std::string& name, const std::filesystem::path& marker) {
    auto r = Request(name, {"sh", "-c", "echo ran >> " + marker.string()});
    return nlohmann::json{{"op", "start"}, {"task_id", r.task_id}, {"request", redis::RequestToJson(r)}}.dump();
  }
  // Runs a legitimate task through the executor and waits for its end: the
  // agent reads its stream in order, so every entry written before was handled.
  void Barrier(const std::string& name) {
    auto r = Request(name, {"true"});
    StartOrDie(r);
    ASSERT_TRUE(WaitExit(r.task_id)) << AgentLog();
  }
  int Lines(const std::filesystem::path& p) {
    std::ifstream in(p);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
};

TEST_F(RedisSigningTest, ForgedCommandsWrittenStraightIntoRedisAreNotRun) {
  const auto marker = dir_.path() / "forged.marker";
  const std::string msg = StartMessage("forged", marker);
  // Unsigned; signed with another key; signed for another node; signed long ago.
  ASSERT_TRUE(conn_->Command({"XADD", Cmds(), "*", "msg", msg}).ok());
  std::vector<std::vector<std::string>> forged = {
      redis::SignCommand(ClusterKey::FromBytes("an attacker's guess at the key"), Cmds(), msg),
      redis::SignCommand(TestClusterKey(), cluster_.prefix + ":agent:node1:cmds", msg)};
  const long long old = redis::NowMs() - 10 * 60 * 1000;
  const std::string nonce = "ffeeddccbbaa99887766554433221100";
  forged.push_back({"msg", msg, "ts", std::to_string(old), "nonce", nonce, "sig",
                    redis::CommandMac(TestClusterKey(), Cmds(), old, nonce, msg)});
  for (auto& f : forged) {
    std::vector<std::string> xadd = {"XADD", Cmds(), "*"};
    xadd.insert(xadd.end(), f.begin(), f.end());
    ASSERT_TRUE(conn_->Command(xadd).ok());
  }
  Barrier("after-forged");
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a forged command ran\n" << AgentLog();
  const std::string log = AgentLog();
  EXPECT_NE(log.find("reason=unsigned command"), std::string::npos) << log;
  EXPECT_NE(log.find("reason=bad signature"), std::string::npos) << log;
  EXPECT_NE(log.find("reason=stale command"), std::string::npos) << log;
  EXPECT_TRUE(cluster_.agents[0]->Running());
}

TEST_F(RedisSigningTest, ReplayedCommandDoesNotRunTwice) {
  const auto marker = dir_.path() / "replay.marker";
  auto r = Request("once", {"sh", "-c", "echo ran >> " + marker.string()});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id)) << AgentLog();
  ASSERT_EQ(Lines(marker), 1);
  // Copy the signed start entry, byte for byte, to the end of the stream, and
  // make the task hash look freshly assigned again, as an attacker with write
  // access to Redis could.
  auto range = conn_->Command({"XRANGE", Cmds(), "-", "+"});
  ASSERT_TRUE(range.ok());
  std::vector<std::string> fields;
  for (const auto& e : range->elements) {
    std::vector<std::string> f;
    for (const auto& v : e.elements[1].elements) f.push_back(v.str);
    for (size_t i = 0; i + 1 < f.size(); i += 2)
      if (f[i] == "msg" && f[i + 1].find(r.task_id) != std::string::npos) fields = f;
  }
  ASSERT_FALSE(fields.empty()) << "the signed start command is not in the stream";
  ASSERT_TRUE(conn_->Command({"HSET", ref.data.value("key", ""), "state", "assigned"}).ok());
  std::vector<std::string> xadd = {"XADD", Cmds(), "*"};
  xadd.insert(xadd.end(), fields.begin(), fields.end());
  ASSERT_TRUE(conn_->Command(xadd).ok());
  Barrier("after-replay");
  EXPECT_EQ(Lines(marker), 1) << "the replayed command ran again\n" << AgentLog();
  EXPECT_NE(AgentLog().find("reason=replayed command"), std::string::npos) << AgentLog();
}

}  // namespace
}  // namespace tandem::backends::testing

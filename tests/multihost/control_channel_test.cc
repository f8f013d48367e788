// The handoff control channel across nodes (issue #6 item 2;
// docs/control-protocol.md "Transport", "Authentication"; docs/redis.md):
// tandemd in the root namespace with `--control-listen <root side of the
// veth>:0`; a colocated actor+rollout handoff job of probe workers placed on
// an agent in a network namespace; the workers find TANDEM_CONTROL=tcp:...
// and the token their agent derived under the cluster key (never written to
// Redis), reach tandemd across the veth and complete their handoff cycles. A
// forged hello from the namespace — no token, or one not made with the
// cluster key — is refused.
#include <gtest/gtest.h>

#include <iostream>

#include "common/control/control_token.h"
#include "tests/daemon/daemon_process.h"
#include "tests/multihost/netns_test.h"

namespace tandem::multihost {
namespace {

using json = nlohmann::json;
using testing::DaemonProcess;
using testing::WaitFor;

using testing::JsonLines;

class ControlChannelTest : public NetnsTest {
 protected:
  ControlChannelTest() : NetnsTest("tandem-mhctl") {}

  // Runs a hello from inside `h`'s namespace against HOST:PORT; the answer line.
  std::string HelloFromNamespace(const Host& h, const std::string& host_port, const json& hello) {
    const fs::path script = dir_ / "forge.py", out = dir_ / "forge.out";
    std::ofstream(script) << "import socket, sys\n"
                             "host, port = sys.argv[1].rsplit(':', 1)\n"
                             "s = socket.create_connection((host, int(port)), timeout=10)\n"
                             "s.sendall(open(sys.argv[2]).read().encode() + b'\\n')\n"
                             "open(sys.argv[3], 'w').write(s.makefile().readline())\n";
    std::ofstream(dir_ / "forge.json") << hello.dump();
    fs::remove(out);
    Sh("ip netns exec " + h.netns + " python3 " + script.string() + " " + host_port + " " +
       (dir_ / "forge.json").string() + " " + out.string());
    return testing::ReadFile(out);
  }
};

TEST_F(ControlChannelTest, HandoffJobOnAnAgentUsesTheDaemonsTcpAddress) {
  auto st = cluster_->Up(1, 2.0);
  ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << cluster_->AllAgentLogs();
  Host& h = cluster_->hosts().front();
  auto flags = cluster_->DaemonFlags();
  flags.insert(flags.end(), {"--gpus", "0", "--control-listen", h.root_ip + ":0"});
  daemon_ = std::make_unique<DaemonProcess>(dir_ / "state", flags);
  daemon_->Start();
  std::string tcp;
  std::getline(std::ifstream(dir_ / "state" / "control.addr"), tcp);
  ASSERT_EQ(tcp.rfind("tcp:" + h.root_ip + ":", 0), 0u) << tcp;

  const std::string id = daemon_->Submit(testing::ProbeHandoffSpec("remote-handoff", "redis", 2));
  ASSERT_FALSE(id.empty());

  // A forged hello from the node's namespace for a task of this job: without
  // a token, and with a token under a key other than the cluster key.
  std::string secret;
  std::getline(std::ifstream(dir_ / "state" / "control.key"), secret);
  const std::string task = id + ".rollout.0";
  json forged = {{"type", "hello"}, {"protocol", 1}, {"job_id", id}, {"task_id", task}, {"role", "rollout"}, {"rank", 0}};
  for (const std::string& token : {std::string(), control::ControlToken(secret, id, task, 1)}) {
    if (!token.empty()) forged["token"] = token;
    const std::string answer = HelloFromNamespace(h, tcp.substr(4), forged);
    EXPECT_NE(answer.find("\"unauthenticated\""), std::string::npos) << "token=" << token << " answer=" << answer;
  }

  ASSERT_EQ(daemon_->WaitJob(id, std::chrono::seconds(60)), "succeeded") << daemon_->Job(id).dump(2);
  const fs::path run = daemon_->Job(id).value("run_dir", "");
  std::vector<std::string> phases;
  for (const json& l : JsonLines(run / "handoff.jsonl")) {
    EXPECT_EQ(l["outcome"], "ok") << l.dump();
    if (phases.empty() || phases.back() != l["phase"]) phases.push_back(l["phase"]);
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"ROLLOUT", "TRAIN", "SYNC(1)", "ROLLOUT", "TRAIN", "SYNC(2)"}));
  // Both workers said hello from the node's own address, across the veth.
  const std::string log = daemon_->log();
  for (const char* w : {"actor/0", "rollout/0"}) {
    EXPECT_NE(log.find(std::string("worker=") + w + " peer=" + h.ip + ":"), std::string::npos) << w << "\n" << log;
  }
  EXPECT_NE(log.find("unauthenticated hello refused transport=tcp peer=" + h.ip), std::string::npos);
  // The start commands in Redis carry the endpoint, never a token.
  auto c = backends::redis::RedisConn::Connect(cluster_->Config());
  ASSERT_TRUE(c.ok());
  auto entries = (*c)->Command({"XRANGE", cluster_->prefix() + ":agent:" + h.name + ":cmds", "-", "+"});
  ASSERT_TRUE(entries.ok());
  std::string all;
  std::function<void(const backends::redis::RedisReply&)> walk = [&](const backends::redis::RedisReply& r) {
    all += r.str + "\n";
    for (const auto& e : r.elements) walk(e);
  };
  walk(*entries);
  EXPECT_NE(all.find("TANDEM_CONTROL=" + tcp), std::string::npos) << all.substr(0, 2000);
  EXPECT_EQ(all.find("TANDEM_CONTROL_TOKEN"), std::string::npos);
}

}  // namespace
}  // namespace tandem::multihost

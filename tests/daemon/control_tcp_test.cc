// The control channel over TCP through a real tandemd (issue #6 item 2;
// docs/control-protocol.md "Transport", "Authentication"): `--control-listen
// 127.0.0.1:0` binds an ephemeral port and writes it to <state>/control.addr;
// every launch carries its token; hellos without the launch's token
// (missing, wrong, another task's, another launch's) are refused as
// "unauthenticated" and logged, over TCP and the unix socket alike; the right one is admitted, also after the
// daemon restarted; probe workers told to use the TCP address run their
// handoff cycles through it.
#include "common/control/control_token.h"
#include "tests/daemon/control_line.h"
#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using Line = ControlLine;

json Hello(const std::string& job, const std::string& task, int rank, const std::string& token) {
  json h = {{"type", "hello"}, {"protocol", 1}, {"job_id", job}, {"task_id", task}, {"role", "main"}, {"rank", rank}};
  if (!token.empty()) h["token"] = token;
  return h;
}

class ControlTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-ctltcp");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "0,1", "--grace", "1",
                                                                        "--control-listen", "127.0.0.1:0"});
    d_->Start();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << d_->log();
    d_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Line 1 of control.addr: the bound tcp:HOST:PORT.
  std::string TcpAddress() {
    std::ifstream in(dir_ / "control.addr");
    std::string line;
    std::getline(in, line);
    return line;
  }
  std::string Secret() {
    std::ifstream in(dir_ / "control.key");
    std::string s;
    std::getline(in, s);
    return s;
  }
  void Cancel(const std::string& id) {
    auto r = d_->client().Request("POST", "/v1/jobs/" + id + "/cancel", "");
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(d_->WaitJob(id, std::chrono::seconds(30)), "cancelled");
  }

  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(ControlTcpTest, TcpHellosNeedTheLaunchTokenAndTokensSurviveARestart) {
  const std::string tcp = TcpAddress();
  ASSERT_EQ(tcp.rfind("tcp:127.0.0.1:", 0), 0u) << tcp;
  EXPECT_NE(tcp, "tcp:127.0.0.1:0");
  const std::string id = d_->Submit(BashJob(
      "tok", "echo \"$TANDEM_CONTROL|$TANDEM_CONTROL_TOKEN|$TANDEM_CONTROL_LAUNCH\" > env.$TANDEM_RANK.tmp && "
             "mv env.$TANDEM_RANK.tmp env.$TANDEM_RANK; exec sleep 120", 2));
  const fs::path run = d_->Job(id).value("run_dir", "");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(run / "env.0") && fs::exists(run / "env.1"); }));
  const std::string t0 = id + ".main.0", t1 = id + ".main.1";
  const std::string token0 = control::ControlToken(Secret(), id, t0, 1);
  const std::string token1 = control::ControlToken(Secret(), id, t1, 1);
  // A local task keeps the unix socket and gets its launch's token.
  const std::string unix_ep = "unix:" + (dir_ / "control.sock").string();
  EXPECT_EQ(ReadFile(run / "env.0"), unix_ep + "|" + token0 + "|1\n");
  EXPECT_EQ(ReadFile(run / "env.1"), unix_ep + "|" + token1 + "|1\n");

  // Refused over TCP: no token, garbage, the other task's, another launch's,
  // and a job that does not exist (the answer says nothing about jobs).
  const std::vector<std::pair<std::string, json>> refused = {
      {"no token", Hello(id, t0, 0, "")},
      {"garbage", Hello(id, t0, 0, "deadbeef")},
      {"another task's", Hello(id, t0, 0, token1)},
      {"another launch's", Hello(id, t0, 0, control::ControlToken(Secret(), id, t0, 2))},
      {"unknown job", Hello("nope", "nope.main.0", 0, token0)}};
  for (const auto& [what, hello] : refused) {
    Line l(tcp);
    ASSERT_TRUE(l.ok());
    json e = l.Say(hello);
    EXPECT_EQ(e["type"], "error") << what << ": " << e.dump();
    EXPECT_EQ(e["code"], "unauthenticated") << what << ": " << e.dump();
    EXPECT_EQ(e["message"].get<std::string>().find("nope"), std::string::npos) << e.dump();
    EXPECT_EQ(l.Read()["type"], "eof") << what;
  }
  EXPECT_NE(d_->log().find("unauthenticated hello refused"), std::string::npos);
  {
    Line l(tcp);
    json w = l.Say(Hello(id, t0, 0, token0));
    EXPECT_EQ(w["type"], "welcome") << w.dump();
    EXPECT_EQ(w["handoff"], false);  // a plain task
    // Framing over TCP is the unix socket's.
    EXPECT_EQ(l.Say("{oops")["code"], "malformed");
    EXPECT_EQ(l.Say(json{{"type", "frobnicate"}, {"id", 4}})["code"], "unknown_command");
  }
  // The unix socket (0600) needs the token too (issue #12 point 4): a process
  // of the same user that is not the task is refused like a TCP peer.
  {
    Line l(unix_ep);
    EXPECT_EQ(l.Say(Hello(id, t1, 1, ""))["code"], "unauthenticated");
  }
  {
    Line l(unix_ep);
    EXPECT_EQ(l.Say(Hello(id, t1, 1, token0))["code"], "unauthenticated");
  }
  {
    Line l(unix_ep);
    EXPECT_EQ(l.Say(Hello(id, t1, 1, token1))["type"], "welcome");
  }

  // A restarted daemon (new ephemeral port) admits the same tokens: the
  // secret and the launch numbers are durable.
  d_->Stop();
  d_->Start();
  const std::string tcp2 = TcpAddress();
  ASSERT_EQ(tcp2.rfind("tcp:127.0.0.1:", 0), 0u) << tcp2;
  ASSERT_TRUE(WaitFor([&] { return d_->JobState(id) == "running"; }));
  {
    Line l(tcp2);
    json w = l.Say(Hello(id, t1, 1, token1));
    EXPECT_EQ(w["type"], "welcome") << w.dump();
  }
  {
    Line l(tcp2);
    EXPECT_EQ(l.Say(Hello(id, t1, 1, token0))["code"], "unauthenticated");
  }
  Cancel(id);
}

// Probe workers pointed at the TCP address (--control) present their token
// from the environment and run their handoff cycles through it.
TEST_F(ControlTcpTest, ProbeWorkersRunHandoffCyclesOverTcp) {
  const std::string id = d_->Submit(ProbeHandoffSpec("tcpcycles", "local", 2, {"--control", TcpAddress()}));
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(60)), "succeeded") << d_->Job(id).dump(2);
  const fs::path run = d_->Job(id).value("run_dir", "");
  std::vector<std::string> phases;
  std::ifstream in(run / "handoff.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json l = json::parse(line);
    EXPECT_EQ(l["outcome"], "ok") << line;
    if (phases.empty() || phases.back() != l["phase"]) phases.push_back(l["phase"]);
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"ROLLOUT", "TRAIN", "SYNC(1)", "ROLLOUT", "TRAIN", "SYNC(2)"}));
  // The daemon saw the workers arrive over TCP.
  EXPECT_NE(d_->log().find("peer=127.0.0.1:"), std::string::npos);
}

}  // namespace
}  // namespace tandem::testing

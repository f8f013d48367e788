// The control channel of a real tandemd against hostile and confused peers
// (issue #12 points 1 and 4; docs/control-protocol.md "Authentication",
// "Framing"): hellos whose fields have the wrong JSON types, over TCP (before
// any token is checked) and over the unix socket; lines nested too deep; bad
// lines after the handshake; a hello over the unix socket from a process that
// has no token; a worker that reconnects while its first connection is still
// open; a worker that is not the controller asking for a phase. After each,
// the same daemon process still answers.
#include "common/control/control_token.h"
#include "tests/daemon/control_line.h"
#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

class ControlHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-ctlhostile");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "0,1", "--grace", "1",
                                                                        "--control-listen", "127.0.0.1:0"});
    d_->Start();
    pid_ = d_->pid();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << d_->log();
    d_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string Tcp() {
    std::ifstream in(dir_ / "control.addr");
    std::string line;
    std::getline(in, line);
    return line;
  }
  std::string Unix() { return "unix:" + (dir_ / "control.sock").string(); }
  std::string Token(const std::string& job, const std::string& task) {
    return control::ControlToken(ReadFile(dir_ / "control.key").substr(0, 64), job, task, 1);
  }
  // The daemon that started is still the one answering.
  void ExpectAlive(const std::string& after) {
    EXPECT_TRUE(ProcessAlive(pid_)) << "tandemd died after " << after;
    auto r = d_->client().Request("GET", "/healthz");
    EXPECT_TRUE(r.ok() && r->status == 200) << "after " << after;
  }
  // A running one-task job (main.0 sleeping); returns its id.
  std::string SleepingJob() {
    const std::string id = d_->Submit(BashJob("sleeper", "exec sleep 120"));
    EXPECT_TRUE(WaitFor([&] {
      const json j = d_->Job(id);
      return j.is_object() && !j["tasks"].empty() && j["tasks"][0].value("state", "") == "running";
    }));
    return id;
  }
  json Hello(const std::string& id, const std::string& token) {
    return {{"type", "hello"}, {"protocol", 1}, {"job_id", id}, {"task_id", id + ".main.0"},
            {"role", "main"}, {"rank", 0}, {"token", token}};
  }
  void Cancel(const std::string& id) {
    ASSERT_TRUE(d_->client().Request("POST", "/v1/jobs/" + id + "/cancel", "").ok());
    EXPECT_EQ(d_->WaitJob(id, std::chrono::seconds(30)), "cancelled");
  }

  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
  pid_t pid_ = -1;
};

TEST_F(ControlHostileTest, MistypedHellosAreRefusedOverBothTransports) {
  const std::string id = SleepingJob();
  const json good = Hello(id, Token(id, id + ".main.0"));
  std::vector<std::pair<std::string, json>> bad;
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"job_id", 7},
                                                 {"task_id", json::array()},
                                                 {"role", json::object()},
                                                 {"rank", "0"},
                                                 {"rank", -1},
                                                 {"rank", 1.5},
                                                 {"token", 12345},
                                                 {"world_size", "two"},
                                                 {"pid", "me"},
                                                 {"devices", "0,1"},
                                                 {"devices", {0, "one"}},
                                                 {"capabilities", {1, 2}},
                                                 {"tags", "weights"},
                                                 {"tags", {{{"name", 1}}}},
                                                 {"tags", {{{"name", "weights"}, {"bytes", -5}}}},
                                                 {"residency", "full"},
                                                 {"residency", {{"tags", {{"weights", "lots"}}}}},
                                                 {"residency", {{"device", {{"index", "0"}}}}},
                                                 {"residency", {{"device", {{"used", -1}}}}}}) {
    json h = good;
    h[field] = value;
    bad.emplace_back(field + "=" + value.dump(), h);
  }
  for (const std::string& where : {Tcp(), Unix()}) {
    for (const auto& [what, hello] : bad) {
      ControlLine l(where);
      ASSERT_TRUE(l.ok()) << where;
      const json e = l.Say(hello);
      EXPECT_EQ(e["type"], "error") << where << " " << what << ": " << e.dump();
      EXPECT_EQ(e["code"], "invalid_argument") << where << " " << what << ": " << e.dump();
      EXPECT_EQ(l.Read()["type"], "eof") << where << " " << what;
      ExpectAlive(where + " hello with " + what);
      if (!ProcessAlive(pid_)) return;
    }
    // Not an object, a protocol of the wrong type, nesting 100,000 deep.
    for (const std::string& raw : {std::string(R"({"type":"hello","protocol":"1","role":"main","rank":0})"),
                                   std::string(R"(["hello"])"),
                                   R"({"type":"hello","protocol":1,"role":"main","rank":0,"tags":)" +
                                       std::string(100000, '[') + std::string(100000, ']') + "}"}) {
      ControlLine l(where);
      const json e = l.Say(json(raw));
      EXPECT_EQ(e["type"], "error") << raw.substr(0, 80) << ": " << e.dump();
      ExpectAlive(where + " " + raw.substr(0, 60));
    }
  }
  Cancel(id);
}

TEST_F(ControlHostileTest, MistypedLinesAfterTheWelcomeAreAnsweredAndNeverFatal) {
  const std::string id = SleepingJob();
  ControlLine l(Unix());
  ASSERT_EQ(l.Say(Hello(id, Token(id, id + ".main.0")))["type"], "welcome");
  for (const char* raw : {R"({"type":"ack","id":1,"command":5})", R"({"type":"ack","id":1,"residency":"x"})",
                                 R"({"type":"ack","id":"one"})", R"({"type":"error","id":2,"code":[],"message":{}})",
                                 R"({"type":"error","id":2,"residency":{"device":{"index":-3}}})",
                                 R"({"type":"request_phase","id":3,"phase":7})", R"({"type":"request_phase","phase":"train"})",
                                 R"({"type":"request_phase","id":3,"phase":"train","version":"v1"})",
                                 R"({"type":"metrics","values":"fast"})", R"({"type":"metrics","step":"s"})",
                                 R"({"type":7})", R"({"type":"hello","protocol":1})"}) {
    const json e = l.Say(json(raw));
    EXPECT_EQ(e["type"], "error") << raw << ": " << e.dump();
    ExpectAlive(raw);
    if (!ProcessAlive(pid_)) return;
  }
  const std::string deep = R"({"type":"metrics","values":{"x":)" + std::string(5000, '[') + std::string(5000, ']') + "}}";
  EXPECT_EQ(l.Say(json(deep))["code"], "malformed");
  EXPECT_EQ(l.Say(json{{"type", "frobnicate"}, {"id", 9}})["code"], "unknown_command") << "the connection is still usable";
  ExpectAlive("deep nesting");
  Cancel(id);
}

// A process of the daemon's own user that is not the task (it has no token)
// is refused over the unix socket, and learns nothing about the job.
TEST_F(ControlHostileTest, UnixHelloWithoutTheLaunchTokenIsRefused) {
  const std::string id = SleepingJob();
  for (const std::string& token : {std::string(), std::string(64, '0'), Token(id, id + ".main.1")}) {
    json h = Hello(id, token);
    if (token.empty()) h.erase("token");
    ControlLine l(Unix());
    const json e = l.Say(h);
    EXPECT_EQ(e["code"], "unauthenticated") << e.dump();
    EXPECT_EQ(e.value("message", "").find(id), std::string::npos) << e.dump();
    EXPECT_EQ(l.Read()["type"], "eof");
  }
  EXPECT_NE(d_->log().find("unauthenticated hello refused transport=unix"), std::string::npos);
  ControlLine ok(Unix());
  EXPECT_EQ(ok.Say(Hello(id, Token(id, id + ".main.0")))["type"], "welcome");
  Cancel(id);
}

// A worker that says hello again while its first connection is still open
// (a reconnect) gets the new connection; the old one is closed.
TEST_F(ControlHostileTest, ReconnectWhileTheFirstConnectionIsOpenReplacesIt) {
  const std::string id = SleepingJob();
  const json hello = Hello(id, Token(id, id + ".main.0"));
  for (const std::string& second : {Unix(), Tcp()}) {
    ControlLine first(Unix());
    ASSERT_EQ(first.Say(hello)["type"], "welcome");
    ControlLine again(second);
    const json w = again.Say(hello);
    EXPECT_EQ(w["type"], "welcome") << w.dump();
    ExpectAlive("a second hello over " + second);
    if (!ProcessAlive(pid_)) return;
    EXPECT_EQ(first.Read()["type"], "eof") << "the replaced connection is closed";
    EXPECT_EQ(again.Say(json{{"type", "frobnicate"}, {"id", 4}})["code"], "unknown_command");
  }
  EXPECT_NE(d_->log().find("reconnected: connection"), std::string::npos);
  Cancel(id);
}

// A Python handoff worker (role rollout) that asks for a phase itself, which
// only the controller may, writes the answer to answer.json, then serves.
constexpr const char* kPhaseAskingWorker = R"(
import json, os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["TANDEM_CONTROL"][len("unix:"):])
send = lambda m: s.sendall((json.dumps(m) + "\n").encode())
held = {"weights": 0}
res = lambda: {"tags": dict(held), "device": {"index": 0, "used": sum(held.values()), "total": 64 << 20, "source": "pool"}}
send({"type": "hello", "protocol": 1, "job_id": os.environ["TANDEM_JOB_ID"], "task_id": os.environ["TANDEM_TASK_ID"],
      "token": os.environ["TANDEM_CONTROL_TOKEN"], "role": os.environ["TANDEM_ROLE"], "rank": int(os.environ["TANDEM_RANK"]),
      "devices": [0], "capabilities": [], "tags": [{"name": "weights", "bytes": 1 << 20, "backup": True}], "residency": res()})
lines = s.makefile("r")
assert json.loads(lines.readline())["type"] == "welcome"
send({"type": "request_phase", "id": 1, "phase": "rollout"})
for line in lines:
    m = json.loads(line)
    if m.get("id") == 1 and m["type"] in ("error", "phase_done"):
        open("answer.json.tmp", "w").write(line)
        os.rename("answer.json.tmp", "answer.json")
    elif m["type"] not in ("error", "phase_done"):
        for t in m.get("tags") or list(held):
            if m["type"] == "release": held[t] = 0
            if m["type"] == "resume": held[t] = 1 << 20
        send({"type": "ack", "id": m["id"], "command": m["type"], "residency": res()})
)";

TEST_F(ControlHostileTest, OnlyTheControllerRoleMayRequestPhases) {
  json spec = ProbeHandoffSpec("notctl", "local", 1);
  spec["roles"]["actor"]["args"] = {"--cpu-capacity", "64MiB", "--start-released", "--tag", "params=1MiB:backup"};
  spec["roles"]["rollout"] = {{"command", {"python3", "-c", kPhaseAskingWorker}}, {"gpus_per_replica", 1},
                              {"colocate_with", "actor"}};
  const std::string id = d_->Submit(spec);
  const fs::path run = d_->Job(id).value("run_dir", "");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(run / "answer.json"); })) << d_->log();
  const json answer = json::parse(ReadFile(run / "answer.json"));
  EXPECT_EQ(answer["type"], "error") << answer.dump();
  EXPECT_EQ(answer["code"], "permission_denied") << answer.dump();
  EXPECT_NE(answer.value("message", "").find("only the controller role (actor)"), std::string::npos) << answer.dump();
  // The API still drives the group.
  auto r = d_->client(60).Request("POST", "/v1/jobs/" + id + "/phase", json{{"phase", "rollout"}}.dump());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
  Cancel(id);
}

}  // namespace
}  // namespace tandem::testing

// tandemd end to end through its HTTP API, with real processes: submit, run,
// placement and environment, restart policy, cancel of a process tree,
// malformed input, and the TCP listener's token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <set>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

class DaemonApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-api");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "4,5,6,7", "--grace", "2"});
    d_->Start();
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string TaskOut(const json& job, const std::string& task) {
    return ReadFile(fs::path(job.value("run_dir", "")) / "tasks" / (task + ".out"));
  }
  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(DaemonApiTest, RunsAColocatedJobWithPlacementAndEnvironmentOrder) {
  json spec = {
      {"name", "coloc"},
      {"backend", {{"kind", "local"}}},
      {"devices", {{"count", 4}}},
      {"env", {{"LAYER", "job"}, {"JOB_ONLY", "j"}}},
      {"roles",
       {{"actor",
         {{"command", {"bash", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES DEV=$TANDEM_DEVICES LAYER=$LAYER JOB_ONLY=$JOB_ONLY "
                                     "ROLE=$TANDEM_ROLE RANK=$TANDEM_RANK WS=$TANDEM_WORLD_SIZE PORTS=$TANDEM_PORTS X=$X"}},
          {"replicas", 2}, {"gpus_per_replica", 2}, {"ports", 2},
          {"env", {{"LAYER", "role"}}},
          {"replica_env", {{{"X", "0"}, {"LAYER", "replica"}}, {{"X", "1"}}}}}},
        {"rollout",
         {{"command", {"bash", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES LAYER=$LAYER"}},
          {"gpus_per_replica", 4}, {"colocate_with", "actor"}}}}}};
  const std::string id = d_->Submit(spec);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(d_->WaitJob(id), "succeeded") << d_->Job(id).dump(2);
  json job = d_->Job(id);
  EXPECT_NE(TaskOut(job, "actor.0").find("CVD=4,5 DEV=0,1 LAYER=replica JOB_ONLY=j ROLE=actor RANK=0 WS=2"), std::string::npos)
      << TaskOut(job, "actor.0");
  EXPECT_NE(TaskOut(job, "actor.1").find("CVD=6,7 DEV=2,3 LAYER=role JOB_ONLY=j ROLE=actor RANK=1 WS=2"), std::string::npos)
      << TaskOut(job, "actor.1");
  EXPECT_NE(TaskOut(job, "actor.1").find("X=1"), std::string::npos);
  EXPECT_NE(TaskOut(job, "rollout.0").find("CVD=4,5,6,7 LAYER=job"), std::string::npos) << TaskOut(job, "rollout.0");
  // Devices are released when the job ends.
  EXPECT_TRUE(job["physical_devices"].empty());
}

TEST_F(DaemonApiTest, QueuesAJobUntilDevicesFree) {
  json a = BashJob("holder", "sleep 1", 1, {{"gpus_per_replica", 4}});
  a["devices"] = {{"count", 4}};
  json b = BashJob("waiter", "echo CVD=$CUDA_VISIBLE_DEVICES", 1, {{"gpus_per_replica", 2}});
  b["devices"] = {{"count", 2}};
  const std::string ida = d_->Submit(a), idb = d_->Submit(b);
  EXPECT_EQ(d_->JobState(idb), "pending");
  EXPECT_EQ(d_->WaitJob(ida), "succeeded");
  EXPECT_EQ(d_->WaitJob(idb), "succeeded");
  EXPECT_NE(TaskOut(d_->Job(idb), "main.0").find("CVD=4,5"), std::string::npos);
  // A job that can never fit is refused at submit.
  json c = BashJob("huge", "true", 1, {{"gpus_per_replica", 8}});
  c["devices"] = {{"count", 8}};
  auto r = d_->client().Request("POST", "/v1/jobs", c.dump());
  ASSERT_TRUE(r.ok());
  EXPECT_GE(r->status, 400);
  EXPECT_LT(r->status, 500);
}

TEST_F(DaemonApiTest, RestartPolicyRetriesThenSucceedsOrFails) {
  const fs::path counter = dir_ / "count";
  const std::string script = "n=$(cat " + counter.string() + " 2>/dev/null || echo 0); echo $((n+1)) > " +
                             counter.string() + "; [ $n -ge 2 ]";
  json ok = BashJob("flaky", script, 1, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 2}, {"backoff_s", 0.05}}}});
  const std::string id = d_->Submit(ok);
  ASSERT_EQ(d_->WaitJob(id), "succeeded") << d_->Job(id).dump(2);
  EXPECT_EQ(d_->Job(id)["tasks"][0].value("restarts", -1), 2);

  fs::remove(counter);
  json bad = BashJob("flaky2", script, 1, {{"restart", {{"policy", "on-failure"}, {"max_restarts", 1}, {"backoff_s", 0.05}}}});
  const std::string id2 = d_->Submit(bad);
  ASSERT_EQ(d_->WaitJob(id2), "failed");
  json job = d_->Job(id2);
  EXPECT_EQ(job["tasks"][0].value("restarts", -1), 1);
  EXPECT_NE(job.value("detail", "").find("exit code 1"), std::string::npos) << job.dump(2);
}

TEST_F(DaemonApiTest, AFailedTaskStopsTheRestOfTheJob) {
  json spec = {{"name", "failfast"}, {"backend", {{"kind", "local"}}},
               {"roles", {{"bad", {{"command", {"bash", "-c", "sleep 0.2; exit 3"}}}},
                          {"long", {{"command", {"sleep", "300"}}}}}}};
  const std::string id = d_->Submit(spec);
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(20)), "failed");
  json job = d_->Job(id);
  EXPECT_NE(job.value("detail", "").find("bad.0"), std::string::npos) << job.dump(2);
  EXPECT_EQ(job["tasks"][1].value("state", ""), "cancelled");
}

TEST_F(DaemonApiTest, CancelKillsTheWholeTreeIncludingADoubleForkedGrandchild) {
  const fs::path pidfile = dir_ / "grandchild.pid";
  // The grandchild leaves the task's session (setsid) and ignores SIGTERM.
  const std::string script = "setsid bash -c 'trap \"\" TERM; echo $$ > " + pidfile.string() +
                             "; exec sleep 300' & trap '' TERM; sleep 300";
  const std::string id = d_->Submit(BashJob("tree", script));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(pidfile) && !ReadFile(pidfile).empty(); }));
  const pid_t grandchild = std::stoi(ReadFile(pidfile));
  ASSERT_TRUE(ProcessAlive(grandchild));
  auto r = d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(d_->WaitJob(id, std::chrono::seconds(30)), "cancelled");
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(grandchild); }, std::chrono::seconds(5)))
      << "grandchild " << grandchild << " survived the cancel";
}

TEST_F(DaemonApiTest, TwoHundredConcurrentTasksGetDistinctPorts) {
  // Every task binds its two ports for real and holds them until all 200 are up.
  const fs::path helper = BinDir().parent_path() / "tests" / "tandem_task_helper";
  const fs::path release = dir_ / "release";
  const std::string id = d_->Submit(BashJob("ports", helper.string() + " hold-ports " + release.string(), 200,
                                            {{"ports", 2}, {"command", {helper.string(), "hold-ports", release.string()}}}));
  ASSERT_FALSE(id.empty());
  json job = d_->Job(id);
  auto ready = [&] {
    for (const auto& t : job["tasks"])
      if (TaskOut(job, t.value("name", "")).find("ready") == std::string::npos) return false;
    return true;
  };
  ASSERT_TRUE(WaitFor(ready, std::chrono::seconds(120))) << "not all 200 tasks bound their ports";
  std::ofstream(release) << "go";
  ASSERT_EQ(d_->WaitJob(id, std::chrono::seconds(120)), "succeeded") << d_->Job(id)["detail"];
  std::set<std::string> seen;
  for (const auto& t : job["tasks"]) {
    std::stringstream out(TaskOut(job, t.value("name", "")));
    std::string word, port;
    int bound = 0;
    while (out >> word) {
      if (word != "bound") continue;
      out >> port;
      ++bound;
      EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
    }
    EXPECT_EQ(bound, 2) << t.dump();
  }
  EXPECT_EQ(seen.size(), 400u);
}

TEST_F(DaemonApiTest, MalformedRequestsAreAnsweredNotFatal) {
  auto c = d_->client();
  auto r = c.Request("POST", "/v1/jobs", "{not json");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->Json()["error"].value("code", ""), "invalid_json");

  r = c.Request("POST", "/v1/jobs", R"({"name":"x","roles":{"a":{"command":["true"],"replicas":"two"}}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("roles.a.replicas"), std::string::npos) << r->body;

  r = c.Request("POST", "/v1/jobs", std::string(2 * 1024 * 1024, ' '));
  ASSERT_TRUE(r.ok() ) << r.status().ToString();
  EXPECT_EQ(r->status, 413);

  r = c.Request("GET", "/v1/jobs/nope");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  r = c.Request("DELETE", "/v1/jobs");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 405);

  // Raw garbage on the socket, then a half-sent request left hanging.
  for (const std::string& garbage : {std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n"), std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n")}) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = (dir_ / "tandemd.sock").string();
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_GT(::write(fd, garbage.data(), garbage.size()), 0);
    ::close(fd);
  }
  r = c.Request("GET", "/healthz");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
}

TEST_F(DaemonApiTest, LogsAndEventsStream) {
  const std::string id = d_->Submit(BashJob("talk", "for i in 1 2 3; do echo line$i; sleep 0.1; done; echo oops >&2"));
  std::string out;
  auto c = d_->client();
  auto st = c.Stream("/v1/jobs/" + id + "/logs?task=main.0&follow=1", [&](std::string_view d) { out.append(d); });
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(out, "line1\nline2\nline3\n");
  std::string err;
  ASSERT_TRUE(c.Stream("/v1/jobs/" + id + "/logs?stream=stderr", [&](std::string_view d) { err.append(d); }).ok());
  EXPECT_EQ(err, "oops\n");
  std::string events;
  ASSERT_TRUE(c.Stream("/v1/jobs/" + id + "/events", [&](std::string_view d) { events.append(d); }).ok());
  EXPECT_NE(events.find("\"type\":\"job_submitted\""), std::string::npos);
  EXPECT_NE(events.find("\"state\":\"running\""), std::string::npos);
  EXPECT_NE(events.find("\"state\":\"succeeded\""), std::string::npos);
  auto m = c.Request("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("tandem_task_launches_total"), std::string::npos);
  EXPECT_NE(m->body.find("tandem_launch_latency_seconds_bucket"), std::string::npos);
  EXPECT_NE(m->body.find("tandem_jobs{state=\"succeeded\"} 1"), std::string::npos) << m->body;
}

TEST(DaemonTcp, RequiresTheBearerToken) {
  const fs::path dir = MakeTempDir("tandem-tcp");
  const fs::path token = dir / "token";
  std::ofstream(token) << "s3cret-token-0123456789\n";
  fs::permissions(token, fs::perms::owner_read | fs::perms::owner_write);
  // Port 0 is not allowed through the flag surface; pick a free one by binding.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(s);
  DaemonProcess d(dir, {"--listen", "127.0.0.1:" + std::to_string(port), "--token-file", token.string()});
  d.Start();
  auto call = [&](const std::string& tok) {
    cli::Client c(cli::Endpoint{"", "127.0.0.1", port, tok});
    auto r = c.Request("GET", "/v1/jobs");
    return r.ok() ? r->status : -1;
  };
  EXPECT_EQ(call(""), 401);
  EXPECT_EQ(call("wrong-token-0123456789"), 401);
  EXPECT_EQ(call("s3cret-token-0123456789"), 200);
  d.Stop();
  // A non-loopback address is refused without --allow-remote.
  fs::create_directories(dir / "r");
  // Without the service tests' Redis settings (they would turn on the redis backend).
  const std::string cmd = "env -u TANDEM_REDIS_URL " + (BinDir() / "tandemd").string() + " --state-dir " + (dir / "r").string() +
                          " --listen 0.0.0.0:" + std::to_string(port) + " --token-file " + token.string() +
                          " 2>" + (dir / "r.log").string();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(ReadFile(dir / "r.log").find("allow-remote"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::testing

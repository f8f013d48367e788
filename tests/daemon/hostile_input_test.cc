// Issue #12 point 1, the HTTP side: no request and no file a task writes into
// its run dir crashes or hangs a real tandemd. Each case once aborted it:
// invalid UTF-8 in a path (the JSON error embedding it threw), a body nested
// 200,000 levels deep (the stack), lines a task wrote into its events.jsonl
// (a reader of the job's events threw on them).
#include "tests/daemon/daemon_process.h"
#include "tests/daemon/raw_http.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tandem-hostile");
    d_ = std::make_unique<DaemonProcess>(dir_, std::vector<std::string>{"--gpus", "none", "--grace", "1"});
    d_->Start();
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string Socket() const { return (dir_ / "tandemd.sock").string(); }
  void ExpectAlive() {
    ASSERT_TRUE(ProcessAlive(d_->pid())) << d_->log();
    auto r = d_->client(5).Request("GET", "/healthz");
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << d_->log();
    EXPECT_EQ(r->status, 200);
  }
  fs::path dir_;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(HostileInputTest, InvalidUtf8InThePathIsAnsweredNotFatal) {
  for (const std::string target : {"/v1/%ff%fe%c3", "/v1/jobs/%ff%c3%28", "/%80", "/v1/jobs/%c3/events"}) {
    RawResponse r = RawRequest(Socket(), "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(r.status, 404) << target << ": " << r.head;
    // The answer is valid JSON (the bad bytes replaced), naming the route.
    json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    EXPECT_EQ(body["error"]["code"], "not_found");
    RawResponse m = RawRequest(Socket(), "PUT " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    EXPECT_TRUE(m.status == 404 || m.status == 405) << m.head;
  }
  ExpectAlive();
}

TEST_F(HostileInputTest, DeepJsonIsRefusedNamingTheLimit) {
  constexpr int kDepth = 200000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  const std::string spec =
      R"({"name":"deep","backend":{"kind":"local"},"roles":{"main":{"command":["true"]}},"x":)" + deep + "}";
  auto r = d_->client().Request("POST", "/v1/jobs", spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << d_->log();
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("nested deeper than 64 levels"), std::string::npos) << r->body;
  // A phase request's body is bounded the same way.
  const std::string id = d_->Submit(BashJob("alive", "sleep 30"));
  auto p = d_->client().Request("POST", "/v1/jobs/" + id + "/phase", R"({"phase":"train","x":)" + deep + "}");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->status, 400) << p->body;
  ExpectAlive();
  (void)d_->client().Request("POST", "/v1/jobs/" + id + "/cancel");
}

TEST_F(HostileInputTest, LinesATaskWritesIntoEventsJsonlAreSkipped) {
  const fs::path run = dir_ / "run-hostile";
  // What a task can append to its own events.jsonl: wrong types, non-objects,
  // invalid UTF-8, deep nesting, a huge line, a torn last line.
  const std::string script =
      "f=" + run.string() + "/events.jsonl; "
      "printf '%s\\n' '{\"seq\":\"x\",\"type\":\"job_state\"}' '{\"seq\":1,\"type\":7}' '[1,2]' '\"text\"' "
      "'{\"seq\":-3}' '{\"type\":\"a\\nb\",\"seq\":2}' '{\"seq\":1.5}' '{\"seq\":9,\"type\":\"x\\r\"}' >> $f; "
      "printf '{\"seq\":4,\"type\":\"\\xff\\xfe\"}\\n' >> $f; "
      "head -c 300000 /dev/zero | tr '\\0' '[' >> $f; echo >> $f; "
      "head -c 2000000 /dev/zero | tr '\\0' 'a' >> $f; echo >> $f; "
      "printf '{\"seq\":5,\"type\":\"task_note\",\"job\":\"x\"}\\n{\"seq\":' >> $f";
  json spec = BashJob("hostile", script);
  spec["run_dir"] = run.string();
  const std::string id = d_->Submit(spec);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(d_->WaitJob(id), "succeeded") << d_->Job(id).dump(2);
  auto r = d_->client().Request("GET", "/v1/jobs/" + id + "/events?follow=0");
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << d_->log();
  EXPECT_EQ(r->status, 200);
  // The daemon's own events are there, the well-formed line a task wrote too,
  // and the rest is skipped and said so in an SSE comment.
  EXPECT_NE(r->body.find("event: job_state"), std::string::npos) << r->body.substr(0, 2000);
  EXPECT_NE(r->body.find("event: task_note"), std::string::npos) << r->body.substr(0, 2000);
  EXPECT_NE(r->body.find(": skipped "), std::string::npos) << r->body.substr(0, 2000);
  EXPECT_EQ(r->body.find("event: 7"), std::string::npos);
  // Following a running job's events reads the same file.
  ExpectAlive();
}

}  // namespace
}  // namespace tandem::testing

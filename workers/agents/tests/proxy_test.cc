// The proxy on a loopback port over scripted replicas (fake_rollout.h),
// driven with plain HTTP as an agent would: a two-turn session and its
// export, streaming, balancing and stickiness, a replica down or answering
// 503, pause and resume, a replica that never answers, hostile bodies, a
// client that leaves, a stop with calls in flight.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/agents/proxy_role.h"
#include "workers/agents/proxy_server.h"
#include "workers/agents/tests/fake_rollout.h"
#include "workers/agents/tool_chat_template.h"
#include "workers/data/byte_tokenizer.h"
#include "workers/agents/tests/proxy_client.h"
#include "workers/inference/tests/http_test_client.h"

namespace tandem::agents {
namespace {

using json = nlohmann::json;
using testing::FakeRollout;
namespace http = inference::testing;
using namespace std::chrono_literals;

data::Tokenizer ByteTokenizer() {
  auto files = data::ByteTokenizerFiles();
  return *data::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
}

http::HttpReply Post(int port, const std::string& path, const std::string& body, const std::string& session = "",
                     std::chrono::milliseconds timeout = 20s) {
  return testing::PostToProxy(port, path, body, session, timeout);
}

const std::string kHi = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})";

class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-proxy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    tok_.emplace(ByteTokenizer());
    reply_ = *tok_->Encode("Yo");
    reply_.push_back(*tok_->TokenToId(kTurnEnd));
  }
  void TearDown() override {
    proxy_.reset();
    rollouts_.clear();
    std::filesystem::remove_all(dir_);
  }
  // `n` replicas, each with its port file; the proxy over them.
  void Start(size_t n, ProxyOptions o = {}) {
    for (size_t i = 0; i < n; ++i) {
      rollouts_.push_back(std::make_unique<FakeRollout>(reply_));
      const std::string file = dir_ + "/rollout." + std::to_string(i) + ".port";
      rollouts_.back()->WritePortFile(file);
      o.replicas.port_files.push_back(file);
    }
    proxy_ = std::make_unique<Proxy>(*tok_, o);
    const Status s = proxy_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  int port() const { return proxy_->port(); }

  std::string dir_;
  std::optional<data::Tokenizer> tok_;
  std::vector<int32_t> reply_;
  std::vector<std::unique_ptr<FakeRollout>> rollouts_;
  std::unique_ptr<Proxy> proxy_;
};

TEST_F(ProxyTest, ATwoTurnSessionOverHttpKeepsTheExactTokens) {
  Start(1);
  const http::HttpReply first = Post(port(), "/v1/chat/completions", kHi, "ep-1");
  ASSERT_EQ(first.status, 200) << first.body;
  const json a = json::parse(first.body);
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["choices"][0]["message"]["content"], "Yo");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(a["model"], "tandem");
  EXPECT_EQ(a["usage"]["completion_tokens"], reply_.size());

  const std::string second_body = R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "More"}], "session_id": "ep-1"})";
  const http::HttpReply second = Post(port(), "/v1/chat/completions", second_body);
  ASSERT_EQ(second.status, 200) << second.body;

  const http::HttpReply exported = http::Request(port(), "GET", "/v1/sessions/ep-1");
  ASSERT_EQ(exported.status, 200) << exported.body;
  const json e = json::parse(exported.body);
  ASSERT_EQ(e["turns"].size(), 2u);
  const auto ids0 = e["turns"][0]["ids"].get<std::vector<int32_t>>();
  const auto ids1 = e["turns"][1]["ids"].get<std::vector<int32_t>>();
  ASSERT_LT(ids0.size(), ids1.size());
  EXPECT_TRUE(std::equal(ids0.begin(), ids0.end(), ids1.begin())) << "turn 1 starts with turn 0's prompt + output";
  EXPECT_EQ(e["turns"][1]["parent"], 0);
  // What the rollout was sent is what was recorded.
  const auto bodies = rollouts_[0]->bodies();
  ASSERT_EQ(bodies.size(), 2u);
  const auto sent1 = bodies[1]["input_ids"].get<std::vector<int32_t>>();
  EXPECT_TRUE(std::equal(sent1.begin(), sent1.end(), ids1.begin()));
  EXPECT_EQ(e["turns"][1]["weight_versions"].back(), 5);

  EXPECT_EQ(http::Request(port(), "DELETE", "/v1/sessions/ep-1").status, 200);
  EXPECT_EQ(proxy_->open_sessions(), 0u);
  EXPECT_EQ(http::Request(port(), "GET", "/v1/sessions/ep-1").status, 404);
  EXPECT_EQ(http::Request(port(), "DELETE", "/v1/sessions/ep-1").status, 404);
}

// The content, finish reasons and whether usage came, from an SSE body.
struct Streamed {
  std::map<int, std::string> content;
  std::map<int, std::string> finish;
  bool usage = false;
  bool done = false;
  size_t chunks = 0;
};
Streamed ReadStream(const std::string& body, const std::string& object) {
  Streamed out;
  const std::vector<std::string> events = http::SseData(body);
  for (const std::string& e : events) {
    if (e == "[DONE]") {
      out.done = true;
      continue;
    }
    const json c = json::parse(e);
    EXPECT_EQ(c["object"], object) << e;
    if (c["choices"].empty()) {
      out.usage = c.contains("usage");
      continue;
    }
    ++out.chunks;
    const json& ch = c["choices"][0];
    const int index = ch["index"];
    if (ch.contains("delta") && ch["delta"].contains("content")) out.content[index] += ch["delta"]["content"].get<std::string>();
    if (ch.contains("text")) out.content[index] += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null()) out.finish[index] = ch["finish_reason"];
  }
  EXPECT_EQ(events.back(), "[DONE]");
  return out;
}

TEST_F(ProxyTest, StreamsAsTheRolloutGenerates) {
  Start(1);
  const http::HttpReply r = Post(port(), "/v1/chat/completions",
                                 R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true, "n": 2,
                                     "logprobs": true, "stream_options": {"include_usage": true}})",
                                 "streamed");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  const Streamed s = ReadStream(r.body, "chat.completion.chunk");
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.usage);
  for (int i : {0, 1}) {
    EXPECT_EQ(s.content.at(i), "Yo");
    EXPECT_EQ(s.finish.at(i), "stop");
  }
  // One chunk per token and sample at least (role + "Y" + "o" + end + finish).
  EXPECT_GE(s.chunks, 2 * reply_.size());
  ASSERT_EQ(rollouts_[0]->bodies().size(), 1u);
  EXPECT_EQ(rollouts_[0]->bodies()[0]["stream"], true) << "forwarded";
  // Recorded like any call.
  const auto e = proxy_->ExportSession("streamed");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->turns.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(e->turns[0].ids.end() - static_cast<std::ptrdiff_t>(reply_.size()), e->turns[0].ids.end()),
            reply_);

  const http::HttpReply comp = Post(port(), "/v1/completions", R"({"prompt": "ab", "stream": true})");
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_EQ(ReadStream(comp.body, "text_completion").content.at(0), "Yo");
}

TEST_F(ProxyTest, StreamsWithToolsOrStopStringsAreGeneratedWholeFirst) {
  Start(1);
  const http::HttpReply r = Post(port(), "/v1/chat/completions",
                                 R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true, "stop": ["Z"],
                                     "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Streamed s = ReadStream(r.body, "chat.completion.chunk");
  EXPECT_EQ(s.content.at(0), "Yo");
  EXPECT_EQ(s.finish.at(0), "stop");
  EXPECT_TRUE(s.usage);
  const http::HttpReply t = Post(port(), "/v1/chat/completions",
                                 R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true,
                                     "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(ReadStream(t.body, "chat.completion.chunk").content.at(0), "Yo");
  for (const json& b : rollouts_[0]->bodies()) EXPECT_FALSE(b.contains("stream")) << "not forwarded: " << b.dump();

  const http::HttpReply comp = Post(port(), "/v1/completions", R"({"prompt": "ab", "stream": true, "stop": "Q"})");
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_EQ(ReadStream(comp.body, "text_completion").content.at(0), "Yo");
}

TEST_F(ProxyTest, BalancesByOutstandingCallsAndKeepsASessionOnItsReplica) {
  Start(2);
  for (auto& r : rollouts_) r->set_delay(300ms);
  std::vector<std::future<int>> calls;
  for (int i = 0; i < 8; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", kHi).status; }));
  for (auto& c : calls) EXPECT_EQ(c.get(), 200);
  EXPECT_GE(rollouts_[0]->calls(), 2);
  EXPECT_GE(rollouts_[1]->calls(), 2);

  const int before0 = rollouts_[0]->calls(), before1 = rollouts_[1]->calls();
  for (auto& r : rollouts_) r->set_delay(0ms);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Post(port(), "/v1/chat/completions", kHi, "sticky").status, 200);
  const int got0 = rollouts_[0]->calls() - before0, got1 = rollouts_[1]->calls() - before1;
  EXPECT_TRUE((got0 == 6 && got1 == 0) || (got0 == 0 && got1 == 6)) << got0 << " " << got1;
}

TEST_F(ProxyTest, ARefusingOrBusyReplicaIsLeftForAnother) {
  ProxyOptions o;
  o.request_timeout = 1500ms;
  Start(2, o);
  // Replica 0 answers 503 (as a paused or full rollout does).
  rollouts_[0]->set_mode(FakeRollout::Mode::k503);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi).status, 200);
  EXPECT_EQ(rollouts_[1]->calls(), 4);
  EXPECT_GE(proxy_->calls_retried(), 1u);
  // Replica 0 gone (its port refuses): still served by replica 1.
  rollouts_[0]->Stop();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi, "s").status, 200);
  EXPECT_EQ(rollouts_[1]->calls(), 8);
  // Both gone: asked again until the call's deadline, then 503 naming the last error.
  rollouts_[1]->Stop();
  const http::HttpReply r = Post(port(), "/v1/chat/completions", kHi);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("last: replica"), std::string::npos) << r.body;
}

TEST_F(ProxyTest, NoReplicaUpIsA503AfterTheDeadline) {
  ProxyOptions o;
  o.request_timeout = 600ms;
  o.replicas.port_files = {dir_ + "/never.port"};
  proxy_ = std::make_unique<Proxy>(*tok_, o);
  ASSERT_TRUE(proxy_->Start().ok());
  EXPECT_EQ(http::Request(port(), "GET", "/health").status, 503);
  const auto t0 = std::chrono::steady_clock::now();
  const http::HttpReply r = Post(port(), "/v1/chat/completions", kHi);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("retry-after"), "1");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  // A replica that comes up later (writes its port file) is found.
  rollouts_.push_back(std::make_unique<FakeRollout>(reply_));
  rollouts_.back()->WritePortFile(dir_ + "/never.port");
  std::this_thread::sleep_for(600ms);  // past down_for
  EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi).status, 200);
}

TEST_F(ProxyTest, PausedCallsWaitAndGoOnAtResume) {
  ProxyOptions o;
  o.pause_wait = 800ms;
  Start(1, o);
  proxy_->Pause();
  auto waiting = std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", kHi); });
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout) << "a call waits while paused";
  EXPECT_EQ(proxy_->calls_paused(), 1u);
  EXPECT_EQ(rollouts_[0]->calls(), 0);
  proxy_->Resume();
  const http::HttpReply r = waiting.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(proxy_->calls_paused(), 0u);

  // Over pause_wait: 503 with Retry-After. Through the HTTP endpoints this time.
  ASSERT_EQ(Post(port(), "/pause_generation", "").status, 200);
  EXPECT_TRUE(proxy_->paused());
  const auto t0 = std::chrono::steady_clock::now();
  const http::HttpReply late = Post(port(), "/v1/chat/completions", kHi);
  EXPECT_EQ(late.status, 503) << late.body;
  EXPECT_EQ(late.header("retry-after"), "1");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 700ms);
  ASSERT_EQ(Post(port(), "/continue_generation", "").status, 200);
  EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi).status, 200);
}

TEST_F(ProxyTest, AReplicaThatNeverAnswersIsATimeout) {
  ProxyOptions o;
  o.request_timeout = 1s;
  Start(1, o);
  rollouts_[0]->set_mode(FakeRollout::Mode::kHang);
  const auto t0 = std::chrono::steady_clock::now();
  const http::HttpReply r = Post(port(), "/v1/chat/completions", kHi);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "timeout");
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 5s);
  EXPECT_EQ(proxy_->calls_in_flight(), 0u);
}

TEST_F(ProxyTest, HostileRequestsAre4xxAndTheProxyGoesOn) {
  Start(1);
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"/v1/chat/completions", ""},
      {"/v1/chat/completions", "{"},
      {"/v1/chat/completions", "\xff\xfe"},
      {"/v1/chat/completions", std::string(5000, '[')},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "\ud800"}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": -1})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"},
      {"/v1/completions", R"({"prompt": [999999]})"},
      {"/v1/completions", R"({"prompt": null})"},
  };
  for (const auto& [path, body] : bodies) {
    SCOPED_TRACE(body.substr(0, 80));
    const http::HttpReply r = Post(port(), path, body);
    EXPECT_EQ(r.status, 400) << r.body;
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object()) << r.body;
    EXPECT_TRUE(e["error"].contains("message") && e["error"].contains("type") && e["error"].contains("param") &&
                e["error"].contains("code"))
        << r.body;
  }
  EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi, "bad id!").status, 400);
  EXPECT_EQ(http::Request(port(), "GET", "/v1/chat/completions").status, 405);
  EXPECT_EQ(http::Request(port(), "GET", "/nope").status, 404);
  EXPECT_EQ(http::Request(port(), "GET", "/v1/sessions/a%20b").status, 400);
  EXPECT_EQ(rollouts_[0]->calls(), 0) << "nothing bad reached the rollout";
  const http::HttpReply models = http::Request(port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tandem");
  EXPECT_EQ(http::Request(port(), "GET", "/health").status, 200);
  EXPECT_EQ(Post(port(), "/v1/chat/completions", kHi).status, 200);
  const http::HttpReply metrics = http::Request(port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("\ntandem_proxy_calls_in_flight 0\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("\ntandem_proxy_replicas_up 1\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("tandem_proxy_replica_outstanding_calls{replica=\"0\"} 0"), std::string::npos);
}

TEST_F(ProxyTest, AClientThatLeavesHasItsUpstreamCallClosed) {
  Start(1);
  rollouts_[0]->set_mode(FakeRollout::Mode::kHang);
  const int fd = http::ConnectTcp(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(http::SendAll(fd, http::RequestText("POST", "/v1/chat/completions", kHi, "X-Session-Id: gone\r\n")));
  for (int i = 0; i < 100 && rollouts_[0]->calls() == 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(rollouts_[0]->calls(), 1);
  ::close(fd);
  for (int i = 0; i < 100 && rollouts_[0]->closed_early() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rollouts_[0]->closed_early(), 1) << "the rollout saw its caller go (and aborts the request)";
  EXPECT_EQ(proxy_->calls_in_flight(), 0u);
  EXPECT_TRUE(proxy_->ExportSession("gone")->turns.empty());
}

TEST_F(ProxyTest, StopsPromptlyWithCallsInFlightAndWaiting) {
  Start(1);
  rollouts_[0]->set_mode(FakeRollout::Mode::kHang);
  std::vector<std::future<http::HttpReply>> calls;
  for (int i = 0; i < 4; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", kHi); }));
  for (int i = 0; i < 100 && rollouts_[0]->calls() < 4; ++i) std::this_thread::sleep_for(20ms);
  proxy_->Pause();
  calls.push_back(std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", kHi); }));
  for (int i = 0; i < 100 && proxy_->calls_paused() < 1; ++i) std::this_thread::sleep_for(20ms);
  const auto t0 = std::chrono::steady_clock::now();
  proxy_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  for (auto& c : calls) EXPECT_EQ(c.wait_for(5s), std::future_status::ready);
}

TEST_F(ProxyTest, TheRoleFindsItsReplicasByRankAndWritesItsPortFile) {
  auto files = ReplicaPortFiles("/run/rollout.{rank}.port", 3);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(*files, (std::vector<std::string>{"/run/rollout.0.port", "/run/rollout.1.port", "/run/rollout.2.port"}));
  EXPECT_FALSE(ReplicaPortFiles("/run/rollout.port", 2).ok());
  EXPECT_FALSE(ReplicaPortFiles("/run/rollout.{rank}.port", 0).ok());

  for (size_t i = 0; i < 2; ++i) {
    rollouts_.push_back(std::make_unique<FakeRollout>(reply_));
    rollouts_.back()->WritePortFile(dir_ + "/rollout." + std::to_string(i) + ".port");
  }
  ASSERT_TRUE(data::WriteByteTokenizer(dir_ + "/model").ok());
  ProxyRoleOptions o;
  o.rollout_port_file = dir_ + "/rollout.{rank}.port";
  o.replicas = 2;
  o.tokenizer_dir = dir_ + "/model";
  o.port_file = dir_ + "/proxy.port";
  EXPECT_EQ(StartProxyRole(ProxyRoleOptions{}).status().code(), StatusCode::kInvalidArgument);
  ProxyRoleOptions no_tokenizer = o;
  no_tokenizer.tokenizer_dir = dir_ + "/nothing";
  EXPECT_EQ(StartProxyRole(no_tokenizer).status().code(), StatusCode::kInvalidArgument);
  auto role = StartProxyRole(o);
  ASSERT_TRUE(role.ok()) << role.status().ToString();
  std::string seen;
  auto written = roles::ReadPortFile(dir_ + "/proxy.port", "", &seen);
  ASSERT_TRUE(written.ok() && written->has_value());
  EXPECT_EQ(**written, (*role)->port());
  EXPECT_EQ(http::Request((*role)->port(), "GET", "/health").status, 200);
  EXPECT_EQ(Post((*role)->port(), "/v1/chat/completions", kHi).status, 200);
}

}  // namespace
}  // namespace tandem::agents

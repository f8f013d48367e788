// The proxy in front of two real `tandem-worker rollout` processes serving a
// tiny model that `tandem-worker sft` made (its byte-level tokenizer with
// ChatML): a two-turn chat session through plain HTTP whose second call's
// ids start with the first call's prompt + output ids exactly; pause, a
// call waits, resume; a replica killed with SIGKILL while calls run (they
// finish on the other); a replica that never answers (stopped with SIGSTOP)
// is a timeout; hostile bodies are 400s. The binary comes from
// TANDEM_WORKER_BIN (CMake sets it where tandem-worker is built); without
// it the test is skipped. Processes are started, stopped and killed by pid.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/agents/proxy_server.h"
#include "workers/agents/tests/proxy_client.h"
#include "workers/inference/tests/http_test_client.h"

extern char** environ;

namespace tandem::agents {
namespace {

using json = nlohmann::json;
namespace http = inference::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A child process, started and ended by pid.
struct Child {
  pid_t pid = -1;
  int Wait() {
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid) pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Signal(int sig) const {
    if (pid > 0) kill(pid, sig);
  }
  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    Wait();
  }
  ~Child() { Kill(); }
};

bool Spawn(Child* c, std::vector<std::string> argv, const std::string& log) {
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int rc = posix_spawn(&c->pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

http::HttpReply Post(int port, const std::string& path, const std::string& body, const std::string& session = "",
                     std::chrono::milliseconds timeout = 120s) {
  return testing::PostToProxy(port, path, body, session, timeout);
}

class ProxyRollout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* bin = std::getenv("TANDEM_WORKER_BIN");
    if (bin == nullptr || *bin == '\0') return;
    bin_ = bin;
    ASSERT_TRUE(fs::exists(bin_)) << "TANDEM_WORKER_BIN=" << bin_ << " does not exist (build tandem-worker)";
    char tmpl[] = "/tmp/tandem-proxy-rollout-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A tiny model, one step of sft from scratch (its tokenizer: byte-level, ChatML).
    Child sft;
    ASSERT_TRUE(Spawn(&sft,
                      {bin_, "sft", "--preset", "tiny", "--max-steps", "1", "--batch-size", "2", "--eval-problems", "1",
                       "--threads", "1", "--out", dir_ + "/model"},
                      dir_ + "/sft.log"));
    ASSERT_EQ(sft.Wait(), 0) << ReadAll(dir_ + "/sft.log");
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void SetUp() override {
    if (bin_.empty()) GTEST_SKIP() << "set TANDEM_WORKER_BIN to a built tandem-worker to run this test";
    ASSERT_TRUE(fs::exists(dir_ + "/model/config.json")) << "no model: the suite's sft run failed";
    auto tok = data::Tokenizer::FromDirectory(dir_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tok_.emplace(std::move(*tok));
  }

  // Starts rollout `i`, writing dir/rollout.i.port; waits until it listens.
  void StartRollout(size_t i) {
    const std::string file = PortFile(i);
    fs::remove(file);
    if (rollouts_.size() <= i) rollouts_.resize(i + 1);
    rollouts_[i] = std::make_unique<Child>();
    const std::string log = dir_ + "/rollout." + std::to_string(i) + ".log";
    ASSERT_TRUE(Spawn(rollouts_[i].get(),
                      {bin_, "rollout", "--model", dir_ + "/model", "--kv-blocks", "256", "--threads", "1",
                       "--port-file", file},
                      log));
    for (int k = 0; k < 1200 && !fs::exists(file); ++k) std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(fs::exists(file)) << ReadAll(log);
  }
  std::string PortFile(size_t i) const { return dir_ + "/rollout." + std::to_string(i) + ".port"; }

  void StartProxy(std::vector<size_t> replicas, ProxyOptions o = {}) {
    for (const size_t i : replicas) o.replicas.port_files.push_back(PortFile(i));
    proxy_ = std::make_unique<Proxy>(*tok_, o);
    const Status s = proxy_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  int port() const { return proxy_->port(); }

  void TearDown() override {
    proxy_.reset();
    for (auto& r : rollouts_)
      if (r) r->Kill();
  }

  static inline std::string bin_, dir_;
  std::optional<data::Tokenizer> tok_;
  std::vector<std::unique_ptr<Child>> rollouts_;
  std::unique_ptr<Proxy> proxy_;
};

TEST_F(ProxyRollout, ATwoTurnSessionIsTheExactTokensTheModelProduced) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartRollout(1));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0, 1}));
  const http::HttpReply first = Post(port(), "/v1/chat/completions",
                                     R"({"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hi there"}],
                                         "max_tokens": 12, "temperature": 1.0, "seed": 11, "logprobs": true})",
                                     "episode-1");
  ASSERT_EQ(first.status, 200) << first.body;
  const json a = json::parse(first.body);
  const json& msg = a["choices"][0]["message"];
  ASSERT_TRUE(msg["content"].is_string()) << first.body;
  EXPECT_EQ(a["model"], "tiny");
  EXPECT_LE(a["usage"]["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(a["choices"][0]["logprobs"]["content"].size(), a["usage"]["completion_tokens"].get<size_t>());

  // The agent sends the reply back as it got it, and one more user turn.
  json second = {{"model", "tiny"},
                 {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                           {{"role", "user"}, {"content", "Hi there"}},
                                           {{"role", "assistant"}, {"content", msg["content"]}},
                                           {{"role", "user"}, {"content", "And then?"}}})},
                 {"max_tokens", 12},
                 {"session_id", "episode-1"}};
  const http::HttpReply b = Post(port(), "/v1/chat/completions", second.dump());
  ASSERT_EQ(b.status, 200) << b.body;

  const http::HttpReply exported = http::Request(port(), "GET", "/v1/sessions/episode-1");
  ASSERT_EQ(exported.status, 200) << exported.body;
  const json e = json::parse(exported.body);
  ASSERT_EQ(e["turns"].size(), 2u) << exported.body;
  const json& t0 = e["turns"][0];
  const json& t1 = e["turns"][1];
  const auto ids0 = t0["ids"].get<std::vector<int32_t>>();
  const auto ids1 = t1["ids"].get<std::vector<int32_t>>();
  const size_t prompt0 = t0["prompt_tokens"];
  // The first prompt is the template's text, tokenised.
  auto want_prompt = tok_->Encode(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_TRUE(want_prompt.ok());
  EXPECT_EQ(std::vector<int32_t>(ids0.begin(), ids0.begin() + static_cast<std::ptrdiff_t>(prompt0)), *want_prompt);
  // The second call's ids start with the first call's prompt + output, exactly.
  ASSERT_LT(ids0.size(), ids1.size());
  EXPECT_TRUE(std::equal(ids0.begin(), ids0.end(), ids1.begin()));
  EXPECT_EQ(t1["parent"], 0);
  // The mask is 1 exactly on what the model generated, with finite log-probs <= 0.
  const auto mask1 = t1["mask"].get<std::vector<int>>();
  const auto lps1 = t1["logprobs"].get<std::vector<double>>();
  const size_t prompt1 = t1["prompt_tokens"];
  for (size_t i = 0; i < ids1.size(); ++i) {
    const bool generated = (i >= prompt0 && i < ids0.size()) || i >= prompt1;
    EXPECT_EQ(mask1[i], generated ? 1 : 0) << i;
    if (generated) {
      EXPECT_TRUE(std::isfinite(lps1[i]) && lps1[i] <= 0) << i;
    }
  }
  EXPECT_EQ(t0["weight_version"], t1["weight_version"]);
  EXPECT_EQ(http::Request(port(), "DELETE", "/v1/sessions/episode-1").status, 200);
  EXPECT_EQ(proxy_->open_sessions(), 0u);
}

// The content of a chat stream (all choices' deltas, in order) and its last event.
std::pair<std::string, std::string> StreamContent(const std::string& body) {
  std::string content, last;
  for (const std::string& e : http::SseData(body)) {
    last = e;
    const json c = json::parse(e, nullptr, false);
    if (!c.is_object() || !c.contains("choices") || c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  return {content, last};
}

TEST_F(ProxyRollout, AStreamIsForwardedAsTheRolloutGenerates) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0}));
  const std::string messages = R"("messages": [{"role": "user", "content": "Count: 1 2 3"}], "max_tokens": 24, "temperature": 0)";
  const http::HttpReply whole = Post(port(), "/v1/chat/completions", "{" + messages + "}");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const http::HttpReply streamed =
      Post(port(), "/v1/chat/completions", "{" + messages + R"(, "stream": true})", "streamed");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const auto [content, last] = StreamContent(streamed.body);
  EXPECT_EQ(last, "[DONE]");
  // Greedy: the same text whether streamed or not.
  EXPECT_EQ(content, json::parse(whole.body)["choices"][0]["message"]["content"].get<std::string>());
  const auto e = proxy_->ExportSession("streamed");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->turns.size(), 1u);
  EXPECT_EQ(e->turns[0].ids.size() - e->turns[0].prompt_tokens,
            json::parse(whole.body)["usage"]["completion_tokens"].get<size_t>());
}

TEST_F(ProxyRollout, AReplicaKilledMidStreamEndsTheStreamWithAnError) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0}));
  const int fd = http::ConnectTcp(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(http::SendAll(
      fd, http::RequestText("POST", "/v1/chat/completions",
                            R"({"messages": [{"role": "user", "content": "Go on."}], "n": 4, "max_tokens": 1000,
                                "temperature": 1.0, "stream": true})")));
  const std::string head = http::ReadUntil(fd, "data: ", 60s);
  ASSERT_NE(head.find("data: "), std::string::npos) << head;
  rollouts_[0]->Signal(SIGKILL);
  rollouts_[0]->Wait();
  const std::string rest = head + http::ReadUntilClosed(fd, 30s);
  ::close(fd);
  const http::HttpReply r = http::ParseReply(rest);
  EXPECT_EQ(r.status, 200);
  const auto [content, last] = StreamContent(r.body);
  EXPECT_NE(last.find("\"error\""), std::string::npos) << "the stream ends with an error event: " << last;
  EXPECT_EQ(proxy_->calls_in_flight(), 0u);
}

TEST_F(ProxyRollout, CallsFinishOnTheOtherReplicaWhenOneIsKilled) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartRollout(1));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0, 1}));
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 200, "temperature": 1.0})";
  std::vector<std::future<http::HttpReply>> calls;
  for (int i = 0; i < 12; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", body); }));
  std::this_thread::sleep_for(300ms);
  rollouts_[0]->Signal(SIGKILL);
  rollouts_[0]->Wait();
  for (auto& c : calls) {
    const http::HttpReply r = c.get();
    EXPECT_EQ(r.status, 200) << r.body;
  }
  // Those running on replica 0 when it died were sent again (200 tokens a
  // call take far longer than the 300 ms before the kill).
  EXPECT_GE(proxy_->calls_retried(), 1u);
  EXPECT_EQ(proxy_->calls_in_flight(), 0u);
  // The replica comes back (a new process, a new port file): served again.
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  std::this_thread::sleep_for(600ms);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 4})").status, 200);
}

TEST_F(ProxyRollout, PauseAndStopAreImmediateDuringALargeRollout) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartRollout(1));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0, 1}));
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Go on."}], "n": 4, "max_tokens": 300, "temperature": 1.0})";
  std::vector<std::future<http::HttpReply>> calls;
  for (int i = 0; i < 16; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return Post(port(), "/v1/chat/completions", body); }));
  // Until all 16 are at the replicas (prepared, sent), read from /metrics.
  auto at_replicas = [&] {
    const std::string m = http::Request(port(), "GET", "/metrics").body;
    int sum = 0;
    for (size_t at = m.find("\ntandem_proxy_replica_outstanding_calls{"); at != std::string::npos;
         at = m.find("\ntandem_proxy_replica_outstanding_calls{", at + 1))
      sum += std::atoi(m.c_str() + m.find("} ", at) + 2);
    return sum;
  };
  for (int i = 0; i < 400 && at_replicas() < 16; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(at_replicas(), 16);
  auto t0 = std::chrono::steady_clock::now();
  proxy_->Pause();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10ms);
  auto held = std::async(std::launch::async, [&] { return Post(port(), "/v1/completions", R"({"prompt": "a"})"); });
  for (int i = 0; i < 200 && proxy_->calls_paused() < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(proxy_->calls_paused(), 1u);
  t0 = std::chrono::steady_clock::now();
  proxy_->Stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 1s) << "Stop() with 64 samples in flight and a call waiting";
  std::cerr << "Stop() with 16 calls (64 samples) in flight: "
            << std::chrono::duration_cast<std::chrono::microseconds>(took).count() << " us\n";
  for (auto& c : calls) EXPECT_EQ(c.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(held.wait_for(10s), std::future_status::ready);
}

TEST_F(ProxyRollout, PauseHoldsCallsUntilResume) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0}));
  proxy_->Pause();
  auto waiting = std::async(std::launch::async, [&] {
    return Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 4})");
  });
  EXPECT_EQ(waiting.wait_for(500ms), std::future_status::timeout);
  EXPECT_EQ(proxy_->calls_paused(), 1u);
  proxy_->Resume();
  EXPECT_EQ(waiting.get().status, 200);
}

TEST_F(ProxyRollout, AReplicaThatNeverAnswersIsATimeout) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ProxyOptions o;
  o.request_timeout = 1500ms;
  ASSERT_NO_FATAL_FAILURE(StartProxy({0}, o));
  ASSERT_EQ(Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})").status, 200);
  rollouts_[0]->Signal(SIGSTOP);  // alive, listening, never answering
  const auto t0 = std::chrono::steady_clock::now();
  const http::HttpReply r = Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  rollouts_[0]->Signal(SIGCONT);
}

TEST_F(ProxyRollout, HostileBodiesAre400sAndServingGoesOn) {
  ASSERT_NO_FATAL_FAILURE(StartRollout(0));
  ASSERT_NO_FATAL_FAILURE(StartProxy({0}));
  for (const std::string& body : {std::string("{"), std::string(R"({"messages": 3})"),
                                  std::string(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 7})"),
                                  std::string("\x00\x01", 2)}) {
    const http::HttpReply r = Post(port(), "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << r.body;
  }
  // Over the model's context: the rollout's own 400, relayed.
  const http::HttpReply long_call = Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 100000})");
  EXPECT_EQ(long_call.status, 400) << long_call.body;
  EXPECT_NE(long_call.body.find("rollout"), std::string::npos) << long_call.body;
  EXPECT_EQ(Post(port(), "/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})").status, 200);
}

}  // namespace
}  // namespace tandem::agents

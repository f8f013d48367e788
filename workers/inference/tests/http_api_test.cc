// The rollout worker's HTTP API over real sockets (issue #14 item 1;
// docs/inference.md "HTTP API"), against ScriptedEngine, whose tokens are a
// function of the request: every endpoint, the response shapes of one
// prompt, a batch and n > 1, SSE framing ending in [DONE], 503 with
// Retry-After when the engine is full, and a table of bad bodies, each
// answered 400 with a message naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "workers/inference/http_api.h"
#include "workers/inference/tests/http_test_client.h"
#include "workers/inference/tests/scripted_engine.h"

namespace tandem::inference::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class HttpApiTest : public ::testing::Test {
 protected:
  void Start(ScriptedEngine::Options eo = {}, const std::function<void(HttpApiOptions&)>& tweak = {}) {
    engine_ = std::make_unique<ScriptedEngine>(eo);
    HttpApiOptions o;
    o.codec = std::make_shared<LetterCodec>();
    if (tweak) tweak(o);
    server_ = std::make_unique<HttpApiServer>(*engine_, o);
    const Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    port_ = server_->port();
  }
  void TearDown() override {
    server_.reset();
    engine_.reset();
  }
  HttpReply Post(const std::string& path, const json& body) { return Request(port_, "POST", path, body.dump()); }
  static json Body(const HttpReply& r) { return json::parse(r.body, nullptr, false); }

  std::unique_ptr<ScriptedEngine> engine_;
  std::unique_ptr<HttpApiServer> server_;
  int port_ = 0;
};

std::vector<int32_t> Script(int32_t last, int64_t sample, int64_t n, int64_t vocab = 1000) {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < n; ++k) out.push_back(ScriptedEngine::Token(last, sample, k, vocab));
  return out;
}

std::string Letters(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s.push_back(Letter(id));
  return s;
}

TEST_F(HttpApiTest, HealthIsOkUntilTheEngineIsNot) {
  Start();
  auto r = Request(port_, "GET", "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Body(r), json({{"status", "ok"}}));
  engine_->healthy = false;
  r = Request(port_, "GET", "/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(Body(r)["error"]["code"], "unavailable");
  EXPECT_EQ(Body(r)["error"]["message"], "scripted: unhealthy");
  EXPECT_EQ(r.header("retry-after"), "1");
}

TEST_F(HttpApiTest, ModelInfoCarriesPathConfigAndWeightVersion) {
  Start();
  const auto r = Request(port_, "GET", "/get_model_info");
  ASSERT_EQ(r.status, 200);
  const json b = Body(r);
  EXPECT_EQ(b["model_path"], "/models/scripted");
  EXPECT_EQ(b["config"]["model_type"], "scripted");
  EXPECT_EQ(b["max_context_length"], 256);
  EXPECT_EQ(b["vocab_size"], 1000);
  EXPECT_EQ(b["weight_version"], "7");
  EXPECT_EQ(b["is_generation"], true);
}

TEST_F(HttpApiTest, OnePromptIsAnsweredWithOneObject) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {5, 6, 10}}, {"sampling_params", {{"max_new_tokens", 4}, {"temperature", 0}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  const json b = Body(r);
  ASSERT_TRUE(b.is_object()) << r.body;
  const auto want = Script(10, 0, 4);
  EXPECT_EQ(b["output_ids"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(b["text"], Letters(want));
  const json& m = b["meta_info"];
  EXPECT_EQ(m["finish_reason"], json({{"type", "length"}, {"length", 4}}));
  EXPECT_EQ(m["prompt_tokens"], 3);
  EXPECT_EQ(m["completion_tokens"], 4);
  EXPECT_EQ(m["cached_tokens"], 2);
  EXPECT_EQ(m["weight_version"], "7");
  EXPECT_EQ(m["id"], std::to_string(engine_->LastId()));
  EXPECT_FALSE(m.contains("output_token_logprobs"));
}

TEST_F(HttpApiTest, LogprobsComeAsSglangTriples) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {3}}, {"return_logprob", true}, {"sampling_params", {{"max_new_tokens", 3}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = Body(r)["meta_info"]["output_token_logprobs"];
  ASSERT_EQ(lp.size(), 3u) << r.body;
  const auto ids = Script(3, 0, 3);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(lp[k][0].get<float>(), ScriptedEngine::Logprob(static_cast<int64_t>(k)));
    EXPECT_EQ(lp[k][1], ids[k]);
    EXPECT_TRUE(lp[k][2].is_null());
  }
}

TEST_F(HttpApiTest, ABatchWithNSamplesIsAPromptMajorList) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {{5}, {100, 200}}}, {"sampling_params", {{"n", 3}, {"max_new_tokens", 2}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json b = Body(r);
  ASSERT_TRUE(b.is_array());
  ASSERT_EQ(b.size(), 6u);
  const int32_t last[2] = {5, 200};
  std::set<std::string> ids;
  for (size_t p = 0; p < 2; ++p) {
    std::string rid;
    for (int64_t j = 0; j < 3; ++j) {
      const json& s = b[p * 3 + static_cast<size_t>(j)];
      EXPECT_EQ(s["output_ids"].get<std::vector<int32_t>>(), Script(last[p], j, 2)) << "prompt " << p << " sample " << j;
      EXPECT_EQ(s["meta_info"]["prompt_tokens"], p + 1);
      const std::string id = s["meta_info"]["id"];
      ASSERT_EQ(id.substr(id.find('-')), "-" + std::to_string(j));
      if (j == 0) rid = id.substr(0, id.find('-'));
      EXPECT_EQ(id.substr(0, id.find('-')), rid);  // one engine request per prompt
      ids.insert(id);
    }
  }
  EXPECT_EQ(ids.size(), 6u);
}

TEST_F(HttpApiTest, OnePromptWithNAboveOneAndAOneElementBatchAreLists) {
  Start();
  auto r = Post("/generate", {{"input_ids", {9}}, {"sampling_params", {{"n", 2}, {"max_new_tokens", 1}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(Body(r).is_array());
  EXPECT_EQ(Body(r).size(), 2u);
  r = Post("/generate", {{"text", {"hi"}}, {"sampling_params", {{"max_new_tokens", 1}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(Body(r).is_array());
  EXPECT_EQ(Body(r)[0]["output_ids"].get<std::vector<int32_t>>(), Script('i', 0, 1));
}

TEST_F(HttpApiTest, SamplingParamsMayBeOnePerPrompt) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {{1}, {2}}},
                                    {"sampling_params", {{{"max_new_tokens", 1}}, {{"max_new_tokens", 3}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)[0]["output_ids"].size(), 1u);
  EXPECT_EQ(Body(r)[1]["output_ids"].size(), 3u);
}

TEST_F(HttpApiTest, AStopStringEndsTheTextBeforeIt) {
  Start();
  // "ab" is 97 98: the script emits 99 100 101 ... = "vwxy..."
  const auto r = Post("/generate", {{"text", "ab"}, {"sampling_params", {{"stop", "wx"}, {"max_new_tokens", 10}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json b = Body(r);
  EXPECT_EQ(b["output_ids"].get<std::vector<int32_t>>(), (std::vector<int32_t>{99, 100, 101}));
  EXPECT_EQ(b["text"], "v");
  EXPECT_EQ(b["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", "wx"}}));
  EXPECT_EQ(b["meta_info"]["prompt_tokens"], 2);
}

TEST_F(HttpApiTest, AStopTokenIsKeptAndMatchedAsAnInteger) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {10}}, {"sampling_params", {{"stop_token_ids", {13}}, {"max_new_tokens", 10}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["output_ids"].get<std::vector<int32_t>>(), (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(Body(r)["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", 13}}));
}

TEST_F(HttpApiTest, StreamSendsCumulativeChunksThenDone) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {10}}, {"stream", true}, {"return_logprob", true},
                                    {"sampling_params", {{"max_new_tokens", 5}}}});
  ASSERT_EQ(r.status, 200) << r.raw_body;
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("transfer-encoding"), "chunked");
  const auto events = SseData(r.body);
  ASSERT_EQ(events.size(), 6u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const auto want = Script(10, 0, 5);
  for (size_t k = 0; k < 5; ++k) {
    const json c = json::parse(events[k], nullptr, false);
    ASSERT_TRUE(c.is_object()) << events[k];
    const std::vector<int32_t> prefix(want.begin(), want.begin() + static_cast<long>(k) + 1);
    EXPECT_EQ(c["output_ids"].get<std::vector<int32_t>>(), prefix);
    EXPECT_EQ(c["text"], Letters(prefix));
    EXPECT_EQ(c["meta_info"]["completion_tokens"], k + 1);
    EXPECT_EQ(c["meta_info"]["output_token_logprobs"].size(), k + 1);
    EXPECT_FALSE(c.contains("index"));
    if (k < 4) {
      EXPECT_TRUE(c["meta_info"]["finish_reason"].is_null()) << events[k];
    }
  }
  EXPECT_EQ(json::parse(events[4])["meta_info"]["finish_reason"]["type"], "length");
  // The framing itself: each event is "data: <json>\n\n".
  EXPECT_EQ(r.body.rfind("data: [DONE]\n\n"), r.body.size() - 14);
}

TEST_F(HttpApiTest, AStreamOfSeveralSamplesTagsEachChunkWithItsIndex) {
  Start();
  const auto r = Post("/generate", {{"input_ids", {{10}, {20}}}, {"stream", true},
                                    {"sampling_params", {{"n", 2}, {"max_new_tokens", 3}}}});
  ASSERT_EQ(r.status, 200);
  const auto events = SseData(r.body);
  ASSERT_EQ(events.size(), 13u) << r.body;  // 4 samples x 3 tokens, then [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  std::map<int, size_t> seen;  // index -> chunks so far
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const json c = json::parse(events[e]);
    const int index = c["index"];
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 4);
    const size_t k = ++seen[index];
    const auto want = Script(index < 2 ? 10 : 20, index % 2, static_cast<int64_t>(k));
    EXPECT_EQ(c["output_ids"].get<std::vector<int32_t>>(), want) << events[e];
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(seen[i], 3u);
}

TEST_F(HttpApiTest, AFullEngineIsA503WithRetryAfter) {
  Start({}, [](HttpApiOptions& o) { o.retry_after_s = 3; });
  engine_->full = true;
  auto r = Post("/generate", {{"input_ids", {1}}});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.header("retry-after"), "3");
  EXPECT_EQ(Body(r)["error"]["code"], "resource_exhausted");
  EXPECT_NE(Body(r)["error"]["message"].get<std::string>().find("queue is full"), std::string::npos);
  engine_->full = false;
  engine_->refuse = true;
  r = Post("/generate", {{"input_ids", {1}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r)["error"]["code"], "invalid_argument");
  engine_->refuse = false;
  EXPECT_EQ(Post("/generate", {{"input_ids", {1}}}).status, 200);
}

struct BadBody {
  std::string body;
  std::string names;  // the message must contain this
};

TEST_F(HttpApiTest, BadBodiesAre400sNamingTheField) {
  Start({.vocab = 1000, .context = 64});
  const std::string deep = std::string(50, '[') + std::string(50, ']');
  const std::vector<BadBody> table = {
      {"", "body: empty"},
      {"{\"input_ids\": [1,", "body: not valid JSON"},
      {"[1, 2]", "body: expected a JSON object, got array"},
      {"{\"input_ids\": " + deep + "}", "body: JSON nested deeper than 8"},
      {R"({"input_ids": [1], "max_tokens": 3})", "unknown field \"max_tokens\""},
      {R"({"input_ids": [1], "text": "a"})", "input_ids, text: give one"},
      {R"({"stream": true})", "input_ids, text: one of them is required"},
      {R"({"input_ids": "12"})", "input_ids: expected a list of token ids"},
      {R"({"input_ids": []})", "input_ids: empty prompt"},
      {R"({"input_ids": [[1], []]})", "input_ids[1]: empty prompt"},
      {R"({"input_ids": [[1], 2]})", "input_ids[1]: expected a list of token ids, got number"},
      {R"({"input_ids": [1, [2]]})", "input_ids[1]: expected an integer token id, got array"},
      {R"({"input_ids": [1, 2.5]})", "input_ids[1]: expected an integer token id, got number"},
      {R"({"input_ids": [1, -1]})", "input_ids[1]: token id -1 outside the vocabulary [0, 1000)"},
      {R"({"input_ids": [[3], [1000]]})", "input_ids[1][0]: token id 1000 outside the vocabulary"},
      {R"({"input_ids": [18446744073709551615]})", "input_ids[0]: token id 18446744073709551615 outside"},
      {R"({"text": 5})", "text: expected a string or a list of strings, got number"},
      {R"({"text": ["a", 5]})", "text[1]: expected a string, got number"},
      {R"({"text": ["a", ""]})", "text[1]: empty prompt"},
      {R"({"text": ["a", "b\u0001"]})", "text[1]: cannot encode byte 0x01"},
      {R"({"input_ids": [1], "sampling_params": 3})", "sampling_params: expected an object, got number"},
      {R"({"input_ids": [1], "sampling_params": {"best_of": 2}})", "sampling_params: unknown field \"best_of\""},
      {R"({"input_ids": [1], "sampling_params": {"temperature": "hot"}})", "sampling_params: temperature: expected a number, got string"},
      {R"({"input_ids": [1], "sampling_params": {"temperature": -1}})", "sampling_params: temperature: must be"},
      {R"({"input_ids": [1], "sampling_params": {"top_p": 0}})", "sampling_params: top_p: must lie in (0, 1]"},
      {R"({"input_ids": [1], "sampling_params": {"top_k": 0}})", "sampling_params: top_k: must be -1"},
      {R"({"input_ids": [1], "sampling_params": {"top_k": 2.0}})", "sampling_params: top_k: expected an integer, got number"},
      {R"({"input_ids": [1], "sampling_params": {"min_p": 2}})", "sampling_params: min_p: must lie in [0, 1]"},
      {R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 0}})", "sampling_params: max_new_tokens: must be >= 1"},
      {R"({"input_ids": [1], "sampling_params": {"max_new_tokens": -5}})", "sampling_params: max_new_tokens: must be >= 1"},
      {R"({"input_ids": [1], "sampling_params": {"n": 0}})", "sampling_params: n: must be >= 1"},
      {R"({"input_ids": [1], "sampling_params": {"n": 5000}})", "n: 5000 samples in all"},
      {R"({"input_ids": [1], "sampling_params": {"seed": -1}})", "sampling_params: seed: must be >= 0"},
      {R"({"input_ids": [1], "sampling_params": {"seed": "x"}})", "sampling_params: seed: expected an integer >= 0"},
      {R"({"input_ids": [1], "sampling_params": {"stop": 7}})", "sampling_params: stop: expected a string or a list"},
      {R"({"input_ids": [1], "sampling_params": {"stop": ["a", 1]}})", "sampling_params: stop[1]: expected a string"},
      {R"({"input_ids": [1], "sampling_params": {"stop": [""]}})", "sampling_params: stop[0]: must not be empty"},
      {R"({"input_ids": [1], "sampling_params": {"stop_token_ids": [5, 1000]}})", "sampling_params: stop_token_ids[1]: token id 1000 outside"},
      {R"({"input_ids": [1], "sampling_params": {"ignore_eos": 1}})", "sampling_params: ignore_eos: expected true or false"},
      {R"({"input_ids": [[1], [2]], "sampling_params": [{}]})", "sampling_params: a list needs one object per prompt, got 1 for 2"},
      {R"({"input_ids": [[1], [2]], "sampling_params": [{}, {"top_p": 7}]})", "sampling_params[1]: top_p: must lie"},
      {R"({"input_ids": [1], "return_logprob": "yes"})", "return_logprob: expected true or false, got string"},
      {R"({"input_ids": [1], "stream": 1})", "stream: expected true or false, got number"},
      {R"({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 62}})", "input_ids: prompt of 3 tokens + sampling_params.max_new_tokens 62 exceeds the context length 64"},
      {R"({"input_ids": [[1], [1, 2]], "sampling_params": {"max_new_tokens": 63}})", "input_ids[1]: prompt of 2 tokens"},
  };
  for (const auto& row : table) {
    const auto r = Request(port_, "POST", "/generate", row.body);
    EXPECT_EQ(r.status, 400) << row.body << " -> " << r.body;
    const json b = Body(r);
    EXPECT_EQ(b["error"]["code"], "invalid_argument") << row.body;
    const std::string msg = b["error"]["message"].is_string() ? b["error"]["message"].get<std::string>() : "";
    EXPECT_NE(msg.find(row.names), std::string::npos) << row.body << "\n  message: " << msg << "\n  wanted: " << row.names;
  }
  // A prompt as long as the context (64 ids) cannot take a token.
  json ids = json::array();
  for (int i = 0; i < 64; ++i) ids.push_back(1);
  const auto r = Post("/generate", {{"input_ids", ids}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("prompt of 64 tokens does not fit the context length 64"), std::string::npos) << r.body;
  EXPECT_EQ(engine_->LastId(), 0u);  // none reached the engine
}

TEST_F(HttpApiTest, WithoutACodecTextIsRefusedAndAnswersHaveNoText) {
  Start({}, [](HttpApiOptions& o) { o.codec = nullptr; });
  auto r = Post("/generate", {{"text", "hello"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("text: this server has no tokenizer; send input_ids"), std::string::npos) << r.body;
  r = Post("/generate", {{"input_ids", {1}}, {"sampling_params", {{"max_new_tokens", 2}}}});
  ASSERT_EQ(r.status, 200);
  EXPECT_FALSE(Body(r).contains("text"));
  EXPECT_EQ(Body(r)["output_ids"].size(), 2u);
}

TEST_F(HttpApiTest, FlushCacheAnswers200WhenIdleAnd409WhileRunning) {
  Start({.step = std::chrono::milliseconds(2)});
  EXPECT_EQ(Request(port_, "POST", "/flush_cache").status, 200);
  EXPECT_EQ(Request(port_, "GET", "/flush_cache").status, 200);
  EXPECT_EQ(engine_->Flushes(), 2);
  const int fd = ConnectTcp(port_);
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 200}, "stream": true})")));
  ASSERT_NE(ReadUntil(fd, "data: ", 5s).find("data: "), std::string::npos);
  const auto r = Request(port_, "POST", "/flush_cache");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Body(r)["error"]["code"], "failed_precondition");
  EXPECT_NE(Body(r)["error"]["message"].get<std::string>().find("requests are running"), std::string::npos);
  ::close(fd);
}

TEST_F(HttpApiTest, PauseTakesAModeAndContinueResumes) {
  Start();
  auto r = Post("/pause_generation", {{"mode", "retract"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r), json({{"paused", true}, {"mode", "retract"}}));
  EXPECT_EQ(engine_->LastPause(), PauseMode::kRetract);
  r = Request(port_, "POST", "/pause_generation", "");
  EXPECT_EQ(Body(r)["mode"], "abort");  // SGLang's default
  r = Post("/pause_generation", {{"mode", "sleep"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find(R"(mode: expected \"abort\", \"retract\" or \"in_place\", got \"sleep\")"), std::string::npos) << r.body;
  r = Post("/pause_generation", {{"mode", "abort"}, {"wait", "1"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("unknown field \\\"wait\\\""), std::string::npos) << r.body;
  r = Post("/pause_generation", {{"mode", 1}});
  EXPECT_NE(r.body.find("mode: expected a string, got number"), std::string::npos) << r.body;
  r = Request(port_, "POST", "/continue_generation", "{\"now\": \"yes\"}");
  EXPECT_EQ(r.status, 400);
  r = Request(port_, "POST", "/continue_generation", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Body(r), json({{"paused", false}}));
  EXPECT_EQ(Post("/generate", {{"input_ids", {1}}}).status, 200);
}

TEST_F(HttpApiTest, PauseAbortEndsARunningStreamWithAbort) {
  Start({.step = std::chrono::milliseconds(2)});
  const int fd = ConnectTcp(port_);
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 200}, "stream": true})")));
  std::string got = ReadUntil(fd, "data: ", 5s);
  ASSERT_EQ(Post("/pause_generation", {{"mode", "abort"}}).status, 200);
  got += ReadUntilClosed(fd, 10s);
  ::close(fd);
  const auto events = SseData(ParseReply(got).body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["meta_info"]["finish_reason"], json({{"type", "abort"}}));
  EXPECT_LT(last["output_ids"].size(), 200u);
  EXPECT_EQ(Request(port_, "POST", "/continue_generation").status, 200);
}

TEST_F(HttpApiTest, RequestsWaitWhilePausedInPlaceAndFinishAfterContinue) {
  Start();
  ASSERT_EQ(Post("/pause_generation", {{"mode", "in_place"}}).status, 200);
  const int fd = ConnectTcp(port_);
  ASSERT_TRUE(SendAll(fd, RequestText("POST", "/generate", R"({"input_ids": [4], "sampling_params": {"max_new_tokens": 3}})")));
  EXPECT_EQ(ReadUntilClosed(fd, 300ms), "");  // nothing while paused
  ASSERT_EQ(Request(port_, "POST", "/continue_generation").status, 200);
  const auto r = ParseReply(ReadUntilClosed(fd, 10s));
  ::close(fd);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["output_ids"].get<std::vector<int32_t>>(), Script(4, 0, 3));
}

TEST_F(HttpApiTest, MetricsArePrometheusText) {
  Start();
  ASSERT_EQ(Post("/generate", {{"input_ids", {1}}, {"sampling_params", {{"max_new_tokens", 3}}}}).status, 200);
  const auto r = Request(port_, "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type").rfind("text/plain; version=0.0.4", 0), 0u);
  for (const char* line : {"# TYPE tandem_inference_running_requests gauge\n",
                                 "# TYPE tandem_inference_generated_tokens_total counter\n",
                                 "tandem_inference_generated_tokens_total 3\n",
                                 "tandem_inference_prompt_tokens_total 1\n",
                                 "tandem_inference_kv_blocks_used 3\n",
                                 "tandem_inference_kv_blocks_free 97\n",
                                 "tandem_inference_prefix_cache_hit_rate 0.250000\n",
                                 "tandem_inference_weight_version 7\n",
                                 "tandem_inference_paused 0\n",
                                 "tandem_inference_steps_total 5\n",
                                 "# TYPE tandem_inference_step_seconds_total counter\n",
                                 "tandem_inference_step_seconds_total{part=\"wait\"} 0.250000\n",
                                 "tandem_inference_step_seconds_total{part=\"plan\"} 0.000000\n",
                                 "# TYPE tandem_inference_generation_tokens_per_second gauge\n",
                                 "tandem_inference_http_responses_total{endpoint=\"/generate\",code=\"200\"} 1\n"})
    EXPECT_NE(r.body.find(line), std::string::npos) << "missing: " << line << "\n" << r.body;
}

TEST_F(HttpApiTest, UnknownPathsAre404AndWrongMethods405) {
  Start();
  auto r = Request(port_, "GET", "/v1/chat/completions");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Body(r)["error"]["code"], "not_found");
  r = Request(port_, "GET", "/generate");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST");
  EXPECT_NE(Body(r)["error"]["message"].get<std::string>().find("GET /generate: method not allowed"), std::string::npos);
  r = Request(port_, "DELETE", "/flush_cache");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST, GET");
  EXPECT_EQ(Request(port_, "GET", "/health?x=1").status, 200);  // a query string is ignored
}

}  // namespace
}  // namespace tandem::inference::testing

// `tandem-worker teacher` as a user runs it (docs/inference.md
// "tandem-worker teacher"): a model directory written by SavePretrained, the
// real binary on a free port. /score gives the log-probs and top-k of the
// model's own forward over each sequence alone (no prefix shared), for a
// batch whose sequences share a prompt; bad bodies are 4xx with the field
// named and the worker goes on; /metrics counts; SIGTERM stops it with 0.
// Over the control protocol (TestServer as tandemd): its one tag, the
// refusals, release/resume with a request waiting, load_weights by version,
// shutdown.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <future>
#include <optional>

#include "workers/inference/tests/http_test_client.h"
#include "workers/model/checkpoint.h"
#include "workers/model/model_input.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/roles/tests/worker_process.h"
#include "workers/runtime/tests/test_server.h"

namespace tandem::roles {
namespace {

using nlohmann::json;
namespace http = inference::testing;

// What /score must answer for `seqs` (score_from 1 each, top `k`): the
// model's forward over each sequence alone.
json Expected(const model::Transformer& m, const std::vector<std::vector<int32_t>>& seqs, int64_t k) {
  c10::NoGradGuard no_grad;
  json results = json::array();
  for (const auto& s : seqs) {
    auto batch = model::BuildForestBatch({s}, {}, m.config().vocab_size, at::kCPU, /*share_prefixes=*/false);
    EXPECT_TRUE(batch.ok());
    model::ForwardOptions o;
    o.top_k = k;
    const model::ForestOutput out = m.Forward(*batch, o);
    json r = {{"lp", std::vector<float>(out.logprob.data_ptr<float>(), out.logprob.data_ptr<float>() + out.logprob.numel())}};
    if (k > 0) {
      const at::Tensor ids = out.top_ids.to(at::kInt).contiguous();
      r["top_ids"] = std::vector<int32_t>(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
    }
    results.push_back(r);
  }
  return results;
}

void ExpectScores(const json& got, const json& want) {
  ASSERT_EQ(got.at("results").size(), want.size()) << got;
  for (size_t s = 0; s < want.size(); ++s) {
    const json& r = got["results"][s];
    const std::vector<float> lp = r.at("token_logprobs").get<std::vector<float>>();
    const std::vector<float> wlp = want[s]["lp"].get<std::vector<float>>();
    ASSERT_EQ(lp.size(), wlp.size()) << "sequence " << s;
    for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], wlp[i], 1e-4) << "sequence " << s << " token " << i;
    if (!r.contains("top_logprobs")) continue;
    const std::vector<int32_t> wids = want[s]["top_ids"].get<std::vector<int32_t>>();
    const size_t k = r["top_logprobs"].empty() ? 0 : r["top_logprobs"][0].size();
    for (size_t p = 0; p < r["top_logprobs"].size(); ++p)
      EXPECT_EQ(r["top_logprobs"][p][0][1], wids[p * k]) << "the most likely token of position " << p;
  }
}

class TeacherRole : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-teacher-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model::ModelConfig c = model::testing::TinyConfig(/*moe=*/true);
    a_ = model::testing::MakeModel(c);
    b_ = model::testing::MakeModel(c);
    a_->InitRandom(21, 0.5);
    b_->InitRandom(22, 0.5);
    ASSERT_TRUE(model::SavePretrained(*a_, dir_ + "/a").ok());
    ASSERT_TRUE(model::SavePretrained(*b_, dir_ + "/b").ok());
  }
  void TearDown() override { model::testing::RemoveTree(dir_); }
  std::string dir_;
  std::unique_ptr<model::Transformer> a_, b_;
  const std::vector<std::vector<int32_t>> seqs_ = {{7, 8, 9, 10, 11, 12}, {7, 8, 9, 10, 40, 41, 42}, {299, 0}};
};

TEST_F(TeacherRole, ScoresOverHttpAsTheModelsOwnForwardAndStopsOnSigterm) {
  Worker w;
  const std::string log = dir_ + "/worker.log";
  Start(w, "teacher", {"--model", dir_ + "/a", "--threads", "1", "--max-batch-tokens", "64"}, dir_ + "/port", log);
  ASSERT_GT(w.port, 0) << "the worker did not start: " << ReadAll(log);

  EXPECT_EQ(http::Request(w.port, "GET", "/health").status, 200);
  const http::HttpReply info = http::Request(w.port, "GET", "/get_model_info");
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_EQ(json::parse(info.body).at("is_generation"), false) << info.body;

  const http::HttpReply scored =
      http::Request(w.port, "POST", "/score", json{{"input_ids", seqs_}, {"top_logprobs_num", 3}}.dump());
  ASSERT_EQ(scored.status, 200) << scored.body;
  const json got = json::parse(scored.body);
  ExpectScores(got, Expected(*a_, seqs_, 3));
  EXPECT_EQ(got["meta_info"]["weight_version"], "0");
  EXPECT_EQ(got["meta_info"]["scored_tokens"], 5 + 6 + 1);

  const http::HttpReply one = http::Request(w.port, "POST", "/score", json{{"input_ids", seqs_[1]}, {"score_from", 4}}.dump());
  ASSERT_EQ(one.status, 200) << one.body;
  const std::vector<float> tail = json::parse(one.body)["results"][0]["token_logprobs"].get<std::vector<float>>();
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_NEAR(tail[0], got["results"][1]["token_logprobs"][3].get<float>(), 1e-4) << "score_from picks the tail";

  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input_ids": [1, 2], "bogus": 1})", "bogus"},
           {R"({"input_ids": [1, 300]})", "input_ids[1]"},
           {R"({"input_ids": [1, 2], "top_logprobs_num": 1000})", "top_logprobs_num"},
           {"{not json", "body"}}) {
    const http::HttpReply bad = http::Request(w.port, "POST", "/score", body);
    EXPECT_EQ(bad.status, 400) << bad.body;
    EXPECT_NE(bad.body.find(field), std::string::npos) << bad.body;
  }
  EXPECT_EQ(http::Request(w.port, "GET", "/score").status, 405);
  EXPECT_EQ(http::Request(w.port, "GET", "/health").status, 200);
  const http::HttpReply metrics = http::Request(w.port, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("tandem_teacher_requests_total 2\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("tandem_teacher_http_responses_total{endpoint=\"/score\",code=\"400\"} 4"),
            std::string::npos)
      << metrics.body;

  EXPECT_EQ(w.Stop(SIGTERM), 0) << ReadAll(log);
}

TEST_F(TeacherRole, HandsItsWeightsOffOverTheControlProtocolAndLoadsNewOnes) {
  tandem::testing::TestServer daemon;
  Worker w;
  const std::string log = dir_ + "/worker.log";
  auto started = std::async(std::launch::async, [&] {
    Start(w, "teacher", {"--model", dir_ + "/a", "--threads", "1", "--control", daemon.endpoint()}, dir_ + "/port",
          log);
  });
  const std::optional<json> hello = daemon.Handshake(std::chrono::seconds(60));
  ASSERT_TRUE(hello) << ReadAll(log);
  started.get();
  ASSERT_GT(w.port, 0) << ReadAll(log);
  EXPECT_EQ((*hello)["role"], "teacher");
  ASSERT_EQ((*hello)["tags"].size(), 1u) << *hello;
  EXPECT_EQ((*hello)["tags"][0]["name"], "weights");
  EXPECT_EQ((*hello)["tags"][0]["backup"], true);
  const uint64_t weight_bytes = (*hello)["residency"]["tags"]["weights"];
  EXPECT_GE(weight_bytes, static_cast<uint64_t>(model::ParameterSet::BufferNumel(a_->config(), at::kFloat) * 4));

  std::optional<json> r = daemon.Command("continue");  // idle at hello, as the daemon assumes
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  r = daemon.Command("release", {{"tags", {"weights"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "failed_precondition") << "released while scoring: " << *r;
  r = daemon.Command("pause", {{"mode", "retract"}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["type"], "ack") << *r;
  r = daemon.Command("release", {{"tags", {"kv_cache"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "not_found") << *r;
  r = daemon.Command("release");
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  EXPECT_EQ((*r)["residency"]["tags"]["weights"], 0);
  EXPECT_EQ((*r)["detail"]["copied_bytes"], weight_bytes) << "the weights are backed up";

  const std::string body = json{{"input_ids", seqs_}}.dump();
  auto waiting = std::async(std::launch::async, [&] { return http::Request(w.port, "POST", "/score", body); });
  r = daemon.Command("continue");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "failed_precondition") << "continue with the weights released: " << *r;
  r = daemon.Command("resume", {{"tags", {"weights"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  EXPECT_EQ((*r)["residency"]["tags"]["weights"], weight_bytes);
  r = daemon.Command("load_weights", {{"version", 2}, {"source", "file:" + dir_ + "/b"}});
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  r = daemon.Command("continue");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["type"], "ack") << *r;

  const http::HttpReply late = waiting.get();
  ASSERT_EQ(late.status, 200) << late.body;
  const json got = json::parse(late.body);
  EXPECT_EQ(got["meta_info"]["weight_version"], "2") << late.body;
  ExpectScores(got, Expected(*b_, seqs_, 0));

  r = daemon.Command("shutdown", {{"reason", "test"}});
  ASSERT_TRUE(r);
  const std::optional<int> status = tandem::testing::WaitFor(w.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status) << "the worker did not exit after shutdown: " << ReadAll(log);
  w.pid = -1;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << ReadAll(log);
}

}  // namespace
}  // namespace tandem::roles

// `tandem-worker rollout` as a user runs it (docs/inference.md
// "tandem-worker rollout"): a model directory written by SavePretrained
// with the byte-level tokenizer, the real binary on a free port. /generate
// with input_ids and with text gives GreedyDecode's tokens; /health and
// /get_model_info answer; a bad request is a 400 and the worker goes on;
// SIGTERM stops it with exit status 0. A directory without a model exits 1
// with a message naming it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <future>
#include <optional>
#include <random>

#include "workers/data/byte_tokenizer.h"
#include "workers/inference/greedy.h"
#include "workers/inference/tests/http_test_client.h"
#include "workers/model/checkpoint.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/roles/tests/worker_process.h"
#include "workers/runtime/tests/test_server.h"
#include "workers/weights/shm_transport.h"

namespace tandem::roles {
namespace {

using nlohmann::json;
namespace http = inference::testing;

class RolloutRole : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-rollout-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { model::testing::RemoveTree(dir_); }
  std::string dir_;
};

TEST_F(RolloutRole, ServesGreedyGenerationOverHttpAndStopsOnSigterm) {
  // vocabulary: 256 bytes + 3 specials of the byte tokenizer
  model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false);
  c.vocab_size = 259;
  std::unique_ptr<model::Transformer> m = model::testing::MakeModel(c);
  m->InitRandom(17, 0.5);
  const std::string model_dir = dir_ + "/model";
  ASSERT_TRUE(model::SavePretrained(*m, model_dir).ok());
  ASSERT_TRUE(data::WriteByteTokenizer(model_dir).ok());

  const std::vector<int32_t> prompt = {72, 105, 33, 32, 50};  // "Hi! 2"
  inference::GreedyOptions go;
  go.max_new_tokens = 7;
  StatusOr<std::vector<std::vector<int32_t>>> want = inference::GreedyDecode(*m, {prompt}, go);
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  Worker w;
  const std::string log = dir_ + "/worker.log";
  Start(w, "rollout", {"--model", model_dir, "--kv-blocks", "64", "--threads", "1"}, dir_ + "/port", log);
  ASSERT_GT(w.port, 0) << "the worker did not start: " << ReadAll(log);

  EXPECT_EQ(http::Request(w.port, "GET", "/health").status, 200);
  const http::HttpReply info = http::Request(w.port, "GET", "/get_model_info");
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_NE(info.body.find(model_dir), std::string::npos) << info.body;
  EXPECT_NE(info.body.find("\"hidden_size\""), std::string::npos) << "the config is reported: " << info.body;

  // ignore_eos: the random model may well pick <|im_end|>.
  const json params = {{"temperature", 0}, {"max_new_tokens", 7}, {"ignore_eos", true}};
  const http::HttpReply ids =
      http::Request(w.port, "POST", "/generate", json{{"input_ids", prompt}, {"sampling_params", params}}.dump());
  ASSERT_EQ(ids.status, 200) << ids.body;
  const json a = json::parse(ids.body);
  EXPECT_EQ(a.at("output_ids").get<std::vector<int32_t>>(), (*want)[0]) << ids.body;
  EXPECT_EQ(a.at("meta_info").at("finish_reason").at("type"), "length") << ids.body;

  const http::HttpReply text =
      http::Request(w.port, "POST", "/generate", json{{"text", "Hi! 2"}, {"sampling_params", params}}.dump());
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(json::parse(text.body).at("output_ids").get<std::vector<int32_t>>(), (*want)[0]) << text.body;

  const http::HttpReply bad = http::Request(w.port, "POST", "/generate", R"({"input_ids": [1, 2], "bogus": 1})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("bogus"), std::string::npos) << bad.body;
  EXPECT_EQ(http::Request(w.port, "GET", "/health").status, 200);

  EXPECT_EQ(w.Stop(SIGTERM), 0) << ReadAll(log);
}

// The handoff over the real control protocol, tandemd's side played by
// TestServer: the worker says hello with its two tags; pause (retract) and
// release free them (the weights backed up); a request sent meanwhile waits;
// continue is refused until the memory is back; load_weights from another
// model's directory, then continue: the waiting request gets the new
// model's greedy tokens, tagged with the new version; shutdown ends it.
TEST_F(RolloutRole, HandsItsMemoryOffOverTheControlProtocolAndLoadsNewWeights) {
  model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false);
  c.vocab_size = 259;
  std::unique_ptr<model::Transformer> a = model::testing::MakeModel(c), b = model::testing::MakeModel(c);
  a->InitRandom(17, 0.5);
  b->InitRandom(18, 0.5);
  ASSERT_TRUE(model::SavePretrained(*a, dir_ + "/a").ok());
  ASSERT_TRUE(model::SavePretrained(*b, dir_ + "/b").ok());
  const std::vector<int32_t> prompt = {72, 105, 33, 32, 50};
  inference::GreedyOptions go;
  go.max_new_tokens = 6;
  const auto want_a = inference::GreedyDecode(*a, {prompt}, go), want_b = inference::GreedyDecode(*b, {prompt}, go);
  ASSERT_TRUE(want_a.ok() && want_b.ok());
  ASSERT_NE((*want_a)[0], (*want_b)[0]);

  tandem::testing::TestServer daemon;
  Worker w;
  const std::string log = dir_ + "/worker.log";
  setenv("TANDEM_ROLE", "gen", 1);
  auto started = std::async(std::launch::async, [&] {
    Start(w, "rollout", {"--model", dir_ + "/a", "--kv-blocks", "32", "--threads", "1", "--control", daemon.endpoint()},
          dir_ + "/port", log);
  });
  const std::optional<json> hello = daemon.Handshake(std::chrono::seconds(60));
  unsetenv("TANDEM_ROLE");
  ASSERT_TRUE(hello) << ReadAll(log);
  started.get();
  ASSERT_GT(w.port, 0) << ReadAll(log);
  EXPECT_EQ((*hello)["role"], "gen");
  ASSERT_EQ((*hello)["tags"].size(), 2u) << *hello;
  EXPECT_EQ((*hello)["tags"][0]["name"], "kv_cache");
  EXPECT_EQ((*hello)["tags"][1]["name"], "weights");
  EXPECT_EQ((*hello)["tags"][1]["backup"], true);
  const uint64_t weight_bytes = (*hello)["residency"]["tags"]["weights"];
  EXPECT_GE(weight_bytes, static_cast<uint64_t>(model::ParameterSet::BufferNumel(c, at::kFloat) * 4));

  // Idle at hello, as the daemon assumes: a release needs no pause, and the
  // engine generates once continued.
  std::optional<json> r = daemon.Command("continue");
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  const json params = {{"temperature", 0}, {"max_new_tokens", 6}, {"ignore_eos", true}};
  const std::string body = json{{"input_ids", prompt}, {"sampling_params", params}}.dump();
  const http::HttpReply first = http::Request(w.port, "POST", "/generate", body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body).at("output_ids").get<std::vector<int32_t>>(), (*want_a)[0]);

  r = daemon.Command("release", {{"tags", {"weights"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "failed_precondition") << "released while generating: " << *r;
  r = daemon.Command("pause", {{"mode", "retract"}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["type"], "ack") << *r;
  r = daemon.Command("release");
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  EXPECT_EQ((*r)["residency"]["tags"]["weights"], 0);
  EXPECT_EQ((*r)["residency"]["tags"]["kv_cache"], 0);
  EXPECT_EQ((*r)["detail"]["copied_bytes"], weight_bytes) << "the weights are backed up";
  r = daemon.Command("release", {{"tags", {"cuda_graph"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "not_found") << *r;

  auto waiting = std::async(std::launch::async, [&] { return http::Request(w.port, "POST", "/generate", body); });
  r = daemon.Command("continue");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "failed_precondition") << "continue with the memory released: " << *r;
  r = daemon.Command("resume", {{"tags", {"weights", "kv_cache"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  EXPECT_EQ((*r)["residency"]["tags"]["weights"], weight_bytes);
  r = daemon.Command("load_weights", {{"version", 3}, {"source", "file:" + dir_ + "/b"}});
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r;
  r = daemon.Command("load_weights", {{"version", 4}, {"source", "ipc:v4"}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "invalid_argument") << *r;
  // b again, as version 5 over shm from this process (the actor's side): a
  // command naming another version is refused; the load acknowledges, and
  // the only expected reader's ack frees the segment.
  weights::ShmPublisher publisher({"rollout-test-" + std::to_string(getpid()), "actor", 1});
  StatusOr<std::string> published = publisher.Publish(5, b->parameters());
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  r = daemon.Command("load_weights", {{"version", 6}, {"source", *published}});
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["code"], "invalid_argument") << *r;
  EXPECT_NE((*r)["message"].get<std::string>().find("holds version 5"), std::string::npos) << *r;
  r = daemon.Command("load_weights", {{"version", 5}, {"source", *published}});
  ASSERT_TRUE(r);
  ASSERT_EQ((*r)["type"], "ack") << *r << ReadAll(log);
  EXPECT_EQ(publisher.ExportedBytes(), 0u) << "the reader's ack did not free the version";
  r = daemon.Command("continue");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["type"], "ack") << *r;

  const http::HttpReply late = waiting.get();
  ASSERT_EQ(late.status, 200) << late.body;
  const json got = json::parse(late.body);
  EXPECT_EQ(got.at("output_ids").get<std::vector<int32_t>>(), (*want_b)[0]) << late.body;
  EXPECT_EQ(got.at("meta_info").at("weight_version"), "5") << late.body;

  r = daemon.Command("shutdown", {{"reason", "test"}});
  ASSERT_TRUE(r);
  const std::optional<int> status = tandem::testing::WaitFor(w.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status) << "the worker did not exit after shutdown: " << ReadAll(log);
  w.pid = -1;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << ReadAll(log);
}

TEST_F(RolloutRole, ADirectoryWithoutAModelExitsNamingIt) {
  Worker w;
  const std::string log = dir_ + "/worker.log";
  Start(w, "rollout", {"--model", dir_ + "/nothing"}, dir_ + "/port", log);
  EXPECT_EQ(w.pid, -1) << "the worker started without a model";
  EXPECT_EQ(w.exit_status, 1) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find(dir_ + "/nothing"), std::string::npos) << ReadAll(log);
}

// --wait-for-model: a model that never comes is a clear error after the
// wait; one renamed into place meanwhile (as sft --out does) is served.
TEST_F(RolloutRole, WaitsForTheModelAnotherTaskMakes) {
  {
    Worker w;
    const std::string log = dir_ + "/never.log";
    const auto t0 = std::chrono::steady_clock::now();
    Start(w, "rollout", {"--model", dir_ + "/never", "--wait-for-model", "1"}, dir_ + "/never.port", log);
    EXPECT_EQ(w.pid, -1);
    EXPECT_EQ(w.exit_status, 1) << ReadAll(log);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
    EXPECT_NE(ReadAll(log).find("--model " + dir_ + "/never: no config.json after 1 s (--wait-for-model)"),
              std::string::npos)
        << ReadAll(log);
  }
  model::ModelConfig c = model::testing::TinyConfig(/*moe=*/false);
  c.vocab_size = 259;
  std::unique_ptr<model::Transformer> m = model::testing::MakeModel(c);
  const std::string staged = dir_ + "/.model.partial", model_dir = dir_ + "/model";
  const std::string log = dir_ + "/wait.log";
  // The model appears once the worker says it waits for it.
  std::future<bool> made = std::async(std::launch::async, [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ReadAll(log).find("waiting up to 60 s for the model " + model_dir) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return model::SavePretrained(*m, staged).ok() && data::WriteByteTokenizer(staged).ok() &&
           ::rename(staged.c_str(), model_dir.c_str()) == 0;
  });
  Worker w;
  Start(w, "rollout", {"--model", model_dir, "--wait-for-model", "60"}, dir_ + "/wait.port", log);
  ASSERT_TRUE(made.get());
  ASSERT_GT(w.port, 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("the model " + model_dir + " is there"), std::string::npos) << ReadAll(log);
  EXPECT_EQ(w.Stop(SIGTERM), 0) << ReadAll(log);
}

}  // namespace
}  // namespace tandem::roles

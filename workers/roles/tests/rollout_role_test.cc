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
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "workers/data/byte_tokenizer.h"
#include "workers/inference/greedy.h"
#include "workers/inference/tests/http_test_client.h"
#include "workers/model/checkpoint.h"
#include "workers/model/tests/model_test_util.h"

extern char** environ;

namespace tandem::roles {
namespace {

using nlohmann::json;
namespace http = inference::testing;

std::string BinDir() {
  const char* d = std::getenv("TANDEM_BIN_DIR");
  return d ? d : "bin";
}

struct Worker {
  pid_t pid = -1;
  int port = 0;
  int exit_status = -1;  // when it exited before listening
  int Stop(int sig = SIGTERM) {
    if (pid <= 0) return -1;
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Worker() { Stop(SIGKILL); }
};

// Starts the worker; waits for its port file (or for it to exit).
void Start(Worker& w, const std::vector<std::string>& args, const std::string& port_file, const std::string& log) {
  std::vector<std::string> argv = {BinDir() + "/tandem-worker", "rollout"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--port-file");
  argv.push_back(port_file);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  ASSERT_EQ(posix_spawn(&w.pid, cargv[0], &fa, nullptr, cargv.data(), environ), 0) << cargv[0];
  posix_spawn_file_actions_destroy(&fa);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> w.port && w.port > 0) return;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      w.pid = -1;
      w.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

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
  Start(w, {"--model", model_dir, "--kv-blocks", "64", "--threads", "1"}, dir_ + "/port", log);
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

TEST_F(RolloutRole, ADirectoryWithoutAModelExitsNamingIt) {
  Worker w;
  const std::string log = dir_ + "/worker.log";
  Start(w, {"--model", dir_ + "/nothing"}, dir_ + "/port", log);
  EXPECT_EQ(w.pid, -1) << "the worker started without a model";
  EXPECT_EQ(w.exit_status, 1) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find(dir_ + "/nothing"), std::string::npos) << ReadAll(log);
}

}  // namespace
}  // namespace tandem::roles

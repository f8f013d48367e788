// The controller's /generate client (rollout_client.h) against hostile
// answers and rollouts that refuse, never answer, or answer garbage.
#include "workers/roles/rollout_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "workers/roles/tests/silent_listener.h"

namespace tandem::roles {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

json Sample(std::vector<int> ids, int version = 3) {
  json lps = json::array();
  for (int id : ids) lps.push_back({-0.5, id, nullptr});
  return {{"output_ids", ids},
          {"meta_info", {{"output_token_logprobs", lps}, {"finish_reason", {{"type", "stop"}}},
                         {"weight_version", std::to_string(version)}}}};
}

TEST(RolloutClient, ParsesAnAnswer) {
  auto r = ParseGenerateAnswer(json::array({Sample({1, 2}), Sample({3}, 4)}).dump(), 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].output_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ((*r)[0].logprobs, (std::vector<float>{-0.5f, -0.5f}));
  EXPECT_EQ((*r)[0].finish_reason, "stop");
  EXPECT_EQ((*r)[1].weight_version, 4);
  // One sample may come as an object, as SGLang sends it.
  EXPECT_TRUE(ParseGenerateAnswer(Sample({7}).dump(), 1).ok());
}

TEST(RolloutClient, RefusesHostileAnswersNamingWhatWasWrong) {
  json wrong_id = Sample({1, 2});
  wrong_id["meta_info"]["output_token_logprobs"][1][1] = 9;
  json nan_lp = Sample({1});
  nan_lp["meta_info"]["output_token_logprobs"][0][0] = "NaN";
  json short_lps = Sample({1, 2});
  short_lps["meta_info"]["output_token_logprobs"].erase(1);
  json negative = Sample({1});
  negative["output_ids"][0] = -4;
  json version = Sample({1});
  version["meta_info"]["weight_version"] = "v3";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1, 2", "answer"},
      {json::array({Sample({1})}).dump(), "1 samples, asked for 2"},
      {json::array({wrong_id, Sample({1})}).dump(), "output_token_logprobs[1]"},
      {json::array({nan_lp, Sample({1})}).dump(), "output_token_logprobs[0]"},
      {json::array({short_lps, Sample({1})}).dump(), "one per output id"},
      {json::array({negative, Sample({1})}).dump(), "expected token ids"},
      {json::array({version, Sample({1})}).dump(), "weight_version"},
      {json::array({1, 2}).dump(), "expected an object"},
      {std::string(2000, '[') + std::string(2000, ']'), "answer"},
  };
  for (const auto& [body, expected] : cases) {
    auto r = ParseGenerateAnswer(body, 2);
    ASSERT_FALSE(r.ok()) << body.substr(0, 80);
    EXPECT_THAT(r.status().message(), HasSubstr(expected)) << body.substr(0, 80);
  }
}

TEST(RolloutClient, ARolloutThatNeverAnswersIsADeadlineNotAHang) {
  testing::SilentListener silent;
  GenerateCall call;
  call.prompts = {{1, 2, 3}};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Generate({"127.0.0.1", silent.port}, call, std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("127.0.0.1:" + std::to_string(silent.port)));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(RolloutClient, ARefusedConnectionIsUnavailable) {
  int port = 0;
  {
    testing::SilentListener gone;  // a port that was free a moment ago, closed again
    port = gone.port;
  }
  GenerateCall call;
  call.prompts = {{1}};
  auto r = Generate({"127.0.0.1", port}, call, std::chrono::milliseconds(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

// A rollout that answers HTTP 500, or 200 with garbage.
TEST(RolloutClient, ABadAnswerIsAnErrorWithItsStatus) {
  for (const std::string& reply : {std::string("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops"),
                                  std::string("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{\"a\":")}) {
    testing::SilentListener l;
    std::thread server([&] {
      const int c = ::accept(l.fd, nullptr, nullptr);
      char buf[4096];
      (void)!::read(c, buf, sizeof buf);
      (void)!::write(c, reply.data(), reply.size());
      ::close(c);
    });
    GenerateCall call;
    call.prompts = {{1}};
    auto r = Generate({"127.0.0.1", l.port}, call, std::chrono::milliseconds(5000));
    server.join();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(reply.find("500") != std::string::npos ? "HTTP 500: oops" : "answer"));
  }
}

}  // namespace
}  // namespace tandem::roles

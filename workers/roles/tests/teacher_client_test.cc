// The controller's /score client (teacher_client.h) against hostile
// answers and a teacher that never answers.
#include "workers/roles/teacher_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "workers/roles/tests/silent_listener.h"

namespace tandem::roles {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

ScoreCall TwoSequences() {
  ScoreCall c;
  c.sequences = {{1, 2, 3, 4}, {1, 2, 5}};
  c.score_from = {2, 2};
  c.temperature = 0.7;
  return c;
}

TEST(TeacherClient, AsksForThePromptsContinuation) {
  const json body = json::parse(ScoreBody(TwoSequences(), 1, 2));
  EXPECT_EQ(body, json::parse(R"({"input_ids": [[1, 2, 5]], "score_from": [2], "temperature": 0.7})"));
}

TEST(TeacherClient, ParsesAnAnswer) {
  const json answer = {{"results", {{{"token_logprobs", {-0.5, -1.5}}, {"input_tokens", 4}},
                                    {{"token_logprobs", {-2.0}}, {"input_tokens", 3}}}},
                       {"meta_info", {{"id", "1"}}}};
  auto r = ParseScoreAnswer(answer.dump(), TwoSequences(), 0, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].logprobs, (std::vector<float>{-0.5f, -1.5f}));
  EXPECT_EQ((*r)[1].logprobs, (std::vector<float>{-2.0f}));
  EXPECT_TRUE((*r)[0].top_ids.empty());
}

ScoreCall TwoSequencesTopTwo() {
  ScoreCall c = TwoSequences();
  c.top_k = 2;
  return c;
}

TEST(TeacherClient, AsksForAndParsesTheTopK) {
  EXPECT_EQ(json::parse(ScoreBody(TwoSequencesTopTwo(), 1, 2))["top_logprobs_num"], 2);
  const json answer = {
      {"results",
       {{{"token_logprobs", {-0.5, -1.5}},
         {"top_logprobs", {{{-0.1, 7, nullptr}, {-2.5, 3, nullptr}}, {{-0.2, 4, nullptr}, {-1.5, 4, nullptr}}}}},
        {{"token_logprobs", {-2.0}}, {"top_logprobs", {{{-0.3, 0, nullptr}, {-1.9, 12, nullptr}}}}}}}};
  auto r = ParseScoreAnswer(answer.dump(), TwoSequencesTopTwo(), 0, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].top_ids, (std::vector<int32_t>{7, 3, 4, 4}));
  EXPECT_EQ((*r)[0].top_logprobs, (std::vector<float>{-0.1f, -2.5f, -0.2f, -1.5f}));
  EXPECT_EQ((*r)[1].top_ids, (std::vector<int32_t>{0, 12}));
}

TEST(TeacherClient, RefusesHostileTopKRows) {
  const json good_row = {{-0.1, 7, nullptr}, {-2.5, 3, nullptr}};
  auto second = [](const json& top) {
    return json{{"results",
                 {{{"token_logprobs", {-0.5, -1.5}}, {"top_logprobs", top}},
                  {{"token_logprobs", {-2.0}}, {"top_logprobs", {{{-0.3, 0, nullptr}, {-1.9, 12, nullptr}}}}}}}};
  };
  const json good_second_row = {{-0.1, 7, nullptr}, {-2.5, 3, nullptr}};
  const std::vector<std::pair<json, std::string>> cases = {
      {second(nullptr), "results[0].top_logprobs: expected 2 rows"},
      {second(json::array({good_row})), "results[0].top_logprobs: expected 2 rows"},
      {second({good_row, {{-0.1, 7, nullptr}}}), "results[0].top_logprobs[1]: expected 2 entries"},
      {second({good_row, {{-0.1, -7, nullptr}, {-2.5, 3, nullptr}}}), "results[0].top_logprobs[1][0]: expected [log-prob, token id >= 0"},
      {second({good_row, {{-0.1, 7.5}, {-2.5, 3}}}), "results[0].top_logprobs[1][0]: expected [log-prob, token id >= 0"},
      {second({good_row, {{"x", 7}, {-2.5, 3}}}), "results[0].top_logprobs[1][0][0]: expected a finite number"},
      {second({good_row, {{-0.1, 1LL << 40}, {-2.5, 3}}}), "results[0].top_logprobs[1][0]: expected [log-prob"},
      {second({good_row, {7, good_second_row}}), "results[0].top_logprobs[1][0]: expected [log-prob"},
  };
  for (const auto& [body, expected] : cases) {
    auto r = ParseScoreAnswer(body.dump(), TwoSequencesTopTwo(), 0, 2);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(r.status().message(), HasSubstr(expected)) << body.dump();
  }
}

TEST(TeacherClient, RefusesHostileAnswersNamingWhatWasWrong) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "with 2 results"},
      {{{"results", {{{"token_logprobs", {-0.5, -1.5}}}}}}, "with 2 results"},
      {{{"results", {{{"token_logprobs", {-0.5}}}, {{"token_logprobs", {-2.0}}}}}}, "results[0].token_logprobs: expected 2"},
      {{{"results", {{{"token_logprobs", {-0.5, "x"}}}, {{"token_logprobs", {-2.0}}}}}},
       "results[0].token_logprobs[1]: expected a finite number"},
      {{{"results", {{{"token_logprobs", {-0.5, -1.0}}}, 7}}}, "results[1].token_logprobs"},
  };
  for (const auto& [body, expected] : cases) {
    auto r = ParseScoreAnswer(body.dump(), TwoSequences(), 0, 2);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(r.status().message(), HasSubstr(expected)) << body.dump();
  }
  EXPECT_FALSE(ParseScoreAnswer(std::string(5000, '[') + std::string(5000, ']'), TwoSequences(), 0, 2).ok());
}

TEST(TeacherClient, ATeacherThatNeverAnswersIsADeadlineNotAHang) {
  testing::SilentListener silent;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Score({"127.0.0.1", silent.port}, TwoSequences(), std::chrono::milliseconds(300));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("teacher 127.0.0.1:" + std::to_string(silent.port) + " /score"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tandem::roles

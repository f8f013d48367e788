// POST /score's JSON (score_json.h): what a body may say and the message of
// each refusal (the field's path first), and the response's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "workers/inference/score_json.h"

namespace tandem::inference {
namespace {

using nlohmann::json;

ScoreLimits Limits() {
  ScoreLimits l;
  l.vocab_size = 100;
  l.max_context_length = 8;
  l.max_sequences = 3;
  l.max_tokens = 20;
  l.max_top_k = 5;
  return l;
}

TEST(ScoreJsonTest, AcceptsOneSequenceOrABatchWithDefaults) {
  StatusOr<ScoreRequest> one = ParseScoreBody(R"({"input_ids": [1, 2, 3]})", Limits());
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->sequences, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(one->score_from, (std::vector<int32_t>{1}));
  EXPECT_EQ(one->top_k, 0);
  EXPECT_EQ(one->temperature, 1.0);
  EXPECT_EQ(one->ScoredTokens(), 2);

  StatusOr<ScoreRequest> batch = ParseScoreBody(
      R"({"input_ids": [[1, 2, 3], [4]], "score_from": [3, 1], "top_logprobs_num": 5, "temperature": 0.5})",
      Limits());
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->score_from, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(batch->Tokens(), 4);
  EXPECT_EQ(batch->ScoredTokens(), 0);
  EXPECT_EQ(batch->top_k, 5);

  StatusOr<ScoreRequest> shared = ParseScoreBody(R"({"input_ids": [[1, 2, 3], [4, 5]], "score_from": 2})", Limits());
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_EQ(shared->score_from, (std::vector<int32_t>{2, 2}));
}

TEST(ScoreJsonTest, RefusesWhatTheEngineCannotScoreNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "body: empty"},
      {"[1]", "body: expected a JSON object"},
      {R"({"input_ids": [1], "extra": 1})", "unknown field \"extra\""},
      {R"({"score_from": 1})", "input_ids: required"},
      {R"({"input_ids": []})", "input_ids: expected a non-empty list"},
      {R"({"input_ids": [[1], []]})", "input_ids[1]: empty sequence"},
      {R"({"input_ids": [[1], 2]})", "input_ids[1]: expected a list of token ids"},
      {R"({"input_ids": [1, [2]]})", "input_ids[1]: expected an integer token id"},
      {R"({"input_ids": [1, 100]})", "input_ids[1]: token id 100 outside the vocabulary [0, 100)"},
      {R"({"input_ids": [-1]})", "input_ids[0]: token id -1 outside"},
      {R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9]})", "input_ids: 9 tokens, the context is 8"},
      {R"({"input_ids": [[1], [2], [3], [4]]})", "input_ids: 4 sequences, the limit is 3"},
      {R"({"input_ids": [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5]]})",
       "input_ids: more than 20 tokens"},
      {R"({"input_ids": [1, 2], "score_from": 0})", "score_from: 0 outside [1, 2]"},
      {R"({"input_ids": [1, 2], "score_from": 3})", "score_from: 3 outside [1, 2]"},
      {R"({"input_ids": [[1, 2], [3]], "score_from": [1]})", "score_from: 1 values for 2 sequences"},
      {R"({"input_ids": [[1, 2], [3]], "score_from": [1, 2]})", "score_from[1]: 2 outside [1, 1]"},
      {R"({"input_ids": [[1, 2], [3]], "score_from": 2})", "score_from (sequence 1): 2 outside [1, 1]"},
      {R"({"input_ids": [1], "score_from": "1"})", "score_from: expected an integer or a list of integers"},
      {R"({"input_ids": [1], "top_logprobs_num": 6})", "top_logprobs_num: must lie in [0, 5], got 6"},
      {R"({"input_ids": [1], "top_logprobs_num": 1.5})", "top_logprobs_num: expected an integer"},
      {R"({"input_ids": [1], "temperature": 0})", "temperature: must be a finite number > 0"},
      {R"({"input_ids": [1], "temperature": "hot"})", "temperature: expected a number"},
      {R"({"input_ids": [[[[[1]]]]]})", "body:"},
  };
  for (const auto& [body, want] : cases) {
    StatusOr<ScoreRequest> r = ParseScoreBody(body, Limits());
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << " -> " << r.status().message();
  }
}

TEST(ScoreJsonTest, TheResponseHasOneResultPerSequenceWithTopLogprobsWhenAsked) {
  StatusOr<ScoreRequest> r = ParseScoreBody(R"({"input_ids": [[1, 2, 3], [4, 5]], "top_logprobs_num": 2})", Limits());
  ASSERT_TRUE(r.ok());
  ScoreResult result;
  result.weight_version = 7;
  result.sequences = {{{-0.5f, -1.5f}, {-0.125f, -2.0f, -0.25f, -3.0f}, {2, 9, 3, 8}}, {{-0.25f}, {-0.3f, -1.0f}, {5, 6}}};
  const json j = ScoreResponseJson(*r, result, "12");
  ASSERT_EQ(j.at("results").size(), 2u);
  EXPECT_EQ(j["results"][0]["token_logprobs"], json({-0.5, -1.5}));
  EXPECT_EQ(j["results"][0]["input_tokens"], 3);
  EXPECT_EQ(j["results"][0]["scored_tokens"], 2);
  EXPECT_EQ(j["results"][0]["top_logprobs"][1], json::parse("[[-0.25, 3, null], [-3.0, 8, null]]"));
  EXPECT_EQ(j["results"][1]["top_logprobs"].size(), 1u);
  EXPECT_EQ(j["meta_info"]["id"], "12");
  EXPECT_EQ(j["meta_info"]["weight_version"], "7");
  EXPECT_EQ(j["meta_info"]["input_tokens"], 5);
  EXPECT_EQ(j["meta_info"]["scored_tokens"], 3);

  StatusOr<ScoreRequest> plain = ParseScoreBody(R"({"input_ids": [4, 5]})", Limits());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(ScoreResponseJson(*plain, {{{{-0.25f}, {}, {}}}, 0}, "1")["results"][0].contains("top_logprobs"));
}

}  // namespace
}  // namespace tandem::inference

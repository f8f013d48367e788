// generate_json's parser and response objects, called directly (the HTTP
// tests cover the same through sockets): what a valid body becomes, null as
// the default, per-sample response fields for each finish reason, and the
// streamed text holding back an incomplete UTF-8 character.
#include "workers/inference/generate_json.h"

#include <gtest/gtest.h>

#include "workers/inference/tests/scripted_engine.h"

namespace tandem::inference::testing {
namespace {

using json = nlohmann::json;

GenerateLimits Limits() {
  GenerateLimits l;
  l.vocab_size = 1000;
  l.max_context_length = 512;
  return l;
}

TEST(GenerateJsonTest, AFullBodyBecomesOneRequestPerPrompt) {
  const LetterCodec codec;
  auto b = ParseGenerateBody(R"({"text": ["ab", "c"], "return_logprob": true, "stream": false,
      "sampling_params": {"temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "max_new_tokens": 7,
                          "stop": "zz", "stop_token_ids": [3, 4], "n": 2, "seed": 18446744073709551615,
                          "ignore_eos": true}})",
                             Limits(), &codec);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->prompts.size(), 2u);
  EXPECT_TRUE(b->batch);
  EXPECT_FALSE(b->stream);
  EXPECT_TRUE(b->AnswersList());
  EXPECT_EQ(b->Samples(), 4);
  EXPECT_EQ(b->prompts[0].input_ids, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(b->prompts[1].input_ids, (std::vector<int32_t>{'c'}));
  const SamplingParams& p = b->prompts[1].params;
  EXPECT_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.min_p, 0.1);
  EXPECT_EQ(p.max_new_tokens, 7);
  EXPECT_EQ(p.stop, std::vector<std::string>{"zz"});
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(18446744073709551615ull));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(b->prompts[0].return_logprob);
}

TEST(GenerateJsonTest, NullMeansTheDefault) {
  auto b = ParseGenerateBody(R"({"input_ids": [1], "text": null, "stream": null, "return_logprob": null,
      "sampling_params": {"temperature": null, "stop": null, "seed": null, "n": null}})",
                             Limits(), nullptr);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const SamplingParams defaults;
  EXPECT_EQ(b->prompts[0].params.temperature, defaults.temperature);
  EXPECT_EQ(b->prompts[0].params.max_new_tokens, defaults.max_new_tokens);
  EXPECT_FALSE(b->prompts[0].params.seed.has_value());
  EXPECT_FALSE(b->AnswersList());
  EXPECT_FALSE(b->stream);
}

TEST(GenerateJsonTest, EachFinishReasonHasSglangsShape) {
  const LetterCodec codec;
  GenerateRequest req;
  req.input_ids = {1, 2};
  req.params.stop = {"cd"};
  SampleProgress s;
  s.result = SampleResult{};
  s.result->output_ids = {52, 53, 54, 55};  // letters "abcd"
  s.result->prompt_tokens = 2;
  s.result->completion_tokens = 4;
  s.result->weight_version = 9;

  s.result->finish_reason = FinishReason::kStop;
  s.result->matched_stop = "cd";
  json j = SampleJson(req, "5", s, 1, &codec);
  EXPECT_EQ(j["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", "cd"}}));
  EXPECT_EQ(j["text"], "ab");  // cut before the stop string
  EXPECT_EQ(j["meta_info"]["weight_version"], "9");  // the result's, not the hint
  EXPECT_EQ(j["meta_info"]["id"], "5");

  s.result->matched_stop.clear();  // a stop token: the last output id
  j = SampleJson(req, "5", s, 1, &codec);
  EXPECT_EQ(j["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", 55}}));
  EXPECT_EQ(j["text"], "abcd");

  s.result->finish_reason = FinishReason::kAbort;
  EXPECT_EQ(SampleJson(req, "5", s, 1, &codec)["meta_info"]["finish_reason"], json({{"type", "abort"}}));
  s.result->finish_reason = FinishReason::kLength;
  EXPECT_EQ(SampleJson(req, "5", s, 1, &codec)["meta_info"]["finish_reason"],
            json({{"type", "length"}, {"length", 4}}));
  EXPECT_FALSE(SampleJson(req, "5", s, 1, nullptr).contains("text"));
}

// Decodes to "ok" followed by U+FFFD for each id >= 500 (a character cut in two).
class CutCharCodec : public LetterCodec {
 public:
  StatusOr<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string s = "ok";
    for (const int32_t id : ids)
      if (id >= 500) s += "\xEF\xBF\xBD";
    return s;
  }
};

TEST(GenerateJsonTest, AStreamedChunkHoldsBackAnIncompleteCharacter) {
  const CutCharCodec codec;
  GenerateRequest req;
  req.input_ids = {1};
  SampleProgress running;
  running.output_ids = {600, 601};
  const json j = SampleJson(req, "1", running, 3, &codec);
  EXPECT_EQ(j["text"], "ok");
  EXPECT_TRUE(j["meta_info"]["finish_reason"].is_null());
  EXPECT_EQ(j["meta_info"]["weight_version"], "3");
  EXPECT_EQ(j["meta_info"]["completion_tokens"], 2);
  SampleProgress done;
  done.result = SampleResult{};
  done.result->output_ids = {600};
  EXPECT_EQ(SampleJson(req, "1", done, 3, &codec)["text"], "ok\xEF\xBF\xBD");  // the final text is as decoded
}

}  // namespace
}  // namespace tandem::inference::testing

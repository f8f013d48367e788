// One call's CPU work (proxy_call.h) with the byte-level tokenizer: the
// /generate body, the exact-token prompt of a session's second call, tool
// calls and stop strings in the answer, the turns recorded.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "workers/agents/proxy_call.h"
#include "workers/agents/tool_chat_template.h"
#include "workers/data/byte_tokenizer.h"

namespace tandem::agents {
namespace {

using json = nlohmann::json;

class ProxyCall : public ::testing::Test {
 protected:
  void SetUp() override {
    auto files = data::ByteTokenizerFiles();
    ASSERT_TRUE(files.ok());
    auto t = data::Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
    ASSERT_TRUE(t.ok());
    tok_.emplace(std::move(*t));
    ctx_.tokenizer = &*tok_;
    ctx_.sessions = &sessions_;
    end_ = *tok_->TokenToId(kTurnEnd);
  }
  std::vector<int32_t> Ids(const std::string& text) { return *tok_->Encode(text); }
  // A /generate answer with these outputs (one sample each).
  static std::string GenerateAnswer(const std::vector<std::vector<int32_t>>& outputs, const std::string& finish = "stop") {
    json list = json::array();
    for (const auto& out : outputs) {
      json lps = json::array();
      for (const int32_t id : out) lps.push_back({-0.25, id, nullptr});
      list.push_back({{"output_ids", out},
                      {"meta_info",
                       {{"finish_reason", {{"type", finish}}}, {"weight_version", "7"}, {"output_token_logprobs", lps}}}});
    }
    return (outputs.size() == 1 ? list[0] : list).dump();
  }

  std::optional<data::Tokenizer> tok_;
  SessionStore sessions_;
  CallContext ctx_;
  int32_t end_ = 0;
};

TEST_F(ProxyCall, TheSecondCallOfASessionStartsWithTheFirstCallsExactTokens) {
  auto first = PrepareChat(
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0.5, "seed": 3})", "ep1", ctx_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->prompt_ids, Ids("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  const json body = json::parse(first->generate_body);
  EXPECT_EQ(body["input_ids"].get<std::vector<int32_t>>(), first->prompt_ids);
  EXPECT_EQ(body["sampling_params"]["max_new_tokens"], 8);
  EXPECT_EQ(body["sampling_params"]["seed"], 3);
  EXPECT_EQ(body["sampling_params"]["stop_token_ids"], json::array({end_}));
  EXPECT_EQ(body["return_logprob"], true);

  // The model answers "Yo" and its end token; a tokenisation of the text
  // could differ, the proxy keeps these ids.
  std::vector<int32_t> out = Ids("Yo");
  out.push_back(end_);
  auto done = FinishCall(*first, GenerateAnswer({out}), ctx_, "chatcmpl-1", 100);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  const Choice& c = done->answer.choices.at(0);
  EXPECT_EQ(c.content, "Yo");
  EXPECT_EQ(c.finish_reason, "stop");
  EXPECT_EQ(c.turn, 0);
  EXPECT_EQ(c.weight_version, 7);

  auto second = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                                              {"role": "user", "content": "Again"}], "session_id": "ep1"})",
                            "", ctx_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  std::vector<int32_t> want = first->prompt_ids;
  want.insert(want.end(), out.begin(), out.end());
  const std::vector<int32_t> rest = Ids("\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n");
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(second->prompt_ids, want);
  EXPECT_EQ(second->parent, 0);

  // Stopped on length (no end token): the proxy closes the turn itself.
  auto done2 = FinishCall(*second, GenerateAnswer({Ids("abc")}, "length"), ctx_, "chatcmpl-2", 100);
  ASSERT_TRUE(done2.ok());
  EXPECT_EQ(done2->answer.choices[0].finish_reason, "length");
  auto third = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                                             {"role": "user", "content": "Again"}, {"role": "assistant", "content": "abc"},
                                             {"role": "user", "content": "!"}], "session_id": "ep1"})",
                           "", ctx_);
  ASSERT_TRUE(third.ok());
  std::vector<int32_t> want3 = second->prompt_ids;
  for (const int32_t id : Ids("abc<|im_end|>\n<|im_start|>user\n!<|im_end|>\n<|im_start|>assistant\n")) want3.push_back(id);
  EXPECT_EQ(third->prompt_ids, want3);

  auto e = sessions_.Export("ep1");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->turns.size(), 2u);
  const TokenRecord& r = e->turns[1];
  ASSERT_EQ(r.ids.size(), second->prompt_ids.size() + 3);
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const bool first_output = i >= first->prompt_ids.size() && i < first->prompt_ids.size() + out.size();
    const bool own_output = i >= second->prompt_ids.size();
    EXPECT_EQ(r.mask[i], (first_output || own_output) ? 1 : 0) << i;
  }
}

TEST_F(ProxyCall, TheHeaderSessionWinsAndNoSessionRecordsNothing) {
  auto c = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}], "session_id": "body"})", "header", ctx_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->session_id, "header");
  auto bad = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}]})", "a b", ctx_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("X-Session-Id"), std::string::npos);
  auto none = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}]})", "", ctx_);
  ASSERT_TRUE(none.ok());
  auto done = FinishCall(*none, GenerateAnswer({Ids("x")}), ctx_, "id", 1);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->answer.choices[0].turn, -1);
  EXPECT_EQ(sessions_.sessions(), 1u);  // "header" only
}

TEST_F(ProxyCall, ARefusedCallLeavesNoSessionBehind) {
  auto bad = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}], "session_id": "s1", "top_p": 9})", "", ctx_);
  ASSERT_FALSE(bad.ok());
  SessionLimits tiny;
  tiny.max_tokens = 10;
  SessionStore small(tiny);
  CallContext ctx = ctx_;
  ctx.sessions = &small;
  auto over = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100})", "s2", ctx);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("limit of 10"), std::string::npos) << over.status().message();
  EXPECT_EQ(sessions_.sessions() + small.sessions(), 0u);
}

TEST_F(ProxyCall, ToolCallsStopStringsAndLogprobs) {
  auto c = PrepareChat(R"({"messages": [{"role": "user", "content": "2+2?"}], "n": 2, "logprobs": true,
                           "stop": ["STOP"], "session_id": "t",
                           "tools": [{"type": "function", "function": {"name": "calc"}}]})",
                       "", ctx_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(json::parse(c->generate_body)["sampling_params"]["stop"], json::array({"STOP"}));
  std::vector<int32_t> call = Ids("<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"e\": \"2+2\"}}\n</tool_call>");
  call.push_back(end_);
  auto done = FinishCall(*c, GenerateAnswer({call, Ids("It is 4STOP and more")}), ctx_, "id", 1);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  const Answer& a = done->answer;
  ASSERT_EQ(a.choices.size(), 2u);
  EXPECT_EQ(a.choices[0].finish_reason, "tool_calls");
  ASSERT_EQ(a.choices[0].tool_calls.size(), 1u);
  EXPECT_EQ(a.choices[0].tool_calls[0].name, "calc");
  EXPECT_EQ(a.choices[0].tool_calls[0].arguments, R"({"e": "2+2"})");
  EXPECT_EQ(a.choices[0].tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_FALSE(a.choices[0].content.has_value());
  EXPECT_EQ(a.choices[1].content, "It is 4");
  ASSERT_EQ(a.choices[1].logprobs.size(), Ids("It is 4STOP and more").size());
  EXPECT_FLOAT_EQ(a.choices[1].logprobs[0].logprob, -0.25f);
  EXPECT_EQ(a.choices[1].logprobs[0].token, "I");

  const json j = ChatCompletionJson(a);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"e": "2+2"})");
  EXPECT_EQ(j["usage"]["prompt_tokens"], c->prompt_ids.size());
  EXPECT_EQ(j["tandem"]["turns"], json::array({0, 1}));

  // The client sends the tool call back with the tool's answer: that
  // continues turn 0 exactly.
  const std::string id = a.choices[0].tool_calls[0].id;
  auto next = PrepareChat(
      R"({"messages": [{"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": null, "tool_calls": [{"id": ")" + id +
          R"(", "type": "function", "function": {"name": "calc", "arguments": "{\"e\": \"2+2\"}"}}]},
          {"role": "tool", "tool_call_id": ")" + id + R"(", "content": "4"}],
         "session_id": "t", "tools": [{"type": "function", "function": {"name": "calc"}}]})",
      "", ctx_);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->parent, 0);
  std::vector<int32_t> want = c->prompt_ids;
  want.insert(want.end(), call.begin(), call.end());
  for (const int32_t t : Ids("\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"))
    want.push_back(t);
  EXPECT_EQ(next->prompt_ids, want);
}

TEST_F(ProxyCall, AnAbortedSampleIsRunAgainAndRecordsNothing) {
  auto c = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}], "session_id": "ab"})", "", ctx_);
  ASSERT_TRUE(c.ok());
  auto done = FinishCall(*c, GenerateAnswer({Ids("x")}, "abort"), ctx_, "id", 1);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->aborted);
  EXPECT_TRUE(sessions_.Export("ab")->turns.empty());
}

TEST_F(ProxyCall, ARolloutAnswerThatIsNotWhatWasAskedIsAnError) {
  auto c = PrepareChat(R"({"messages": [{"role": "user", "content": "Hi"}], "n": 2})", "", ctx_);
  ASSERT_TRUE(c.ok());
  for (const std::string& bad : {std::string("nope"), GenerateAnswer({Ids("x")}), std::string(R"([{"output_ids": [1]}, 5])"),
                                  std::string(R"({"output_ids": [-1], "meta_info": {}})")}) {
    auto done = FinishCall(*c, bad, ctx_, "id", 1);
    EXPECT_FALSE(done.ok()) << bad;
  }
}

TEST_F(ProxyCall, CompletionsTakeTextOrIds) {
  auto text = PrepareCompletion(R"({"prompt": "ab", "max_tokens": 2})", "", ctx_);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->prompt_ids, Ids("ab"));
  EXPECT_FALSE(json::parse(text->generate_body)["sampling_params"].contains("stop_token_ids"));
  auto ids = PrepareCompletion(R"({"prompt": [1, 2]})", "s", ctx_);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2}));
  auto big = PrepareCompletion(R"({"prompt": [1, 5000]})", "", ctx_);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("prompt[1]"), std::string::npos);
  auto done = FinishCall(*ids, GenerateAnswer({Ids("zz")}), ctx_, "cmpl-1", 1);
  ASSERT_TRUE(done.ok());
  const json j = CompletionJson(done->answer);
  EXPECT_EQ(j["choices"][0]["text"], "zz");
  EXPECT_EQ(sessions_.Export("s")->turns.at(0).ids, (std::vector<int32_t>{1, 2, Ids("z")[0], Ids("z")[0]}));
}

}  // namespace
}  // namespace tandem::agents

// The OpenAI request bodies (openai_request.h): what is read from good
// bodies, and a table of hostile ones, each refused with OpenAI's error
// shape naming the field (openai_error.h).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "workers/agents/openai_error.h"
#include "workers/agents/openai_request.h"

namespace tandem::agents {
namespace {

TEST(ChatRequest, ReadsMessagesToolsAndSampling) {
  const std::string body = R"({
    "model": "qwen", "n": 3, "temperature": 0.7, "top_p": 0.9, "max_completion_tokens": 50,
    "stop": ["\n\n", "END"], "seed": 7, "logprobs": true, "top_logprobs": 0, "stream": true,
    "stream_options": {"include_usage": true}, "session_id": "ep-1", "user": "u",
    "frequency_penalty": 0, "logit_bias": {}, "parallel_tool_calls": true,
    "chat_template_kwargs": {"enable_thinking": false},
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": \"2+2\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "4"}
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "math",
               "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}],
    "tool_choice": "auto"})";
  auto r = ParseChatRequest(body, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "qwen");
  EXPECT_EQ(r->sampling.n, 3);
  EXPECT_DOUBLE_EQ(r->sampling.temperature, 0.7);
  EXPECT_DOUBLE_EQ(r->sampling.top_p, 0.9);
  EXPECT_EQ(r->sampling.max_tokens, 50);
  EXPECT_EQ(r->sampling.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r->sampling.seed, 7u);
  EXPECT_TRUE(r->sampling.logprobs);
  EXPECT_TRUE(r->sampling.stream);
  EXPECT_TRUE(r->sampling.include_usage);
  EXPECT_EQ(r->session_id, "ep-1");
  EXPECT_EQ(r->enable_thinking, false);
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");  // developer is read as system
  EXPECT_EQ(r->messages[1].content, "What is 2+2?");
  EXPECT_FALSE(r->messages[2].content.has_value());
  ASSERT_EQ(r->messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r->messages[2].tool_calls[0].name, "calc");
  EXPECT_EQ(r->messages[2].tool_calls[0].arguments, R"({"x": "2+2"})");
  EXPECT_EQ(r->messages[3].tool_call_id, "call_1");
  ASSERT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->tools[0].name, "calc");
  EXPECT_TRUE(r->parse_tool_calls);
  // Key order is kept for the template's tojson.
  EXPECT_EQ(r->tools[0].definition["function"].begin().key(), "name");
}

TEST(ChatRequest, TakesBackAClientsOwnMessageObjects) {
  // What the OpenAI Python client's message objects dump to.
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "refusal": null, "function_call": null, "audio": null, "annotations": [],
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
                            {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[1].tool_calls.size(), 1u);
}

TEST(ChatRequest, DefaultsAndToolChoiceNone) {
  auto r = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "none", "max_tokens": null, "temperature": null})",
      {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.n, 1);
  EXPECT_DOUBLE_EQ(r->sampling.temperature, 1.0);
  EXPECT_EQ(r->sampling.max_tokens, RequestLimits{}.default_chat_max_tokens);
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_FALSE(r->sampling.stream);
  EXPECT_TRUE(r->session_id.empty());
}

TEST(CompletionRequest, PromptAsTextOrIds) {
  auto text = ParseCompletionRequest(R"({"prompt": "Once upon", "max_tokens": 5, "logprobs": 0})", {});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->prompt_text, "Once upon");
  EXPECT_TRUE(text->sampling.logprobs);
  auto ids = ParseCompletionRequest(R"({"prompt": [1, 2, 3]})", {});
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids->sampling.max_tokens, 16);  // OpenAI's default for completions
  auto one = ParseCompletionRequest(R"({"prompt": [[4, 5]]})", {});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt_ids, (std::vector<int32_t>{4, 5}));
  auto list = ParseCompletionRequest(R"({"prompt": ["a"]})", {});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->prompt_text, "a");
}

struct Bad {
  const char* param;   // the error's "param" ("" none)
  const char* needle;  // in the message
};

void ExpectRefused(const StatusOr<ChatRequest>& r, const Bad& b) {
  ASSERT_FALSE(r.ok());
  const ApiError e = ApiErrorFrom(r.status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, b.param) << e.message;
  EXPECT_NE(e.message.find(b.needle), std::string::npos) << e.message;
  const auto j = ApiErrorJson(e);
  EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") &&
              j["error"].contains("code"));
}

constexpr const char* kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

std::string With(const std::string& extra) { return "{" + std::string(kMsgs) + ", " + extra + "}"; }

TEST(ChatRequest, HostileBodiesAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, Bad>> table = {
      {"", {"body", "empty"}},
      {"   ", {"body", "empty"}},
      {"[]", {"body", "expected a JSON object"}},
      {"{", {"body", "not valid JSON"}},
      {std::string(R"({"messages": [{"role": "user", "content": "a)") + '\0' + R"(b"}]})", {"body", "NUL"}},
      {std::string(100, '[') + std::string(100, ']'), {"body", "nested deeper"}},
      {"{}", {"messages", "missing"}},
      {R"({"messages": []})", {"messages", "at least one"}},
      {R"({"messages": "hi"})", {"messages", "expected a list"}},
      {R"({"messages": [1]})", {"messages[0]", "expected a message object"}},
      {R"({"messages": [{"content": "x"}]})", {"messages[0].role", "missing"}},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", {"messages[0].role", "robot"}},
      {R"({"messages": [{"role": 3, "content": "x"}]})", {"messages[0].role", "expected a string"}},
      {R"({"messages": [{"role": "user"}]})", {"messages[0].content", "missing"}},
      {R"({"messages": [{"role": "user", "content": 5}]})", {"messages[0].content", "expected a string"}},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       {"messages[0].content[0].type", "image_url"}},
      {R"({"messages": [{"role": "user", "content": "x", "mood": 1}]})", {"messages[0].mood", "unrecognized"}},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       {"messages[0].tool_calls", "only an assistant"}},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]})",
       {"messages[0].tool_calls[0].function.arguments", "expected a string"}},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f", "arguments": "{}"}}]}]})",
       {"messages[0].tool_calls[0].type", "function"}},
      {R"({"messages": [{"role": "assistant", "tool_calls": [7]}]})", {"messages[0].tool_calls[0]", "expected"}},
      {R"({"messages": [{"role": "assistant", "content": null}]})", {"messages[0].content", "missing"}},
      {R"({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]})",
       {"messages[0].tool_call_id", "only a tool"}},
      {With(R"("bogus": 1)"), {"bogus", "unrecognized request argument"}},
      {With(R"("n": 0)"), {"n", "must lie in [1, 64]"}},
      {With(R"("n": 1.5)"), {"n", "expected an integer"}},
      {With(R"("n": "2")"), {"n", "expected an integer"}},
      {With(R"("n": 18446744073709551615)"), {"n", "too large"}},
      {With(R"("temperature": -0.1)"), {"temperature", "[0, 2]"}},
      {With(R"("temperature": "hot")"), {"temperature", "expected a number"}},
      {With(R"("top_p": 0)"), {"top_p", "(0, 1]"}},
      {With(R"("top_p": 1.5)"), {"top_p", "(0, 1]"}},
      {With(R"("max_tokens": 0)"), {"max_tokens", "must lie in"}},
      {With(R"("max_tokens": -5)"), {"max_tokens", "must lie in"}},
      {With(R"("max_tokens": 5, "max_completion_tokens": 5)"), {"max_completion_tokens", "not both"}},
      {With(R"("stop": 3)"), {"stop", "a string or a list"}},
      {With(R"("stop": [""])"), {"stop[0]", "1 to 512 bytes"}},
      {With(R"("stop": ["a", 2])"), {"stop[1]", "expected a string"}},
      {With(R"("stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u","v","w","x","y","z","1","2","3","4","5","6","7"])"),
       {"stop", "at most 32"}},
      {With(R"("seed": -1)"), {"seed", ">= 0"}},
      {With(R"("seed": 1.0)"), {"seed", "expected an integer"}},
      {With(R"("stream": "yes")"), {"stream", "true or false"}},
      {With(R"("stream_options": {"include_usage": 1})"), {"stream_options.include_usage", "true or false"}},
      {With(R"("stream_options": {"x": 1})"), {"stream_options.x", "unrecognized"}},
      {With(R"("logprobs": 1)"), {"logprobs", "true or false"}},
      {With(R"("top_logprobs": 5)"), {"top_logprobs", "sampled token's log-prob only"}},
      {With(R"("top_logprobs": 50)"), {"top_logprobs", "[0, 20]"}},
      {With(R"("frequency_penalty": 0.5)"), {"frequency_penalty", "no penalties"}},
      {With(R"("logit_bias": {"1": 5})"), {"logit_bias", "no logit bias"}},
      {With(R"("response_format": {"type": "json_object"})"), {"response_format.type", "constrained"}},
      {With(R"("tool_choice": "required")"), {"tool_choice", "auto"}},
      {With(R"("tool_choice": {"type": "function", "function": {"name": "f"}})"), {"tool_choice", "auto"}},
      {With(R"("tools": {})"), {"tools", "expected a list"}},
      {With(R"("tools": [{"type": "function"}])"), {"tools[0].function", "expected an object"}},
      {With(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])"), {"tools[0].type", "only function"}},
      {With(R"("tools": [{"type": "function", "function": {"name": ""}}])"), {"tools[0].function.name", "1 to 64"}},
      {With(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])"),
       {"tools[0].function.parameters", "JSON Schema object"}},
      {With(R"("tools": [{"type": "function", "function": {"name": "f", "extra": 1}}])"),
       {"tools[0].function.extra", "unrecognized"}},
      {With(R"("session_id": "")"), {"session_id", "1 to 128"}},
      {With(R"("session_id": "a b")"), {"session_id", "letters, digits"}},
      {With(R"("session_id": 5)"), {"session_id", "expected a string"}},
      {With(R"("chat_template_kwargs": {"enable_thinking": "no"})"),
       {"chat_template_kwargs.enable_thinking", "true or false"}},
      {With(R"("user": 5)"), {"user", "expected a string"}},
      {With(R"("modalities": ["audio"])"), {"modalities", "text chat only"}},
      {R"({"messages": [{"role": "assistant", "content": "x", "function_call": {"name": "f"}}]})",
       {"messages[0].function_call", "tool_calls"}},
      {R"({"messages": [{"role": "assistant", "content": "x", "annotations": [{}]}]})",
       {"messages[0].annotations", "not served"}},
  };
  for (const auto& [body, bad] : table) {
    SCOPED_TRACE(body);
    // FailedPrecondition (an OpenAI field not honoured) is a 400 too.
    ExpectRefused(ParseChatRequest(body, {}), bad);
  }
}

TEST(ChatRequest, AnObjectOfManyKeysIsRefusedInLinearTime) {
  // ordered_json builds an object of n keys in O(n^2): 200k keys would take
  // minutes; the SAX bound refuses them first.
  std::string keys;
  for (int i = 0; i < 200000; ++i) keys += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = ParseChatRequest(With(R"("metadata": {)" + keys + "}"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 4096 keys"), std::string::npos) << r.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(ChatRequest, MutatedBodiesAreParsedOrRefusedNeverACrash) {
  const std::string seed = R"({"model": "m", "n": 2, "temperature": 0.5, "stop": ["x"], "session_id": "s",
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c", "content": "r"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})";
  ASSERT_TRUE(ParseChatRequest(seed, {}).ok());
  std::mt19937 rng(std::random_device{}());
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsn\\u\xff\x00";
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % body.size();
      switch (rng() % 3) {
        case 0: body[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: body.erase(at, 1 + rng() % 8); break;
        default: body.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
      if (body.empty()) body = "{";
    }
    auto r = ParseChatRequest(body, {});
    if (r.ok()) continue;
    ++refused;
    const ApiError e = ApiErrorFrom(r.status());
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_FALSE(e.message.empty());
  }
  EXPECT_GT(refused, 1000);
}

TEST(CompletionRequest, HostileBodiesAreRefusedNamingTheField) {
  RequestLimits limits;
  limits.vocab_size = 100;
  const std::vector<std::pair<std::string, std::string>> table = {
      {"{}", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt[1]"},
      {R"({"prompt": [1, 100]})", "prompt[1]"},
      {R"({"prompt": [1, 2.5]})", "prompt[1]"},
      {R"({"prompt": [[1], [2]]})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [[]]})", "prompt[0]"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"prompt": "x", "logprobs": 3})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "messages": []})", "messages"},
      {R"({"prompt": "x", "n": 65})", "n"},
  };
  for (const auto& [body, param] : table) {
    SCOPED_TRACE(body);
    auto r = ParseCompletionRequest(body, limits);
    ASSERT_FALSE(r.ok());
    const ApiError e = ApiErrorFrom(r.status());
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, param) << e.message;
  }
}

TEST(ApiError, MapsStatusCodesToOpenAiShapes) {
  EXPECT_EQ(ApiErrorFrom(ResourceExhausted("x")).http_status, 429);
  EXPECT_EQ(ApiErrorFrom(Unavailable("x")).http_status, 503);
  EXPECT_EQ(ApiErrorFrom(DeadlineExceeded("x")).http_status, 504);
  EXPECT_EQ(ApiErrorFrom(NotFound("x")).http_status, 404);
  EXPECT_EQ(ApiErrorFrom(Internal("x")).http_status, 500);
  const auto j = ApiErrorJson(ApiErrorFrom(InvalidArgument("messages[0].role: bad")));
  EXPECT_EQ(j["error"]["param"], "messages[0].role");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "invalid_value");
  EXPECT_TRUE(ApiErrorJson(ApiErrorFrom(InvalidArgument("body: not valid JSON")))["error"]["param"] == "body");
  EXPECT_TRUE(ApiErrorJson(ApiErrorFrom(InvalidArgument("no path here")))["error"]["param"].is_null());
}

}  // namespace
}  // namespace tandem::agents

// Qwen's tool-call blocks parsed into OpenAI tool_calls (tool_call_parser.h):
// one call, several, content around them, and malformed blocks left as
// content, never a crash.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "workers/agents/tool_call_parser.h"

namespace tandem::agents {
namespace {

TEST(ToolCallParser, OneCall) {
  const ParsedReply r = ParseToolCalls("<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\"}}\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "calc");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"expr": "2+2"})");
  EXPECT_FALSE(r.content.has_value());
}

TEST(ToolCallParser, SeveralCallsAndContentAroundThem) {
  const ParsedReply r = ParseToolCalls(
      "Let me check both.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>\n{\"arguments\": {\"city\": \"Oslo\"}, \"name\": \"weather\"}\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Paris", "days": [1, 2]})");
  EXPECT_EQ(r.tool_calls[1].name, "weather");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.content, "Let me check both.");
}

TEST(ToolCallParser, ArgumentsAsAStringOrMissing) {
  ParsedReply r = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\":1}\"}</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a":1})");
  r = ParseToolCalls("<tool_call>{\"name\": \"now\"}</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
}

TEST(ToolCallParser, NonAsciiArgumentsAreWrittenAsThemselves) {
  const ParsedReply r = ParseToolCalls("<tool_call>{\"name\": \"w\", \"arguments\": {\"city\": \"Zürich\\n\"}}</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"city\": \"Zürich\\n\"}");
}

TEST(ToolCallParser, MalformedBlocksStayContent) {
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\"}\n",             // never closed
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\"\n</tool_call>",  // bad JSON
      "<tool_call>\n[\"calc\"]\n</tool_call>",                                                // not an object
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                                       // no name
      "<tool_call>\n{\"name\": \"\"}\n</tool_call>",                                          // empty name
      "<tool_call>\n{\"name\": 5}\n</tool_call>",                                             // name not a string
      "<tool_call>\n{\"name\": \"f\", \"arguments\": 3}\n</tool_call>",                      // bad arguments
      "<tool_call></tool_call>",
      "</tool_call><tool_call>",
      "plain text",
      "",
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    const ParsedReply r = ParseToolCalls(text);
    EXPECT_TRUE(r.tool_calls.empty());
    EXPECT_EQ(r.content, text);
  }
  // A bad block beside a good one stays in the content as written.
  const ParsedReply mixed = ParseToolCalls(
      "<tool_call>{\"name\": \"f\"}</tool_call> and <tool_call>{oops}</tool_call>");
  ASSERT_EQ(mixed.tool_calls.size(), 1u);
  EXPECT_EQ(mixed.content, "and <tool_call>{oops}</tool_call>");
}

TEST(ToolCallParser, RandomBytesNeverCrash) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::string> pieces = {"<tool_call>", "</tool_call>", "{", "}", "\"name\"", ":", "\"f\"", ",",
                                           "\"arguments\"", "[", "]", "\n", "\xff", "\\", "\""};
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    const int n = static_cast<int>(rng() % 20);
    for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
    const ParsedReply r = ParseToolCalls(text);
    for (const ToolCall& c : r.tool_calls) EXPECT_FALSE(c.name.empty());
    if (r.tool_calls.empty()) {
      EXPECT_EQ(r.content, text);
    }
  }
  const std::string deep = "<tool_call>" + std::string(100000, '[') + "</tool_call>";
  EXPECT_TRUE(ParseToolCalls(deep).tool_calls.empty());
}

TEST(ToolCallParser, IdsAreOpenAiShaped) {
  const std::string a = NewToolCallId(), b = NewToolCallId();
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace tandem::agents

// A conversation as OpenAI's chat API sends it (docs/agents.md "Requests"):
// messages with roles system, user, assistant and tool, the assistant's tool
// calls, and the function tools the model may call. Plain data; the parser
// is openai_request.h, the Qwen3 rendering tool_chat_template.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::agents {

// One call of a function tool: "arguments" is JSON text, as OpenAI carries
// it (the proxy writes it Python-style, as Qwen's template would: ", " and
// ": ", keys in the model's order).
struct ToolCall {
  std::string id;  // "call_..." (the proxy's); a client's own ids are kept as given
  std::string name;
  std::string arguments;
};

struct Message {
  std::string role;  // "system" ("developer" is read as system), "user", "assistant", "tool"
  std::optional<std::string> content;            // null: an assistant turn with only tool calls
  std::optional<std::string> reasoning_content;  // an assistant's thinking, when given apart
  std::vector<ToolCall> tool_calls;              // assistant only
  std::string tool_call_id;                      // tool only (not rendered)
};

// Equal as the template renders them: role, content (null and "" alike),
// reasoning_content, and each tool call's name and arguments (ids are not
// rendered and not compared).
bool SameRendering(const Message& a, const Message& b);

// A function tool: its name, and the whole definition as the client sent it
// ({"type": "function", "function": {...}}), key order kept, for the
// template's "tojson".
struct Tool {
  std::string name;
  nlohmann::ordered_json definition;
};

}  // namespace tandem::agents

// The model's text as an OpenAI assistant message (docs/agents.md "Tool
// calls"): Qwen's tool-call blocks, "<tool_call>\n{"name": ..., "arguments":
// {...}}\n</tool_call>", become tool_calls; the rest is the content.
// Torch-free; never throws.
//
// A block is well formed when its inner text (whitespace trimmed) is a JSON
// object, at most 64 levels deep, with a non-empty string "name" and
// "arguments" an object (written as JSON text, python_json.h) or a string
// (kept as the model wrote it); a missing "arguments" is "{}". Anything
// else — no closing tag, bad JSON, no name — is left in the content as the
// model wrote it. With at least one well-formed call, the content is the text
// without those blocks, whitespace trimmed, and null when nothing is left;
// with none, the text is the content unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "workers/agents/agent_message.h"

namespace tandem::agents {

struct ParsedReply {
  std::optional<std::string> content;
  std::vector<ToolCall> tool_calls;  // ids empty: the caller names them
};

ParsedReply ParseToolCalls(std::string_view text);

// "call_" and 24 random letters and digits.
std::string NewToolCallId();

}  // namespace tandem::agents

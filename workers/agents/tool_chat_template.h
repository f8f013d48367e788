// Qwen3's chat template with tools, without Jinja (docs/agents.md "Chat
// template"): the text Qwen2.5/Qwen3's tokenizer_config.json chat_template
// renders, written out in C++ beside workers/data/chat_template.h (ChatML).
//
//   tools: a system turn "# Tools ... <tools>\n{tool}\n{tool}\n</tools> ...",
//     the system message's content (if the first message is one) before it,
//     each tool as tojson (python_json.h);
//   assistant tool calls: "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>",
//     A verbatim (OpenAI carries arguments as JSON text);
//   tool results: "<tool_response>\n...\n</tool_response>" inside one user
//     turn per run of consecutive tool messages;
//   thinking: assistant turns after the last user query keep their
//     "<think>" block (reasoning_content, or the text before "</think>"),
//     earlier ones lose it, as Qwen3's template does; with enable_thinking
//     false the generation prompt closes an empty think block.
// Without tools and think blocks this is ChatML, equal to chat_template.h's.
//
// Rendering is into parts: template text (may hold special tokens such as
// <|im_start|>) and data (message contents, tool definitions and tool-call
// fields, where "<|im_end|>" is plain text, so data cannot forge turn
// boundaries; non-special added tokens such as <tool_call> are matched in
// both, as Hugging Face does). EncodeParts gives the ids of encoding the
// joined text as one string, except that specials in data stay text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/agents/agent_message.h"
#include "workers/data/tokenizer.h"

namespace tandem::agents {

struct TemplatePart {
  std::string text;
  bool data = false;
};

struct RenderOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // false: the generation prompt closes an empty think block
};

// The parts of messages[begin, n) as the whole conversation renders them
// (a tool message's turn opener and closer, and whether an assistant turn
// keeps its think block, depend on the others), the tools' system turn first
// when begin == 0, then the generation prompt when asked: a suffix of the
// whole conversation's text.
std::vector<TemplatePart> RenderParts(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                      size_t begin, const RenderOptions& options);
std::string JoinParts(const std::vector<TemplatePart>& parts);

// The ids of `parts` (contract above). InvalidArgument for ill-formed UTF-8;
// FailedPrecondition when the tokenizer lacks <|im_start|> or <|im_end|> as
// special tokens.
StatusOr<std::vector<int32_t>> EncodeParts(const data::Tokenizer& tokenizer, const std::vector<TemplatePart>& parts);

// The template's end-of-turn token (<|im_end|>).
inline constexpr std::string_view kTurnEnd = "<|im_end|>";

}  // namespace tandem::agents

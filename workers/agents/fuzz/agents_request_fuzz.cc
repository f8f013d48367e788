// libFuzzer target: the proxy's parsers on any bytes, as they come from an
// agent (docs/agents.md "Requests", "Tool calls"): the same bytes as a
// /v1/chat/completions body, a /v1/completions body and a model's text with
// tool calls. Nothing may crash, throw, leak or trip a sanitizer. A refused
// body is an InvalidArgument or FailedPrecondition whose OpenAI error dumps
// as JSON; an accepted chat body satisfies what the template is promised
// (1..max messages, known roles, content present unless an assistant with
// tool calls, sampling in range) and renders; an accepted completion body
// has a non-empty prompt with ids in the vocabulary; every parsed tool call
// has a name and arguments. Seeds: tests/fuzz/agents_request/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/bounded_json.h"
#include "workers/agents/openai_error.h"
#include "workers/agents/openai_request.h"
#include "workers/agents/tool_call_parser.h"
#include "workers/agents/tool_chat_template.h"

using namespace tandem;
using namespace tandem::agents;

namespace {

void CheckRefusal(const Status& s) {
  if ((s.code() != StatusCode::kInvalidArgument && s.code() != StatusCode::kFailedPrecondition) || s.message().empty())
    std::abort();
  const ApiError e = ApiErrorFrom(s);
  if (e.http_status != 400) std::abort();
  (void)DumpJson(ApiErrorJson(e));
}

void CheckSampling(const SamplingOptions& s, const RequestLimits& limits) {
  if (s.n < 1 || s.n > limits.max_n || s.temperature < 0 || s.temperature > 2 || !(s.top_p > 0) || s.top_p > 1 ||
      s.max_tokens < 1 || s.max_tokens > limits.max_tokens || s.stop.size() > limits.max_stop)
    std::abort();
  for (const std::string& stop : s.stop)
    if (stop.empty() || stop.size() > limits.max_stop_bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestLimits limits;
  limits.vocab_size = 300;

  auto chat = ParseChatRequest(body, limits);
  if (!chat.ok()) {
    CheckRefusal(chat.status());
  } else {
    CheckSampling(chat->sampling, limits);
    if (chat->messages.empty() || chat->messages.size() > limits.max_messages) std::abort();
    for (const Message& m : chat->messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") std::abort();
      if (!m.content && (m.role != "assistant" || m.tool_calls.empty())) std::abort();
      if (!SameRendering(m, m)) std::abort();
    }
    if (chat->tools.size() > limits.max_tools || (chat->parse_tool_calls && chat->tools.empty())) std::abort();
    for (size_t begin = 0; begin <= chat->messages.size(); begin += 1 + chat->messages.size() / 4)
      (void)JoinParts(RenderParts(chat->messages, chat->tools, begin, {}));
  }

  auto completion = ParseCompletionRequest(body, limits);
  if (!completion.ok()) {
    CheckRefusal(completion.status());
  } else {
    CheckSampling(completion->sampling, limits);
    if (completion->prompt_text ? completion->prompt_text->empty() : completion->prompt_ids.empty()) std::abort();
    for (const int32_t id : completion->prompt_ids)
      if (id < 0 || id >= limits.vocab_size) std::abort();
  }

  const ParsedReply reply = ParseToolCalls(body);
  for (const ToolCall& c : reply.tool_calls)
    if (c.name.empty() || c.arguments.empty()) std::abort();
  if (reply.tool_calls.empty() && reply.content != std::string(body)) std::abort();
  return 0;
}

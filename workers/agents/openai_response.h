// The answers of /v1/chat/completions and /v1/completions in OpenAI's
// shapes (docs/agents.md "Answers"), whole or as server-sent events.
// Torch-free; no I/O.
//
// Streaming (docs/agents.md "Streaming"): a call generated whole is streamed
// by *Events: per choice, a chunk with the role, one with the content, one
// per tool call (whole, with its index), one with the finish reason; then,
// with stream_options.include_usage, a chunk with no choices and the usage;
// then "data: [DONE]". A call forwarded as the rollout generates is built
// from the *ChunkEvent functions (proxy_call.h StreamEvent). Every chunk is
// "data: {json}\n\n".
//
// Each answer also carries "tandem": {"session_id", "turns": [turn id of
// each choice, -1 when not recorded], "weight_versions": [...]}, which
// OpenAI clients ignore.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/agents/agent_message.h"

namespace tandem::agents {

struct TokenLogprob {
  std::string token;          // its text (invalid UTF-8 replaced when dumped)
  std::vector<int> bytes;     // its bytes
  float logprob = 0;
};

struct Choice {
  std::optional<std::string> content;
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;            // "stop", "length", "tool_calls"
  std::vector<TokenLogprob> logprobs;   // when asked
  size_t completion_tokens = 0;
  int64_t turn = -1;
  int64_t weight_version = -1;
};

struct Answer {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  std::vector<Choice> choices;
  size_t prompt_tokens = 0;
  bool logprobs = false;
  bool include_usage = false;  // streaming only
  std::string session_id;
};

// One streamed chunk each, for answers streamed as the rollout generates
// (proxy_call.h's StreamEvent): `a` gives id, created, model (and, for
// UsageEvent, the usage and the tandem field); `delta` and `logprobs` are
// the chunk's.
std::string ChatChunkEvent(const Answer& a, size_t index, const nlohmann::json& delta,
                           const nlohmann::json& finish_reason, const nlohmann::json& logprobs);
std::string CompletionChunkEvent(const Answer& a, size_t index, const std::string& text,
                                 const nlohmann::json& finish_reason, const nlohmann::json& logprobs);
std::string UsageEvent(const Answer& a, bool chat);
// {"content": [...]} of chat, the legacy object of completions, for `tokens`.
nlohmann::json LogprobsJson(const std::vector<TokenLogprob>& tokens, bool chat);

nlohmann::json ChatCompletionJson(const Answer& a);
std::vector<std::string> ChatCompletionEvents(const Answer& a);
nlohmann::json CompletionJson(const Answer& a);
std::vector<std::string> CompletionEvents(const Answer& a);

}  // namespace tandem::agents

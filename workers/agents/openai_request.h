// The bodies of POST /v1/chat/completions and POST /v1/completions (docs/
// agents.md "Requests"), parsed as hostile input. Torch-free; no I/O.
//
// Unknown fields are refused, as OpenAI's own API refuses them
// ("unrecognized request argument"): a typo never silently changes what is
// sampled. OpenAI fields the proxy cannot honour are accepted at their
// neutral value and refused otherwise with a FailedPrecondition naming them
// (frequency_penalty 0, logit_bias {}, top_logprobs 0, tool_choice "auto" or
// "none", response_format {"type": "text"}, echo false, best_of 1, suffix
// null, ...); a few are accepted and ignored (user, metadata, store,
// service_tier, parallel_tool_calls). Every error is an InvalidArgument or
// FailedPrecondition whose message starts with the field's path
// ("messages[2].tool_calls[0].function.arguments: expected a string, got
// object"); openai_error.h turns it into OpenAI's error body. null for an
// optional field means its default. Nothing here throws or recurses deeper
// than the body's depth bound.
//
// Sessions: a call joins a session through the X-Session-Id header (the
// caller passes it) or the body's "session_id"; the header wins. A session
// id is 1 to 128 characters of [A-Za-z0-9._:-].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/agents/agent_message.h"

namespace tandem::agents {

struct RequestLimits {
  size_t max_json_depth = 64;      // tool schemas nest
  size_t max_messages = 4096;
  size_t max_tools = 256;
  int64_t max_n = 64;
  size_t max_stop = 32;             // the rollout's own bound
  size_t max_stop_bytes = 512;
  int64_t max_tokens = 1 << 20;     // the largest max_tokens taken
  int64_t default_chat_max_tokens = 1024;  // chat without max_tokens
  int64_t default_completion_max_tokens = 16;  // OpenAI's default for /v1/completions
  int64_t vocab_size = 0;           // prompt ids must lie in [0, vocab_size); 0: the rollout checks
};

struct SamplingOptions {
  int64_t n = 1;
  double temperature = 1.0;  // [0, 2]
  double top_p = 1.0;        // (0, 1]
  int64_t max_tokens = 0;    // >= 1
  std::vector<std::string> stop;
  std::optional<uint64_t> seed;
  bool logprobs = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct ChatRequest {
  std::string model;
  std::vector<Message> messages;
  std::vector<Tool> tools;
  bool parse_tool_calls = false;         // tools given and tool_choice is not "none"
  std::optional<bool> enable_thinking;   // chat_template_kwargs.enable_thinking
  SamplingOptions sampling;
  std::string session_id;                // body "session_id" ("" none)
};

struct CompletionRequest {
  std::string model;
  std::optional<std::string> prompt_text;  // "prompt": a string (or a list of one)
  std::vector<int32_t> prompt_ids;         // "prompt": token ids (or a list of one such list)
  SamplingOptions sampling;
  std::string session_id;
};

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const RequestLimits& limits);
StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body, const RequestLimits& limits);

// InvalidArgument unless `id` is a valid session id (above); `where` names
// its source ("X-Session-Id", "session_id").
Status CheckSessionId(std::string_view id, std::string_view where);

}  // namespace tandem::agents

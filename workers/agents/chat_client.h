// A workflow's way of talking to a model (workflow.h): one OpenAI
// `POST /v1/chat/completions` at a time, blocking, to the proxy in front of
// the trained model's rollouts, or to any other OpenAI-compatible server (a
// simulated user's model; an external endpoint). Torch-free.
//
// Every call is bounded by `timeout` (connect, write and read together) and
// its answer by 16 MiB; the answer is hostile input: anything but an object
// with a first choice whose message has a string-or-null content and
// well-formed tool calls is InvalidArgument naming the field. An HTTP error
// is Unavailable with the status and the start of the body. The API key is
// sent as "Authorization: Bearer KEY" and never appears in an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/agents/agent_message.h"

namespace tandem::agents {

struct ChatEndpointOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string path = "/v1/chat/completions";
  std::string model = "tandem";
  std::string api_key;  // "" none
  std::chrono::milliseconds timeout{600'000};
};

// "http://HOST:PORT[/PATH]" (PATH defaults to /v1/chat/completions; no TLS:
// https is refused with that reason).
StatusOr<ChatEndpointOptions> ParseChatUrl(std::string_view url);

struct ChatParams {
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t max_tokens = 1024;
  std::optional<int64_t> seed;
};

struct ChatReply {
  std::string content;              // "" when the message has none
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;        // "stop", "length", "tool_calls", ...
  nlohmann::json message;           // choices[0].message as returned: what a next call repeats
};

class ChatClient {
 public:
  explicit ChatClient(ChatEndpointOptions options) : options_(std::move(options)) {}

  // One completion of `messages` (an OpenAI messages array) with `tools`
  // (null: none); `session` is sent as X-Session-Id ("": none).
  StatusOr<ChatReply> Complete(const nlohmann::json& messages, const nlohmann::json& tools, const ChatParams& params,
                               const std::string& session) const;

  const ChatEndpointOptions& options() const { return options_; }

 private:
  ChatEndpointOptions options_;
};

// choices[0] of an answer's body (the contract above).
StatusOr<ChatReply> ParseChatReply(std::string_view body);

}  // namespace tandem::agents

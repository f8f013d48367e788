// One chat completion (chat_client.h).
#include "workers/agents/chat_client.h"

#include "workers/roles/http_post.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

constexpr size_t kMaxAnswerBytes = 16u << 20;

}  // namespace

StatusOr<ChatEndpointOptions> ParseChatUrl(std::string_view url) {
  const std::string where = "chat endpoint url \"" + std::string(url.substr(0, 200)) + "\": ";
  if (url.rfind("https://", 0) == 0)
    return InvalidArgument(where + "https is not supported (no TLS here): put a local http relay in front");
  if (url.rfind("http://", 0) != 0) return InvalidArgument(where + "expected http://HOST:PORT[/PATH]");
  std::string_view rest = url.substr(7);
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  ChatEndpointOptions o;
  if (slash != std::string_view::npos) o.path = std::string(rest.substr(slash));
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return InvalidArgument(where + "expected HOST:PORT");
  o.host = std::string(authority.substr(0, colon));
  const std::string_view port = authority.substr(colon + 1);
  int p = 0;
  for (const char c : port) {
    if (c < '0' || c > '9' || p > 65535) return InvalidArgument(where + "bad port");
    p = p * 10 + (c - '0');
  }
  if (port.empty() || p < 1 || p > 65535) return InvalidArgument(where + "bad port");
  o.port = p;
  return o;
}

StatusOr<ChatReply> ParseChatReply(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("chat answer: not a JSON object");
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object())
    return InvalidArgument("chat answer: choices: expected a non-empty array of objects");
  const json& choice = (*choices)[0];
  const auto message = choice.find("message");
  if (message == choice.end() || !message->is_object())
    return InvalidArgument("chat answer: choices[0].message: expected an object");
  ChatReply r;
  r.message = *message;
  const auto content = message->find("content");
  if (content != message->end() && !content->is_null()) {
    if (!content->is_string()) return InvalidArgument("chat answer: choices[0].message.content: expected a string or null");
    r.content = content->get<std::string>();
  }
  const auto calls = message->find("tool_calls");
  if (calls != message->end() && !calls->is_null()) {
    if (!calls->is_array()) return InvalidArgument("chat answer: choices[0].message.tool_calls: expected an array");
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& c = (*calls)[i];
      const std::string where = "chat answer: choices[0].message.tool_calls[" + std::to_string(i) + "]";
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
        return InvalidArgument(where + ": expected an object with a function");
      const json& f = c["function"];
      if (!f.contains("name") || !f["name"].is_string() || !f.contains("arguments") || !f["arguments"].is_string())
        return InvalidArgument(where + ".function: expected string name and arguments");
      ToolCall t;
      t.id = c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
      t.name = f["name"].get<std::string>();
      t.arguments = f["arguments"].get<std::string>();
      r.tool_calls.push_back(std::move(t));
    }
  }
  const auto finish = choice.find("finish_reason");
  if (finish != choice.end() && finish->is_string()) r.finish_reason = finish->get<std::string>();
  return r;
}

StatusOr<ChatReply> ChatClient::Complete(const json& messages, const json& tools, const ChatParams& params,
                                         const std::string& session) const {
  json body = {{"model", options_.model},
               {"messages", messages},
               {"temperature", params.temperature},
               {"top_p", params.top_p},
               {"max_tokens", params.max_tokens}};
  if (!tools.is_null()) body["tools"] = tools;
  if (params.seed) body["seed"] = *params.seed;
  std::vector<std::pair<std::string, std::string>> headers;
  if (!session.empty()) headers.emplace_back("X-Session-Id", session);
  if (!options_.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + options_.api_key);
  const std::string where = "chat " + options_.host + ":" + std::to_string(options_.port) + options_.path;
  TANDEM_ASSIGN_OR_RETURN(const std::string answer,
                          roles::PostJson(options_.host, options_.port, options_.path, body.dump(), options_.timeout, where,
                                          kMaxAnswerBytes, headers));
  return ParseChatReply(answer);
}

}  // namespace tandem::agents

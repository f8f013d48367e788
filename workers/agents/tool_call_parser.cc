// Tool-call blocks in the model's text (tool_call_parser.h).
#include "workers/agents/tool_call_parser.h"

#include <random>

#include "workers/agents/ordered_json.h"
#include "workers/agents/python_json.h"

namespace tandem::agents {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::optional<ToolCall> ParseBlock(std::string_view inner) {
  auto parsed = ParseOrderedJson(Trim(inner), 64);
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const auto name = parsed->find("name");
  if (name == parsed->end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  const auto args = parsed->find("arguments");
  if (args == parsed->end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = PythonJsonDumps(*args);
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    return std::nullopt;
  }
  return call;
}

}  // namespace

ParsedReply ParseToolCalls(std::string_view text) {
  ParsedReply out;
  std::string rest;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) break;  // unclosed: content
    std::optional<ToolCall> call = ParseBlock(text.substr(open + kOpen.size(), close - open - kOpen.size()));
    const size_t end = close + kClose.size();
    if (call) {
      rest += text.substr(pos, open - pos);
      out.tool_calls.push_back(std::move(*call));
    } else {
      rest += text.substr(pos, end - pos);
    }
    pos = end;
  }
  if (out.tool_calls.empty()) {
    out.content = std::string(text);
    return out;
  }
  rest += text.substr(pos);
  const std::string_view trimmed = Trim(rest);
  if (!trimmed.empty()) out.content = std::string(trimmed);
  return out;
}

std::string NewToolCallId() {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

}  // namespace tandem::agents

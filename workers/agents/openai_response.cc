// OpenAI answer shapes (openai_response.h).
#include "workers/agents/openai_response.h"

#include "common/bounded_json.h"

namespace tandem::agents {
namespace {

using json = nlohmann::json;

json Usage(const Answer& a) {
  size_t completion = 0;
  for (const Choice& c : a.choices) completion += c.completion_tokens;
  return {{"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", a.prompt_tokens + completion}};
}

json Tandem(const Answer& a) {
  json turns = json::array(), versions = json::array();
  for (const Choice& c : a.choices) {
    turns.push_back(c.turn);
    versions.push_back(c.weight_version);
  }
  return {{"session_id", a.session_id.empty() ? json(nullptr) : json(a.session_id)},
          {"turns", turns},
          {"weight_versions", versions}};
}

json OptionalString(const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); }

json ToolCallJson(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json ChatLogprobs(const Choice& c) {
  json content = json::array();
  for (const TokenLogprob& t : c.logprobs)
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", t.bytes}, {"top_logprobs", json::array()}});
  return {{"content", content}};
}

json CompletionLogprobs(const Choice& c) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const TokenLogprob& t : c.logprobs) {
    tokens.push_back(t.token);
    lps.push_back(t.logprob);
    tops.push_back(nullptr);
    offsets.push_back(offset);
    offset += t.bytes.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string Event(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

json ChunkHead(const Answer& a, const char* object) {
  return {{"id", a.id}, {"object", object}, {"created", a.created}, {"model", a.model}};
}

}  // namespace

std::string ChatChunkEvent(const Answer& a, size_t index, const json& delta, const json& finish_reason,
                           const json& logprobs) {
  json j = ChunkHead(a, "chat.completion.chunk");
  j["choices"] = json::array(
      {{{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}});
  return Event(j);
}

std::string CompletionChunkEvent(const Answer& a, size_t index, const std::string& text, const json& finish_reason,
                                 const json& logprobs) {
  json j = ChunkHead(a, "text_completion");
  j["choices"] =
      json::array({{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}});
  return Event(j);
}

std::string UsageEvent(const Answer& a, bool chat) {
  json j = ChunkHead(a, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = Usage(a);
  j["tandem"] = Tandem(a);
  return Event(j);
}

json LogprobsJson(const std::vector<TokenLogprob>& tokens, bool chat) {
  Choice c;
  c.logprobs = tokens;
  return chat ? ChatLogprobs(c) : CompletionLogprobs(c);
}

json ChatCompletionJson(const Answer& a) {
  json choices = json::array();
  for (size_t i = 0; i < a.choices.size(); ++i) {
    const Choice& c = a.choices[i];
    json message = {{"role", "assistant"}, {"content", OptionalString(c.content)}};
    if (!c.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& t : c.tool_calls) calls.push_back(ToolCallJson(t));
      message["tool_calls"] = calls;
    }
    choices.push_back({{"index", i},
                       {"message", message},
                       {"logprobs", a.logprobs ? ChatLogprobs(c) : json(nullptr)},
                       {"finish_reason", c.finish_reason}});
  }
  json out = ChunkHead(a, "chat.completion");
  out["choices"] = choices;
  out["usage"] = Usage(a);
  out["tandem"] = Tandem(a);
  return out;
}

std::vector<std::string> ChatCompletionEvents(const Answer& a) {
  std::vector<std::string> out;
  auto chunk = [&](size_t index, json delta, json finish, json logprobs) {
    json j = ChunkHead(a, "chat.completion.chunk");
    j["choices"] = json::array(
        {{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}}});
    out.push_back(Event(j));
  };
  for (size_t i = 0; i < a.choices.size(); ++i) {
    const Choice& c = a.choices[i];
    chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
    if (c.content && !c.content->empty())
      chunk(i, {{"content", *c.content}}, nullptr, a.logprobs ? ChatLogprobs(c) : json(nullptr));
    for (size_t k = 0; k < c.tool_calls.size(); ++k) {
      json call = ToolCallJson(c.tool_calls[k]);
      call["index"] = k;
      chunk(i, {{"tool_calls", json::array({call})}}, nullptr, nullptr);
    }
    chunk(i, json::object(), c.finish_reason, nullptr);
  }
  if (a.include_usage) {
    json j = ChunkHead(a, "chat.completion.chunk");
    j["choices"] = json::array();
    j["usage"] = Usage(a);
    j["tandem"] = Tandem(a);
    out.push_back(Event(j));
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

json CompletionJson(const Answer& a) {
  json choices = json::array();
  for (size_t i = 0; i < a.choices.size(); ++i) {
    const Choice& c = a.choices[i];
    choices.push_back({{"index", i},
                       {"text", c.content.value_or("")},
                       {"logprobs", a.logprobs ? CompletionLogprobs(c) : json(nullptr)},
                       {"finish_reason", c.finish_reason}});
  }
  json out = ChunkHead(a, "text_completion");
  out["choices"] = choices;
  out["usage"] = Usage(a);
  out["tandem"] = Tandem(a);
  return out;
}

std::vector<std::string> CompletionEvents(const Answer& a) {
  std::vector<std::string> out;
  for (size_t i = 0; i < a.choices.size(); ++i) {
    const Choice& c = a.choices[i];
    json j = ChunkHead(a, "text_completion");
    j["choices"] = json::array({{{"index", i},
                                 {"text", c.content.value_or("")},
                                 {"logprobs", a.logprobs ? CompletionLogprobs(c) : json(nullptr)},
                                 {"finish_reason", nullptr}}});
    out.push_back(Event(j));
    j["choices"] = json::array({{{"index", i}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}}});
    out.push_back(Event(j));
  }
  if (a.include_usage) {
    json j = ChunkHead(a, "text_completion");
    j["choices"] = json::array();
    j["usage"] = Usage(a);
    out.push_back(Event(j));
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

}  // namespace tandem::agents

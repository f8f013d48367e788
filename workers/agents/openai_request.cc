// Parsing the OpenAI request bodies (openai_request.h).
#include "workers/agents/openai_request.h"

#include <algorithm>
#include <cctype>
#include <array>
#include <cmath>
#include <limits>

#include "workers/agents/ordered_json.h"

namespace tandem::agents {
namespace {

using Json = nlohmann::ordered_json;

std::string Quote(std::string_view key) {
  constexpr size_t kMax = 64;
  return "\"" + std::string(key.substr(0, kMax)) + (key.size() > kMax ? "...\"" : "\"");
}
std::string At(std::string_view path, size_t i) { return std::string(path) + "[" + std::to_string(i) + "]"; }
std::string Dot(std::string_view path, std::string_view key) { return std::string(path) + "." + std::string(key); }

Status WrongType(std::string_view path, std::string_view expected, const Json& got) {
  return InvalidArgument(std::string(path) + ": expected " + std::string(expected) + ", got " + got.type_name());
}
Status Unsupported(std::string_view path, std::string_view what) {
  return FailedPrecondition(std::string(path) + ": " + std::string(what));
}

template <size_t N>
Status OnlyKnown(const Json& obj, std::string_view path, const std::array<std::string_view, N>& known) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    const std::string where = path.empty() ? Quote(key) : Dot(path, Quote(key));
    return InvalidArgument((path.empty() ? std::string(key.substr(0, 64)) : Dot(path, key.substr(0, 64))) +
                           ": unrecognized request argument " + where + " (known: " + list + ")");
  }
  return Status::Ok();
}

// The value of `key`, or null when absent.
const Json& Field(const Json& obj, std::string_view key) {
  static const Json kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

StatusOr<std::string> AsString(const Json& v, std::string_view path) {
  if (!v.is_string()) return WrongType(path, "a string", v);
  return v.get<std::string>();
}
StatusOr<bool> AsBool(const Json& v, std::string_view path) {
  if (!v.is_boolean()) return WrongType(path, "true or false", v);
  return v.get<bool>();
}
StatusOr<double> AsNumber(const Json& v, std::string_view path) {
  if (!v.is_number()) return WrongType(path, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return InvalidArgument(std::string(path) + ": must be finite");
  return d;
}
StatusOr<int64_t> AsInt(const Json& v, std::string_view path) {
  if (!v.is_number_integer()) return WrongType(path, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(std::string(path) + ": " + std::to_string(v.get<uint64_t>()) + " is too large");
  return v.get<int64_t>();
}
StatusOr<int64_t> IntIn(const Json& v, std::string_view path, int64_t lo, int64_t hi) {
  TANDEM_ASSIGN_OR_RETURN(const int64_t i, AsInt(v, path));
  if (i < lo || i > hi)
    return InvalidArgument(std::string(path) + ": must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], got " + std::to_string(i));
  return i;
}

// A body: a JSON object within the depth bound.
StatusOr<Json> ParseBody(std::string_view text, size_t max_depth) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return InvalidArgument("body: empty; expected a JSON object");
  auto parsed = ParseOrderedJson(text, max_depth);
  if (!parsed.ok()) return parsed.status().WithContext("body");
  if (!parsed->is_object()) return WrongType("body", "a JSON object", *parsed);
  return parsed;
}

// The fields both endpoints share (each endpoint lists them again with its own).
Status ParseSampling(const Json& b, const RequestLimits& limits, int64_t default_max_tokens, SamplingOptions* s,
                     std::string* model, std::string* session_id) {
  if (const Json& v = Field(b, "model"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(*model, AsString(v, "model"));
  }
  if (const Json& v = Field(b, "n"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(s->n, IntIn(v, "n", 1, limits.max_n));
  }
  if (const Json& v = Field(b, "temperature"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(s->temperature, AsNumber(v, "temperature"));
    if (s->temperature < 0 || s->temperature > 2)
      return InvalidArgument("temperature: must lie in [0, 2], got " + v.dump());
  }
  if (const Json& v = Field(b, "top_p"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(s->top_p, AsNumber(v, "top_p"));
    if (s->top_p <= 0 || s->top_p > 1) return InvalidArgument("top_p: must lie in (0, 1], got " + v.dump());
  }
  s->max_tokens = default_max_tokens;
  if (const Json& v = Field(b, "max_tokens"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(s->max_tokens, IntIn(v, "max_tokens", 1, limits.max_tokens));
  }
  if (const Json& v = Field(b, "stop"); !v.is_null()) {
    if (v.is_string()) {
      s->stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      if (v.size() > limits.max_stop)
        return InvalidArgument("stop: at most " + std::to_string(limits.max_stop) + " strings, got " +
                               std::to_string(v.size()));
      for (size_t i = 0; i < v.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(std::string stop, AsString(v[i], At("stop", i)));
        s->stop.push_back(std::move(stop));
      }
    } else {
      return WrongType("stop", "a string or a list of strings", v);
    }
    for (size_t i = 0; i < s->stop.size(); ++i)
      if (s->stop[i].empty() || s->stop[i].size() > limits.max_stop_bytes)
        return InvalidArgument(At("stop", i) + ": must hold 1 to " + std::to_string(limits.max_stop_bytes) + " bytes");
  }
  if (const Json& v = Field(b, "seed"); !v.is_null()) {
    if (!v.is_number_integer()) return WrongType("seed", "an integer", v);
    if (!v.is_number_unsigned() && v.get<int64_t>() < 0) return InvalidArgument("seed: must be >= 0, got " + v.dump());
    s->seed = v.get<uint64_t>();
  }
  if (const Json& v = Field(b, "stream"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(s->stream, AsBool(v, "stream"));
  }
  if (const Json& v = Field(b, "stream_options"); !v.is_null()) {
    if (!v.is_object()) return WrongType("stream_options", "an object", v);
    TANDEM_RETURN_IF_ERROR(OnlyKnown(v, "stream_options", std::array<std::string_view, 1>{"include_usage"}));
    if (const Json& u = Field(v, "include_usage"); !u.is_null()) {
      TANDEM_ASSIGN_OR_RETURN(s->include_usage, AsBool(u, "stream_options.include_usage"));
    }
  }
  if (const Json& v = Field(b, "session_id"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(*session_id, AsString(v, "session_id"));
    TANDEM_RETURN_IF_ERROR(CheckSessionId(*session_id, "session_id"));
  }
  if (const Json& v = Field(b, "user"); !v.is_null() && !v.is_string()) return WrongType("user", "a string", v);
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    if (const Json& v = Field(b, key); !v.is_null()) {
      TANDEM_ASSIGN_OR_RETURN(const double p, AsNumber(v, key));
      if (p != 0) return Unsupported(key, "the rollout has no penalties; only 0 is accepted");
    }
  }
  if (const Json& v = Field(b, "logit_bias"); !v.is_null()) {
    if (!v.is_object()) return WrongType("logit_bias", "an object", v);
    if (!v.empty()) return Unsupported("logit_bias", "the rollout has no logit bias; only {} is accepted");
  }
  if (const Json& v = Field(b, "metadata"); !v.is_null() && !v.is_object())
    return WrongType("metadata", "an object", v);
  if (const Json& v = Field(b, "store"); !v.is_null() && !v.is_boolean()) return WrongType("store", "true or false", v);
  return Status::Ok();
}

// A message's "content": a string, null, or a list of text parts (joined).
StatusOr<std::optional<std::string>> ParseContent(const Json& v, std::string_view path) {
  if (v.is_null()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (!v.is_array()) return WrongType(path, "a string, null or a list of text parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = At(path, i);
    if (!v[i].is_object()) return WrongType(p, "a content part object", v[i]);
    TANDEM_ASSIGN_OR_RETURN(const std::string type, AsString(Field(v[i], "type"), Dot(p, "type")));
    if (type != "text") return Unsupported(Dot(p, "type"), "only text parts are served, got " + Quote(type));
    TANDEM_RETURN_IF_ERROR(OnlyKnown(v[i], p, std::array<std::string_view, 2>{"type", "text"}));
    TANDEM_ASSIGN_OR_RETURN(const std::string t, AsString(Field(v[i], "text"), Dot(p, "text")));
    text += t;
  }
  return std::optional<std::string>(std::move(text));
}

StatusOr<ToolCall> ParseToolCall(const Json& v, const std::string& path) {
  if (!v.is_object()) return WrongType(path, "a tool call object", v);
  TANDEM_RETURN_IF_ERROR(OnlyKnown(v, path, std::array<std::string_view, 4>{"id", "type", "function", "index"}));
  ToolCall c;
  if (const Json& id = Field(v, "id"); !id.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(c.id, AsString(id, Dot(path, "id")));
  }
  if (const Json& t = Field(v, "type"); !t.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const std::string type, AsString(t, Dot(path, "type")));
    if (type != "function") return InvalidArgument(Dot(path, "type") + ": expected \"function\", got " + Quote(type));
  }
  const std::string fp = Dot(path, "function");
  const Json& f = Field(v, "function");
  if (!f.is_object()) return WrongType(fp, "an object with name and arguments", f);
  TANDEM_RETURN_IF_ERROR(OnlyKnown(f, fp, std::array<std::string_view, 2>{"name", "arguments"}));
  TANDEM_ASSIGN_OR_RETURN(c.name, AsString(Field(f, "name"), Dot(fp, "name")));
  TANDEM_ASSIGN_OR_RETURN(c.arguments, AsString(Field(f, "arguments"), Dot(fp, "arguments")));
  return c;
}

StatusOr<Message> ParseMessage(const Json& v, const std::string& path) {
  if (!v.is_object()) return WrongType(path, "a message object", v);
  // function_call, audio and annotations: what a client's own message
  // objects carry when sent back (null, or no annotations).
  TANDEM_RETURN_IF_ERROR(OnlyKnown(v, path,
                                   std::array<std::string_view, 10>{"role", "content", "name", "tool_calls",
                                                                    "tool_call_id", "reasoning_content", "refusal",
                                                                    "function_call", "audio", "annotations"}));
  for (const char* key : {"function_call", "audio"})
    if (!Field(v, key).is_null()) return Unsupported(Dot(path, key), "not served (use tool_calls)");
  if (const Json& a = Field(v, "annotations"); !a.is_null() && !(a.is_array() && a.empty()))
    return Unsupported(Dot(path, "annotations"), "not served");
  Message m;
  const Json& role = Field(v, "role");
  if (role.is_null()) return InvalidArgument(Dot(path, "role") + ": missing");
  TANDEM_ASSIGN_OR_RETURN(m.role, AsString(role, Dot(path, "role")));
  if (m.role == "developer") m.role = "system";
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    return InvalidArgument(Dot(path, "role") + ": expected one of system, developer, user, assistant, tool, got " +
                           Quote(m.role));
  TANDEM_ASSIGN_OR_RETURN(m.content, ParseContent(Field(v, "content"), Dot(path, "content")));
  if (const Json& n = Field(v, "name"); !n.is_null() && !n.is_string()) return WrongType(Dot(path, "name"), "a string", n);
  if (const Json& r = Field(v, "refusal"); !r.is_null() && !r.is_string())
    return WrongType(Dot(path, "refusal"), "a string", r);
  if (const Json& r = Field(v, "reasoning_content"); !r.is_null()) {
    if (m.role != "assistant") return InvalidArgument(Dot(path, "reasoning_content") + ": only an assistant has it");
    TANDEM_ASSIGN_OR_RETURN(m.reasoning_content, AsString(r, Dot(path, "reasoning_content")));
  }
  if (const Json& calls = Field(v, "tool_calls"); !calls.is_null()) {
    const std::string cp = Dot(path, "tool_calls");
    if (m.role != "assistant") return InvalidArgument(cp + ": only an assistant makes tool calls");
    if (!calls.is_array()) return WrongType(cp, "a list of tool calls", calls);
    for (size_t i = 0; i < calls.size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(ToolCall c, ParseToolCall(calls[i], At(cp, i)));
      m.tool_calls.push_back(std::move(c));
    }
  }
  if (m.role == "tool") {
    const Json& id = Field(v, "tool_call_id");
    if (!id.is_null()) {
      TANDEM_ASSIGN_OR_RETURN(m.tool_call_id, AsString(id, Dot(path, "tool_call_id")));
    }
  } else if (!Field(v, "tool_call_id").is_null()) {
    return InvalidArgument(Dot(path, "tool_call_id") + ": only a tool message has it");
  }
  if (!m.content && (m.role != "assistant" || m.tool_calls.empty()))
    return InvalidArgument(Dot(path, "content") + ": missing (only an assistant with tool_calls may have none)");
  return m;
}

StatusOr<Tool> ParseTool(const Json& v, const std::string& path) {
  if (!v.is_object()) return WrongType(path, "a tool object", v);
  TANDEM_RETURN_IF_ERROR(OnlyKnown(v, path, std::array<std::string_view, 2>{"type", "function"}));
  TANDEM_ASSIGN_OR_RETURN(const std::string type, AsString(Field(v, "type"), Dot(path, "type")));
  if (type != "function") return Unsupported(Dot(path, "type"), "only function tools are served, got " + Quote(type));
  const std::string fp = Dot(path, "function");
  const Json& f = Field(v, "function");
  if (!f.is_object()) return WrongType(fp, "an object", f);
  TANDEM_RETURN_IF_ERROR(OnlyKnown(f, fp, std::array<std::string_view, 4>{"name", "description", "parameters", "strict"}));
  Tool t;
  TANDEM_ASSIGN_OR_RETURN(t.name, AsString(Field(f, "name"), Dot(fp, "name")));
  if (t.name.empty() || t.name.size() > 64) return InvalidArgument(Dot(fp, "name") + ": must hold 1 to 64 characters");
  if (const Json& d = Field(f, "description"); !d.is_null() && !d.is_string())
    return WrongType(Dot(fp, "description"), "a string", d);
  if (const Json& p = Field(f, "parameters"); !p.is_null() && !p.is_object())
    return WrongType(Dot(fp, "parameters"), "a JSON Schema object", p);
  if (const Json& s = Field(f, "strict"); !s.is_null() && !s.is_boolean())
    return WrongType(Dot(fp, "strict"), "true or false", s);
  t.definition = v;
  return t;
}

}  // namespace

Status CheckSessionId(std::string_view id, std::string_view where) {
  if (id.empty() || id.size() > 128)
    return InvalidArgument(std::string(where) + ": a session id holds 1 to 128 characters");
  for (const char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-'))
      return InvalidArgument(std::string(where) + ": a session id holds only letters, digits and . _ : -");
  return Status::Ok();
}

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const RequestLimits& limits) {
  TANDEM_ASSIGN_OR_RETURN(const Json b, ParseBody(body, limits.max_json_depth));
  static constexpr std::array<std::string_view, 30> kKnown = {
      "model", "n", "temperature", "top_p", "max_tokens", "stop", "seed", "stream", "stream_options",
      "session_id", "user", "frequency_penalty", "presence_penalty", "logit_bias", "metadata", "store",
      // chat only
      "messages", "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens", "logprobs",
      "top_logprobs", "response_format", "chat_template_kwargs", "service_tier", "reasoning_effort",
      "modalities", "prediction", "audio"};
  TANDEM_RETURN_IF_ERROR(OnlyKnown(b, "", kKnown));
  ChatRequest r;
  TANDEM_RETURN_IF_ERROR(
      ParseSampling(b, limits, limits.default_chat_max_tokens, &r.sampling, &r.model, &r.session_id));
  if (const Json& v = Field(b, "max_completion_tokens"); !v.is_null()) {
    if (!Field(b, "max_tokens").is_null())
      return InvalidArgument("max_completion_tokens: give max_tokens or max_completion_tokens, not both");
    TANDEM_ASSIGN_OR_RETURN(r.sampling.max_tokens, IntIn(v, "max_completion_tokens", 1, limits.max_tokens));
  }
  if (const Json& v = Field(b, "logprobs"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(r.sampling.logprobs, AsBool(v, "logprobs"));
  }
  if (const Json& v = Field(b, "top_logprobs"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t k, IntIn(v, "top_logprobs", 0, 20));
    if (k > 0) return Unsupported("top_logprobs", "the rollout reports the sampled token's log-prob only; use 0");
  }
  for (const char* key : {"modalities", "prediction", "audio"})
    if (!Field(b, key).is_null()) return Unsupported(key, "text chat only");
  if (const Json& v = Field(b, "response_format"); !v.is_null()) {
    if (!v.is_object()) return WrongType("response_format", "an object", v);
    const Json& t = Field(v, "type");
    if (!t.is_string() || t.get<std::string>() != "text")
      return Unsupported("response_format.type", "only {\"type\": \"text\"} (no constrained decoding)");
  }
  if (const Json& v = Field(b, "parallel_tool_calls"); !v.is_null() && !v.is_boolean())
    return WrongType("parallel_tool_calls", "true or false", v);
  for (const char* key : {"service_tier", "reasoning_effort"})
    if (const Json& v = Field(b, key); !v.is_null() && !v.is_string()) return WrongType(key, "a string", v);
  if (const Json& v = Field(b, "chat_template_kwargs"); !v.is_null()) {
    if (!v.is_object()) return WrongType("chat_template_kwargs", "an object", v);
    TANDEM_RETURN_IF_ERROR(OnlyKnown(v, "chat_template_kwargs", std::array<std::string_view, 1>{"enable_thinking"}));
    if (const Json& e = Field(v, "enable_thinking"); !e.is_null()) {
      TANDEM_ASSIGN_OR_RETURN(const bool on, AsBool(e, "chat_template_kwargs.enable_thinking"));
      r.enable_thinking = on;
    }
  }

  const Json& msgs = Field(b, "messages");
  if (msgs.is_null()) return InvalidArgument("messages: missing");
  if (!msgs.is_array()) return WrongType("messages", "a list of messages", msgs);
  if (msgs.empty()) return InvalidArgument("messages: must hold at least one message");
  if (msgs.size() > limits.max_messages)
    return InvalidArgument("messages: at most " + std::to_string(limits.max_messages) + " messages, got " +
                           std::to_string(msgs.size()));
  for (size_t i = 0; i < msgs.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(Message m, ParseMessage(msgs[i], At("messages", i)));
    r.messages.push_back(std::move(m));
  }

  if (const Json& tools = Field(b, "tools"); !tools.is_null()) {
    if (!tools.is_array()) return WrongType("tools", "a list of tools", tools);
    if (tools.size() > limits.max_tools)
      return InvalidArgument("tools: at most " + std::to_string(limits.max_tools) + " tools, got " +
                             std::to_string(tools.size()));
    for (size_t i = 0; i < tools.size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(Tool t, ParseTool(tools[i], At("tools", i)));
      r.tools.push_back(std::move(t));
    }
  }
  r.parse_tool_calls = !r.tools.empty();
  if (const Json& v = Field(b, "tool_choice"); !v.is_null()) {
    if (!v.is_string()) return Unsupported("tool_choice", "only \"auto\" or \"none\" (no constrained decoding)");
    const std::string choice = v.get<std::string>();
    if (choice == "none") {
      r.parse_tool_calls = false;
    } else if (choice != "auto") {
      return Unsupported("tool_choice", "only \"auto\" or \"none\" (no constrained decoding), got " + Quote(choice));
    }
  }
  return r;
}

StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body, const RequestLimits& limits) {
  TANDEM_ASSIGN_OR_RETURN(const Json b, ParseBody(body, limits.max_json_depth));
  static constexpr std::array<std::string_view, 21> kKnown = {
      "model", "n", "temperature", "top_p", "max_tokens", "stop", "seed", "stream", "stream_options",
      "session_id", "user", "frequency_penalty", "presence_penalty", "logit_bias", "metadata", "store",
      // completions only
      "prompt", "logprobs", "echo", "best_of", "suffix"};
  TANDEM_RETURN_IF_ERROR(OnlyKnown(b, "", kKnown));
  CompletionRequest r;
  TANDEM_RETURN_IF_ERROR(
      ParseSampling(b, limits, limits.default_completion_max_tokens, &r.sampling, &r.model, &r.session_id));
  if (const Json& v = Field(b, "logprobs"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t k, IntIn(v, "logprobs", 0, 5));
    if (k > 0) return Unsupported("logprobs", "the rollout reports the sampled token's log-prob only; use 0");
    r.sampling.logprobs = true;
  }
  if (const Json& v = Field(b, "echo"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const bool echo, AsBool(v, "echo"));
    if (echo) return Unsupported("echo", "the prompt is not echoed; only false is accepted");
  }
  if (const Json& v = Field(b, "best_of"); !v.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t best, AsInt(v, "best_of"));
    if (best != 1) return Unsupported("best_of", "only 1 is accepted (use n)");
  }
  if (const Json& v = Field(b, "suffix"); !v.is_null()) return Unsupported("suffix", "insertion is not served");

  const Json& p = Field(b, "prompt");
  if (p.is_null()) return InvalidArgument("prompt: missing");
  const int64_t vocab = limits.vocab_size > 0 ? limits.vocab_size : std::numeric_limits<int32_t>::max();
  auto ids = [&](const Json& list, const std::string& path) -> Status {
    if (list.empty()) return InvalidArgument(path + ": an empty prompt");
    for (size_t i = 0; i < list.size(); ++i) {
      TANDEM_ASSIGN_OR_RETURN(const int64_t id, AsInt(list[i], At(path, i)));
      if (id < 0 || id >= vocab)
        return InvalidArgument(At(path, i) + ": token id " + std::to_string(id) + " outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
      r.prompt_ids.push_back(static_cast<int32_t>(id));
    }
    return Status::Ok();
  };
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    TANDEM_RETURN_IF_ERROR(ids(p, "prompt"));
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
    TANDEM_RETURN_IF_ERROR(ids(p[0], "prompt[0]"));
  } else if (p.is_array() && p.size() > 1 && (p[0].is_string() || p[0].is_array())) {
    return Unsupported("prompt", "one prompt per request (send the others as their own requests), got " +
                                     std::to_string(p.size()));
  } else {
    return WrongType("prompt", "a string or a list of token ids", p);
  }
  if (r.prompt_text && r.prompt_text->empty()) return InvalidArgument("prompt: an empty prompt");
  return r;
}

}  // namespace tandem::agents

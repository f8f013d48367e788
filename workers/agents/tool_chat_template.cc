// Qwen3's tool chat template (tool_chat_template.h), following the Jinja
// text of Qwen3's tokenizer_config.json statement by statement.
#include "workers/agents/tool_chat_template.h"

#include <algorithm>

#include "workers/agents/python_json.h"

namespace tandem::agents {
namespace {

constexpr std::string_view kToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

std::string_view LStrip(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  return s;
}
std::string_view RStrip(std::string_view s, char c) {
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}
bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

class Parts {
 public:
  void Template(std::string_view t) { Add(t, false); }
  void Data(std::string_view t) { Add(t, true); }
  std::vector<TemplatePart> Take() { return std::move(parts_); }

 private:
  void Add(std::string_view t, bool data) {
    if (t.empty()) return;
    if (!parts_.empty() && parts_.back().data == data) {
      parts_.back().text += t;
    } else {
      parts_.push_back({std::string(t), data});
    }
  }
  std::vector<TemplatePart> parts_;
};

// ns.last_query_index: the last user message that is not a tool response
// wrapped by the client itself.
size_t LastQueryIndex(const std::vector<Message>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const Message& m = messages[i];
    const std::string_view c = m.content ? std::string_view(*m.content) : std::string_view();
    if (m.role == "user" && !(StartsWith(c, "<tool_response>") && EndsWith(c, "</tool_response>"))) return i;
  }
  return messages.empty() ? 0 : messages.size() - 1;
}

void Assistant(const std::vector<Message>& messages, size_t i, size_t last_query, Parts* out) {
  const Message& m = messages[i];
  std::string_view content = m.content ? std::string_view(*m.content) : std::string_view();
  std::string_view reasoning;
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
  } else if (const size_t close = content.rfind("</think>"); close != std::string_view::npos) {
    const std::string_view before = RStrip(content.substr(0, content.find("</think>")), '\n');
    const size_t open = before.rfind("<think>");
    reasoning = LStrip(open == std::string_view::npos ? before : before.substr(open + 7), '\n');
    content = LStrip(content.substr(close + 8), '\n');
  }
  out->Template("<|im_start|>assistant\n");
  if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
    out->Template("<think>\n");
    out->Data(RStrip(LStrip(reasoning, '\n'), '\n'));
    out->Template("\n</think>\n\n");
    out->Data(LStrip(content, '\n'));
  } else {
    out->Data(content);
  }
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    if ((k == 0 && !content.empty()) || k > 0) out->Template("\n");
    out->Template("<tool_call>\n{\"name\": \"");
    out->Data(m.tool_calls[k].name);
    out->Template("\", \"arguments\": ");
    out->Data(m.tool_calls[k].arguments);
    out->Template("}\n</tool_call>");
  }
  out->Template("<|im_end|>\n");
}

}  // namespace

std::vector<TemplatePart> RenderParts(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                      size_t begin, const RenderOptions& options) {
  Parts out;
  const bool first_is_system = !messages.empty() && messages[0].role == "system";
  if (begin == 0) {
    if (!tools.empty()) {
      out.Template("<|im_start|>system\n");
      if (first_is_system) {
        out.Data(messages[0].content.value_or(""));
        out.Template("\n\n");
      }
      out.Template(kToolsHead);
      for (const Tool& t : tools) {
        out.Template("\n");
        out.Data(PythonJsonDumps(t.definition));
      }
      out.Template(kToolsTail);
    } else if (first_is_system) {
      out.Template("<|im_start|>system\n");
      out.Data(messages[0].content.value_or(""));
      out.Template("<|im_end|>\n");
    }
  }
  const size_t last_query = LastQueryIndex(messages);
  for (size_t i = begin; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out.Template("<|im_start|>" + m.role + "\n");
      out.Data(m.content.value_or(""));
      out.Template("<|im_end|>\n");
    } else if (m.role == "assistant") {
      Assistant(messages, i, last_query, &out);
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out.Template("<|im_start|>user");
      out.Template("\n<tool_response>\n");
      out.Data(m.content.value_or(""));
      out.Template("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out.Template("<|im_end|>\n");
    }
  }
  if (options.add_generation_prompt) {
    out.Template("<|im_start|>assistant\n");
    if (options.enable_thinking == false) out.Template("<think>\n\n</think>\n\n");
  }
  return out.Take();
}

std::string JoinParts(const std::vector<TemplatePart>& parts) {
  std::string s;
  for (const auto& p : parts) s += p.text;
  return s;
}

StatusOr<std::vector<int32_t>> EncodeParts(const data::Tokenizer& tokenizer, const std::vector<TemplatePart>& parts) {
  for (const std::string_view tok : {std::string_view("<|im_start|>"), kTurnEnd}) {
    const auto id = tokenizer.TokenToId(tok);
    if (!id || !tokenizer.IsSpecial(*id))
      return FailedPrecondition("chat template: the tokenizer has no special token \"" + std::string(tok) + "\"");
  }
  std::vector<const data::AddedToken*> specials;
  for (const auto& t : tokenizer.added_tokens())
    if (t.special && !t.content.empty()) specials.push_back(&t);
  std::stable_sort(specials.begin(), specials.end(), [](const data::AddedToken* a, const data::AddedToken* b) {
    return a->content.size() > b->content.size();
  });
  data::EncodeOptions opts;
  opts.split_special_tokens = true;  // specials in the segment are text; template specials are cut out below
  std::vector<int32_t> ids;
  std::string segment;
  auto flush = [&]() -> Status {
    if (segment.empty()) return Status::Ok();
    TANDEM_RETURN_IF_ERROR(tokenizer.EncodeAppend(segment, opts, &ids), "chat template");
    segment.clear();
    return Status::Ok();
  };
  for (const TemplatePart& p : parts) {
    if (p.data) {
      segment += p.text;
      continue;
    }
    size_t pos = 0;
    const std::string_view text = p.text;
    while (pos < text.size()) {
      const data::AddedToken* hit = nullptr;
      size_t at = text.size();
      for (const data::AddedToken* t : specials) {  // leftmost, then longest
        const size_t found = text.find(t->content, pos);
        if (found < at) {
          at = found;
          hit = t;
        }
      }
      segment += text.substr(pos, at - pos);
      if (hit == nullptr) break;
      TANDEM_RETURN_IF_ERROR(flush());
      ids.push_back(hit->id);
      pos = at + hit->content.size();
    }
  }
  TANDEM_RETURN_IF_ERROR(flush());
  return ids;
}

}  // namespace tandem::agents

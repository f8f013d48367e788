// One proxied call's CPU work (proxy_call.h).
#include "workers/agents/proxy_call.h"

#include <nlohmann/json.hpp>

#include "workers/agents/python_json.h"
#include "workers/agents/tool_call_parser.h"
#include "workers/agents/tool_chat_template.h"
#include "workers/roles/rollout_client.h"

namespace tandem::agents {
namespace {

using json = nlohmann::json;

std::string GenerateBody(const PreparedCall& c, std::optional<int32_t> turn_end) {
  json sp = {{"temperature", c.sampling.temperature},
             {"top_p", c.sampling.top_p},
             {"max_new_tokens", c.sampling.max_tokens},
             {"n", c.sampling.n}};
  if (!c.sampling.stop.empty()) sp["stop"] = c.sampling.stop;
  if (turn_end) sp["stop_token_ids"] = json::array({*turn_end});
  if (c.sampling.seed) sp["seed"] = *c.sampling.seed;
  return json{{"input_ids", c.prompt_ids}, {"sampling_params", sp}, {"return_logprob", true}}.dump();
}

// The session named by the header (it wins) or the body.
Status TakeSessionId(PreparedCall* c, const std::string& header_session) {
  if (header_session.empty()) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckSessionId(header_session, "X-Session-Id"));
  c->session_id = header_session;
  return Status::Ok();
}

// Opens the session (when named) for the new prompt tokens and the most the
// call may generate; `parent_serial` (non-zero) must still be its serial.
Status OpenSession(PreparedCall* c, const CallContext& ctx, size_t new_prompt_tokens, uint64_t parent_serial) {
  if (c->session_id.empty()) return Status::Ok();
  const size_t tokens = new_prompt_tokens + static_cast<size_t>(c->sampling.n * c->sampling.max_tokens);
  TANDEM_ASSIGN_OR_RETURN(c->serial, ctx.sessions->Open(c->session_id, tokens));
  if (parent_serial != 0 && parent_serial != c->serial)
    return Unavailable("session " + c->session_id + " was closed while this call was prepared; send it again");
  return Status::Ok();
}

}  // namespace

StatusOr<PreparedCall> PrepareChat(std::string_view body, const std::string& header_session, const CallContext& ctx) {
  TANDEM_ASSIGN_OR_RETURN(ChatRequest r, ParseChatRequest(body, ctx.limits));
  PreparedCall c;
  c.chat = true;
  c.model = r.model;
  c.sampling = r.sampling;
  c.parse_tool_calls = r.parse_tool_calls;
  c.session_id = r.session_id;
  TANDEM_RETURN_IF_ERROR(TakeSessionId(&c, header_session));
  const std::optional<int32_t> turn_end = ctx.tokenizer->TokenToId(kTurnEnd);
  if (!turn_end) return FailedPrecondition("messages: the tokenizer has no " + std::string(kTurnEnd) + " for chat");

  auto asked = std::make_shared<Conversation>();
  asked->messages = std::move(r.messages);
  asked->enable_thinking = r.enable_thinking;
  if (!r.tools.empty()) {
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    for (const Tool& t : r.tools) tools.push_back(t.definition);
    asked->tools_key = PythonJsonDumps(tools);
  }
  RenderOptions render;
  render.enable_thinking = r.enable_thinking;

  Parent parent;
  if (!c.session_id.empty()) parent = ctx.sessions->FindParent(c.session_id, *asked, *turn_end);
  size_t new_tokens = 0;
  if (parent.kind == Parent::Kind::kContinues) {
    // The turn's exact tokens, then its end of turn where the model did not
    // write one, then the new messages.
    std::vector<TemplatePart> parts;
    if (!parent.ended_on_turn_end) parts.push_back({std::string(kTurnEnd), false});
    parts.push_back({"\n", false});
    for (TemplatePart& p : RenderParts(asked->messages, r.tools, parent.next_message, render)) parts.push_back(std::move(p));
    TANDEM_ASSIGN_OR_RETURN(const std::vector<int32_t> suffix, EncodeParts(*ctx.tokenizer, parts), "messages");
    c.prompt_ids = std::move(parent.ids);
    c.prompt_ids.insert(c.prompt_ids.end(), suffix.begin(), suffix.end());
    c.parent = parent.turn;
    new_tokens = suffix.size();
  } else if (parent.kind == Parent::Kind::kSamePrompt) {
    c.prompt_ids = std::move(parent.ids);
    c.parent = parent.turn;
  } else {
    TANDEM_ASSIGN_OR_RETURN(c.prompt_ids, EncodeParts(*ctx.tokenizer, RenderParts(asked->messages, r.tools, 0, render)),
                            "messages");
    new_tokens = c.prompt_ids.size();
  }
  TANDEM_RETURN_IF_ERROR(OpenSession(&c, ctx, new_tokens, parent.serial));
  c.asked = std::move(asked);
  c.generate_body = GenerateBody(c, turn_end);
  return c;
}

StatusOr<PreparedCall> PrepareCompletion(std::string_view body, const std::string& header_session,
                                         const CallContext& ctx) {
  RequestLimits limits = ctx.limits;
  if (limits.vocab_size <= 0) limits.vocab_size = ctx.tokenizer->vocab_size();
  TANDEM_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(body, limits));
  PreparedCall c;
  c.chat = false;
  c.model = r.model;
  c.sampling = r.sampling;
  c.session_id = r.session_id;
  TANDEM_RETURN_IF_ERROR(TakeSessionId(&c, header_session));
  if (r.prompt_text) {
    TANDEM_ASSIGN_OR_RETURN(c.prompt_ids, ctx.tokenizer->Encode(*r.prompt_text), "prompt");
    if (c.prompt_ids.empty()) return InvalidArgument("prompt: encodes to no tokens");
  } else {
    c.prompt_ids = std::move(r.prompt_ids);
  }
  TANDEM_RETURN_IF_ERROR(OpenSession(&c, ctx, c.prompt_ids.size(), 0));
  c.generate_body = GenerateBody(c, std::nullopt);
  return c;
}

StatusOr<FinishedCall> FinishCall(const PreparedCall& call, const std::string& generate_answer, const CallContext& ctx,
                                  const std::string& answer_id, int64_t created) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<roles::RolloutSample> samples,
                          roles::ParseGenerateAnswer(generate_answer, static_cast<size_t>(call.sampling.n)),
                          "rollout /generate");
  FinishedCall out;
  Answer& a = out.answer;
  a.id = answer_id;
  a.created = created;
  a.model = call.model;
  a.prompt_tokens = call.prompt_ids.size();
  a.logprobs = call.sampling.logprobs;
  a.include_usage = call.sampling.include_usage;
  a.session_id = call.session_id;
  data::DecodeOptions skip;
  skip.skip_special_tokens = true;
  std::vector<Turn> turns;
  for (const roles::RolloutSample& s : samples) {
    if (s.finish_reason == "abort") out.aborted = true;
    Choice ch;
    TANDEM_ASSIGN_OR_RETURN(std::string text, ctx.tokenizer->Decode(s.output_ids, skip), "rollout output");
    if (s.finish_reason == "stop") {
      size_t cut = std::string::npos;
      for (const std::string& stop : call.sampling.stop) cut = std::min(cut, text.find(stop));
      if (cut != std::string::npos) text.resize(cut);
    }
    ch.finish_reason = s.finish_reason == "length" ? "length" : "stop";
    if (call.chat && call.parse_tool_calls) {
      ParsedReply parsed = ParseToolCalls(text);
      ch.content = std::move(parsed.content);
      ch.tool_calls = std::move(parsed.tool_calls);
      for (ToolCall& t : ch.tool_calls) t.id = NewToolCallId();
      if (!ch.tool_calls.empty()) ch.finish_reason = "tool_calls";
    } else {
      ch.content = std::move(text);
    }
    ch.completion_tokens = s.output_ids.size();
    ch.weight_version = s.weight_version;
    if (call.sampling.logprobs) {
      for (size_t k = 0; k < s.output_ids.size(); ++k) {
        TokenLogprob t;
        const auto bytes = ctx.tokenizer->TokenBytes(s.output_ids[k]);
        t.token = bytes ? std::string(*bytes) : std::string();
        for (const char b : t.token) t.bytes.push_back(static_cast<unsigned char>(b));
        t.logprob = s.logprobs[k];
        ch.logprobs.push_back(std::move(t));
      }
    }
    if (!call.session_id.empty()) {
      Turn turn;
      turn.parent = call.parent;
      turn.prompt_ids = call.prompt_ids;
      turn.output_ids = s.output_ids;
      turn.output_logprobs = s.logprobs;
      turn.weight_version = s.weight_version;
      turn.finish_reason = ch.finish_reason;
      turn.asked = call.asked;
      turn.reply.role = "assistant";
      turn.reply.content = ch.content;
      turn.reply.tool_calls = ch.tool_calls;
      turns.push_back(std::move(turn));
    }
    a.choices.push_back(std::move(ch));
  }
  if (!out.aborted && !call.session_id.empty()) {
    const std::vector<int64_t> ids = ctx.sessions->Record(call.session_id, call.serial, std::move(turns));
    for (size_t i = 0; i < ids.size() && i < a.choices.size(); ++i) a.choices[i].turn = ids[i];
  }
  return out;
}

}  // namespace tandem::agents

// One proxied call's CPU work (proxy_call.h).
#include "workers/agents/proxy_call.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

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

namespace {

// The answer and the recorded turns of finished samples.
StatusOr<FinishedCall> FinishSamples(const PreparedCall& call, const std::vector<roles::RolloutSample>& samples,
                                     const CallContext& ctx, const std::string& answer_id, int64_t created) {
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

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

StatusOr<FinishedCall> FinishCall(const PreparedCall& call, const std::string& generate_answer, const CallContext& ctx,
                                  const std::string& answer_id, int64_t created) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<roles::RolloutSample> samples,
                          roles::ParseGenerateAnswer(generate_answer, static_cast<size_t>(call.sampling.n)),
                          "rollout /generate");
  return FinishSamples(call, samples, ctx, answer_id, created);
}

bool ForwardsStream(const PreparedCall& call) {
  return call.sampling.stream && !call.parse_tool_calls && call.sampling.stop.empty();
}

std::string StreamingGenerateBody(const PreparedCall& call) {
  nlohmann::json body = nlohmann::json::parse(call.generate_body);
  body["stream"] = true;
  return body.dump();
}

StatusOr<std::vector<std::string>> StreamEvent(const PreparedCall& call, std::string_view event, const CallContext& ctx,
                                               StreamState* state, const Answer& head) {
  TANDEM_ASSIGN_OR_RETURN(const json j, ParseJsonBounded(event, 8), "rollout stream event");
  size_t index = 0;
  if (j.is_object() && j.contains("index")) {
    if (!j["index"].is_number_unsigned() || j["index"].get<uint64_t>() >= static_cast<uint64_t>(call.sampling.n))
      return DataLoss("rollout stream event: index outside the samples asked");
    index = j["index"].get<size_t>();
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<roles::RolloutSample> parsed, roles::ParseGenerateAnswer(std::string(event), 1),
                          "rollout stream event");
  roles::RolloutSample& s = parsed[0];
  if (state->samples.size() < static_cast<size_t>(call.sampling.n)) state->samples.resize(static_cast<size_t>(call.sampling.n));
  StreamState::Sample& st = state->samples[index];
  if (!st.finish_reason.empty()) return DataLoss("rollout stream event: sample " + std::to_string(index) + " had ended");
  if (s.output_ids.size() < st.ids.size() || !std::equal(st.ids.begin(), st.ids.end(), s.output_ids.begin()))
    return DataLoss("rollout stream event: sample " + std::to_string(index) + " does not extend its earlier tokens");
  if (s.finish_reason == "abort")
    return Unavailable("the rollout aborted sample " + std::to_string(index) + " (paused in abort mode)");
  st.ids = std::move(s.output_ids);
  st.logprobs = std::move(s.logprobs);
  st.weight_version = s.weight_version;
  st.finish_reason = s.finish_reason;

  std::vector<std::string> out;
  if (!st.began && call.chat) out.push_back(ChatChunkEvent(head, index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
  st.began = true;
  data::DecodeOptions skip;
  skip.skip_special_tokens = true;
  TANDEM_ASSIGN_OR_RETURN(std::string text, ctx.tokenizer->Decode(st.ids, skip), "rollout output");
  // A trailing U+FFFD may be a character the next token completes.
  if (st.finish_reason.empty() && text.size() >= kReplacement.size() &&
      std::string_view(text).substr(text.size() - kReplacement.size()) == kReplacement)
    text.resize(text.size() - kReplacement.size());
  std::string delta = text.size() > st.sent_bytes ? text.substr(st.sent_bytes) : std::string();
  json logprobs = nullptr;
  if (call.sampling.logprobs && st.sent_ids < st.ids.size()) {
    std::vector<TokenLogprob> tokens;
    for (size_t k = st.sent_ids; k < st.ids.size(); ++k) {
      TokenLogprob t;
      const auto bytes = ctx.tokenizer->TokenBytes(st.ids[k]);
      t.token = bytes ? std::string(*bytes) : std::string();
      for (const char b : t.token) t.bytes.push_back(static_cast<unsigned char>(b));
      t.logprob = st.logprobs[k];
      tokens.push_back(std::move(t));
    }
    logprobs = LogprobsJson(tokens, call.chat);
    st.sent_ids = st.ids.size();
  }
  if (!delta.empty() || !logprobs.is_null()) {
    st.sent_bytes += delta.size();
    out.push_back(call.chat ? ChatChunkEvent(head, index, {{"content", delta}}, nullptr, logprobs)
                            : CompletionChunkEvent(head, index, delta, nullptr, logprobs));
  }
  if (!st.finish_reason.empty()) {
    const std::string finish = st.finish_reason == "length" ? "length" : "stop";
    out.push_back(call.chat ? ChatChunkEvent(head, index, json::object(), finish, nullptr)
                            : CompletionChunkEvent(head, index, "", finish, nullptr));
  }
  return out;
}

StatusOr<std::vector<std::string>> StreamEnd(const PreparedCall& call, const CallContext& ctx, StreamState* state,
                                             const Answer& head) {
  std::vector<roles::RolloutSample> samples(static_cast<size_t>(call.sampling.n));
  if (state->samples.size() != samples.size()) return DataLoss("rollout stream: ended before every sample began");
  for (size_t i = 0; i < samples.size(); ++i) {
    StreamState::Sample& st = state->samples[i];
    if (st.finish_reason.empty()) return DataLoss("rollout stream: ended before sample " + std::to_string(i) + " did");
    samples[i].output_ids = st.ids;
    samples[i].logprobs = st.logprobs;
    samples[i].finish_reason = st.finish_reason;
    samples[i].weight_version = st.weight_version;
  }
  TANDEM_ASSIGN_OR_RETURN(FinishedCall done, FinishSamples(call, samples, ctx, head.id, head.created));
  std::vector<std::string> out;
  if (call.sampling.include_usage) {
    done.answer.model = head.model;
    out.push_back(UsageEvent(done.answer, call.chat));
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

}  // namespace tandem::agents

// The JSON of POST /generate; see generate_json.h for the shapes and the contract.
#include "workers/inference/generate_json.h"

#include <algorithm>
#include <array>
#include <limits>

#include "common/bounded_json.h"
#include "workers/inference/json_fields.h"

namespace tandem::inference {

using json = nlohmann::json;

namespace {

constexpr std::array<std::string_view, 5> kBodyFields = {"input_ids", "text", "sampling_params", "return_logprob",
                                                         "stream"};
constexpr std::array<std::string_view, 10> kSamplingFields = {
    "temperature", "top_p", "top_k", "min_p", "max_new_tokens", "stop", "stop_token_ids", "n", "seed", "ignore_eos"};

Status ParseStop(const json& v, const GenerateLimits& limits, std::vector<std::string>* out) {
  out->clear();
  auto one = [&](const json& s, const std::string& path) -> Status {
    if (!s.is_string()) return WrongType(path, "a string", s);
    const auto& str = s.get_ref<const std::string&>();
    if (str.size() > limits.max_stop_string_bytes)
      return InvalidArgument(path + ": " + std::to_string(str.size()) + " bytes, the limit is " +
                             std::to_string(limits.max_stop_string_bytes));
    out->push_back(str);
    return Status::Ok();
  };
  if (v.is_string()) return one(v, "stop");
  if (!v.is_array()) return WrongType("stop", "a string or a list of strings", v);
  if (v.size() > limits.max_stop_strings)
    return InvalidArgument("stop: " + std::to_string(v.size()) + " strings, the limit is " +
                           std::to_string(limits.max_stop_strings));
  for (size_t i = 0; i < v.size(); ++i) TANDEM_RETURN_IF_ERROR(one(v[i], Index("stop", i)));
  return Status::Ok();
}

// One sampling_params object; messages name the field ("top_p: ...") and the
// caller adds where the object was.
StatusOr<SamplingParams> ParseSamplingParams(const json& v, const GenerateLimits& limits) {
  SamplingParams p;
  if (v.is_null()) return p;
  if (!v.is_object()) return InvalidArgument(std::string("expected an object, got ") + v.type_name());
  for (const auto& [key, value] : v.items()) {
    if (!Known(kSamplingFields, key))
      return InvalidArgument("unknown field " + QuoteKey(key) + " (known: " + KnownList(kSamplingFields) + ")");
    if (value.is_null()) continue;  // the default
    if (key == "temperature") {
      TANDEM_ASSIGN_OR_RETURN(p.temperature, AsNumber(value, key));
    } else if (key == "top_p") {
      TANDEM_ASSIGN_OR_RETURN(p.top_p, AsNumber(value, key));
    } else if (key == "top_k") {
      TANDEM_ASSIGN_OR_RETURN(p.top_k, AsInt64(value, key));
    } else if (key == "min_p") {
      TANDEM_ASSIGN_OR_RETURN(p.min_p, AsNumber(value, key));
    } else if (key == "max_new_tokens") {
      TANDEM_ASSIGN_OR_RETURN(p.max_new_tokens, AsInt64(value, key));
    } else if (key == "stop") {
      TANDEM_RETURN_IF_ERROR(ParseStop(value, limits, &p.stop));
    } else if (key == "stop_token_ids") {
      if (value.is_array() && value.size() > limits.max_stop_token_ids)
        return InvalidArgument("stop_token_ids: " + std::to_string(value.size()) + " ids, the limit is " +
                               std::to_string(limits.max_stop_token_ids));
      TANDEM_ASSIGN_OR_RETURN(p.stop_token_ids, TokenList(value, key, limits.vocab_size));
    } else if (key == "n") {
      TANDEM_ASSIGN_OR_RETURN(p.n, AsInt64(value, key));
    } else if (key == "seed") {
      if (!value.is_number_integer()) return WrongType(key, "an integer >= 0", value);
      if (!value.is_number_unsigned() && value.get<int64_t>() < 0)
        return InvalidArgument("seed: must be >= 0, got " + std::to_string(value.get<int64_t>()));
      p.seed = value.get<uint64_t>();
    } else if (key == "ignore_eos") {
      TANDEM_ASSIGN_OR_RETURN(p.ignore_eos, AsBool(value, key));
    }
  }
  TANDEM_RETURN_IF_ERROR(Validate(p));
  return p;
}

// The prompts of input_ids or text, and whether they were a batch.
Status ParsePrompts(const json& body, const GenerateLimits& limits, const TextCodec* codec, GenerateBody* out) {
  const bool has_ids = body.contains("input_ids") && !body.at("input_ids").is_null();
  const bool has_text = body.contains("text") && !body.at("text").is_null();
  if (has_ids && has_text) return InvalidArgument("input_ids, text: give one of them, not both");
  if (!has_ids && !has_text) return InvalidArgument("input_ids, text: one of them is required");
  auto add = [&](std::vector<int32_t> ids, const std::string& path) -> Status {
    if (ids.empty()) return InvalidArgument(path + ": empty prompt (no tokens)");
    out->prompts.push_back(GenerateRequest{std::move(ids), {}, false});
    return Status::Ok();
  };
  auto check_count = [&](std::string_view field, size_t n) -> Status {
    if (n == 0) return InvalidArgument(std::string(field) + ": empty list");
    if (n > limits.max_prompts)
      return InvalidArgument(std::string(field) + ": " + std::to_string(n) + " prompts, the limit is " +
                             std::to_string(limits.max_prompts));
    return Status::Ok();
  };
  if (has_ids) {
    const json& v = body.at("input_ids");
    if (!v.is_array()) return WrongType("input_ids", "a list of token ids or a list of such lists", v);
    out->batch = !v.empty() && v[0].is_array();
    if (!out->batch) {
      TANDEM_ASSIGN_OR_RETURN(auto ids, TokenList(v, "input_ids", limits.vocab_size));
      return add(std::move(ids), "input_ids");
    }
    TANDEM_RETURN_IF_ERROR(check_count("input_ids", v.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string path = Index("input_ids", i);
      TANDEM_ASSIGN_OR_RETURN(auto ids, TokenList(v[i], path, limits.vocab_size));
      TANDEM_RETURN_IF_ERROR(add(std::move(ids), path));
    }
    return Status::Ok();
  }
  const json& v = body.at("text");
  if (!v.is_string() && !v.is_array()) return WrongType("text", "a string or a list of strings", v);
  if (codec == nullptr) return InvalidArgument("text: this server has no tokenizer; send input_ids");
  auto encode = [&](const json& s, const std::string& path) -> Status {
    if (!s.is_string()) return WrongType(path, "a string", s);
    auto ids = codec->Encode(s.get_ref<const std::string&>());
    if (!ids.ok()) return ids.status().WithContext(path);
    for (size_t k = 0; k < ids->size(); ++k)
      if ((*ids)[k] < 0 || (*ids)[k] >= limits.vocab_size)
        return InvalidArgument(path + ": the tokenizer gave token id " + std::to_string((*ids)[k]) +
                               " outside the model's vocabulary [0, " + std::to_string(limits.vocab_size) + ")");
    return add(std::move(ids).value(), path);
  };
  out->batch = v.is_array();
  if (!out->batch) return encode(v, "text");
  TANDEM_RETURN_IF_ERROR(check_count("text", v.size()));
  for (size_t i = 0; i < v.size(); ++i) TANDEM_RETURN_IF_ERROR(encode(v[i], Index("text", i)));
  return Status::Ok();
}

}  // namespace

bool GenerateBody::AnswersList() const { return batch || (!prompts.empty() && prompts[0].params.n > 1); }

int64_t GenerateBody::Samples() const {
  int64_t n = 0;
  for (const auto& p : prompts) n += p.params.n;
  return n;
}

StatusOr<GenerateBody> ParseGenerateBody(std::string_view text, const GenerateLimits& limits,
                                         const TextCodec* codec) {
  TANDEM_ASSIGN_OR_RETURN(const json body, ParseBodyObject(text, limits.max_json_depth, kBodyFields));

  GenerateBody out;
  TANDEM_RETURN_IF_ERROR(ParsePrompts(body, limits, codec, &out));

  bool return_logprob = false;
  if (auto it = body.find("return_logprob"); it != body.end() && !it->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(return_logprob, AsBool(*it, "return_logprob"));
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(out.stream, AsBool(*it, "stream"));
  }

  const json* sp = nullptr;
  if (auto it = body.find("sampling_params"); it != body.end()) sp = &*it;
  if (sp != nullptr && sp->is_array()) {
    if (sp->size() != out.prompts.size())
      return InvalidArgument("sampling_params: a list needs one object per prompt, got " +
                             std::to_string(sp->size()) + " for " + std::to_string(out.prompts.size()) + " prompts");
    for (size_t i = 0; i < sp->size(); ++i) {
      auto p = ParseSamplingParams((*sp)[i], limits);
      if (!p.ok()) return p.status().WithContext(Index("sampling_params", i));
      out.prompts[i].params = std::move(p).value();
    }
  } else {
    auto p = ParseSamplingParams(sp == nullptr ? json() : *sp, limits);
    if (!p.ok()) return p.status().WithContext("sampling_params");
    for (auto& prompt : out.prompts) prompt.params = *p;
  }

  const int64_t samples = out.Samples();
  if (samples > limits.max_samples)
    return InvalidArgument("sampling_params: n: " + std::to_string(samples) +
                           " samples in all (prompts x n), the limit is " + std::to_string(limits.max_samples));
  const char* field = body.contains("text") && !body.at("text").is_null() ? "text" : "input_ids";
  for (size_t i = 0; i < out.prompts.size(); ++i) {
    auto& prompt = out.prompts[i];
    prompt.return_logprob = return_logprob;
    const std::string where = out.batch ? Index(field, i) : std::string(field);
    const int64_t len = static_cast<int64_t>(prompt.input_ids.size());
    if (len >= limits.max_context_length)
      return InvalidArgument(where + ": prompt of " + std::to_string(len) +
                             " tokens does not fit the context length " + std::to_string(limits.max_context_length));
    if (len + prompt.params.max_new_tokens > limits.max_context_length)
      return InvalidArgument(where + ": prompt of " + std::to_string(len) + " tokens + sampling_params.max_new_tokens " +
                             std::to_string(prompt.params.max_new_tokens) + " exceeds the context length " +
                             std::to_string(limits.max_context_length));
  }
  return out;
}

namespace {

// Drops trailing U+FFFD (EF BF BD): bytes of a character the next token may complete.
void TrimReplacementTail(std::string* s) {
  static constexpr std::string_view kFffd = "\xEF\xBF\xBD";
  while (s->size() >= kFffd.size() && std::string_view(*s).substr(s->size() - kFffd.size()) == kFffd)
    s->resize(s->size() - kFffd.size());
}

json FinishReasonJson(const GenerateRequest& request, const SampleResult& r) {
  switch (r.finish_reason) {
    case FinishReason::kLength:
      return {{"type", "length"}, {"length", r.completion_tokens}};
    case FinishReason::kAbort:
      return {{"type", "abort"}};
    case FinishReason::kStop: {
      json matched = nullptr;
      const auto& stops = request.params.stop;
      if (!r.matched_stop.empty() && std::find(stops.begin(), stops.end(), r.matched_stop) != stops.end())
        matched = r.matched_stop;  // a stop string
      else if (!r.output_ids.empty())
        matched = r.output_ids.back();  // a stop token (EOS or stop_token_ids): the last, included
      return {{"type", "stop"}, {"matched", matched}};
    }
  }
  return nullptr;
}

}  // namespace

json SampleJson(const GenerateRequest& request, std::string_view id, const SampleProgress& sample,
                int64_t weight_version, const TextCodec* codec) {
  const SampleResult* r = sample.result ? &*sample.result : nullptr;
  const std::vector<int32_t>& ids = r ? r->output_ids : sample.output_ids;
  const std::vector<float>& logprobs = r ? r->output_token_logprobs : sample.output_token_logprobs;
  json out = json::object();
  if (codec != nullptr) {
    auto decoded = codec->Decode(ids);
    std::string text = decoded.ok() ? std::move(decoded).value() : std::string();
    if (r == nullptr) {
      TrimReplacementTail(&text);
    } else if (r->finish_reason == FinishReason::kStop && !r->matched_stop.empty()) {
      const size_t at = text.find(r->matched_stop);
      const auto& stops = request.params.stop;
      if (at != std::string::npos && std::find(stops.begin(), stops.end(), r->matched_stop) != stops.end())
        text.resize(at);
    }
    out["text"] = std::move(text);
  }
  out["output_ids"] = ids;
  json meta = {
      {"id", std::string(id)},
      {"finish_reason", r ? FinishReasonJson(request, *r) : json(nullptr)},
      {"prompt_tokens", r ? r->prompt_tokens : static_cast<int64_t>(request.input_ids.size())},
      {"completion_tokens", r ? r->completion_tokens : static_cast<int64_t>(ids.size())},
      {"cached_tokens", r ? r->cached_tokens : 0},
      {"weight_version", std::to_string(r ? r->weight_version : weight_version)},
  };
  if (request.return_logprob) {
    json lp = json::array();
    const size_t n = std::min(ids.size(), logprobs.size());
    for (size_t i = 0; i < n; ++i) lp.push_back(json::array({logprobs[i], ids[i], nullptr}));
    meta["output_token_logprobs"] = std::move(lp);
  }
  out["meta_info"] = std::move(meta);
  return out;
}

json ErrorJson(std::string_view code, std::string_view message) {
  return {{"error", {{"message", std::string(message)}, {"code", std::string(code)}}}};
}

}  // namespace tandem::inference

// The JSON of POST /score; see score_json.h for the shapes and the contract.
#include "workers/inference/score_json.h"

#include <array>
#include <cmath>
#include <string>

#include "workers/inference/json_fields.h"

namespace tandem::inference {

using json = nlohmann::json;

namespace {

constexpr std::array<std::string_view, 4> kFields = {"input_ids", "score_from", "top_logprobs_num", "temperature"};

Status ParseSequences(const json& v, const ScoreLimits& limits, ScoreRequest* out) {
  if (!v.is_array() || v.empty()) return WrongType("input_ids", "a non-empty list of token ids or of such lists", v);
  const bool batch = v[0].is_array();
  const size_t n = batch ? v.size() : 1;
  if (n > limits.max_sequences)
    return InvalidArgument("input_ids: " + std::to_string(n) + " sequences, the limit is " +
                           std::to_string(limits.max_sequences));
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string path = batch ? Index("input_ids", i) : std::string("input_ids");
    const json& s = batch ? v[i] : v;
    if (!s.is_array()) return WrongType(path, "a list of token ids", s);
    const auto len = static_cast<int64_t>(s.size());
    if (len == 0) return InvalidArgument(path + ": empty sequence (no tokens)");
    if (len > limits.max_context_length)
      return InvalidArgument(path + ": " + std::to_string(len) + " tokens, the context is " +
                             std::to_string(limits.max_context_length));
    total += len;
    if (total > limits.max_tokens)
      return InvalidArgument("input_ids: more than " + std::to_string(limits.max_tokens) +
                             " tokens in one body; split the request");
    TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenList(s, path, limits.vocab_size));
    out->sequences.push_back(std::move(ids));
  }
  return Status::Ok();
}

Status ParseScoreFrom(const json* v, ScoreRequest* out) {
  const size_t n = out->sequences.size();
  auto check = [&](size_t i, int64_t from, const std::string& path) -> Status {
    const auto len = static_cast<int64_t>(out->sequences[i].size());
    if (from < 1 || from > len)
      return InvalidArgument(path + ": " + std::to_string(from) + " outside [1, " + std::to_string(len) +
                             "] (the sequence's length)");
    out->score_from[i] = static_cast<int32_t>(from);
    return Status::Ok();
  };
  out->score_from.assign(n, 1);
  if (v == nullptr || v->is_null()) {
    return Status::Ok();
  }
  if (v->is_array()) {
    if (v->size() != n)
      return InvalidArgument("score_from: " + std::to_string(v->size()) + " values for " + std::to_string(n) +
                             " sequences");
    for (size_t i = 0; i < n; ++i) {
      TANDEM_ASSIGN_OR_RETURN(const int64_t from, AsInt64((*v)[i], Index("score_from", i)));
      TANDEM_RETURN_IF_ERROR(check(i, from, Index("score_from", i)));
    }
    return Status::Ok();
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t from, AsInt64(*v, "score_from", "an integer or a list of integers"));
  for (size_t i = 0; i < n; ++i)
    TANDEM_RETURN_IF_ERROR(check(i, from, n == 1 ? std::string("score_from") : "score_from (sequence " + std::to_string(i) + ")"));
  return Status::Ok();
}

}  // namespace

int64_t ScoreRequest::Tokens() const {
  int64_t n = 0;
  for (const auto& s : sequences) n += static_cast<int64_t>(s.size());
  return n;
}

int64_t ScoreRequest::ScoredTokens() const {
  int64_t n = 0;
  for (size_t i = 0; i < sequences.size(); ++i)
    n += static_cast<int64_t>(sequences[i].size()) - (i < score_from.size() ? score_from[i] : 1);
  return n;
}

StatusOr<ScoreRequest> ParseScoreBody(std::string_view text, const ScoreLimits& limits) {
  TANDEM_ASSIGN_OR_RETURN(const json body, ParseBodyObject(text, limits.max_json_depth, kFields));
  const auto ids = body.find("input_ids");
  if (ids == body.end()) return InvalidArgument("input_ids: required");
  ScoreRequest out;
  TANDEM_RETURN_IF_ERROR(ParseSequences(*ids, limits, &out));
  const auto from = body.find("score_from");
  TANDEM_RETURN_IF_ERROR(ParseScoreFrom(from == body.end() ? nullptr : &*from, &out));
  if (auto it = body.find("top_logprobs_num"); it != body.end() && !it->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(out.top_k, AsInt64(*it, "top_logprobs_num"));
    const int64_t most = std::min(limits.max_top_k, limits.vocab_size);
    if (out.top_k < 0 || out.top_k > most)
      return InvalidArgument("top_logprobs_num: must lie in [0, " + std::to_string(most) + "], got " +
                             std::to_string(out.top_k));
  }
  if (auto it = body.find("temperature"); it != body.end() && !it->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(out.temperature, AsNumber(*it, "temperature"));
    if (!(out.temperature > 0) || !std::isfinite(out.temperature))
      return InvalidArgument("temperature: must be a finite number > 0, got " + it->dump());
  }
  return out;
}

json ScoreResponseJson(const ScoreRequest& request, const ScoreResult& result, std::string_view id) {
  json results = json::array();
  const auto k = static_cast<size_t>(request.top_k);
  for (size_t i = 0; i < result.sequences.size() && i < request.sequences.size(); ++i) {
    const ScoredSequence& s = result.sequences[i];
    json r = {{"token_logprobs", s.logprobs},
              {"input_tokens", request.sequences[i].size()},
              {"scored_tokens", s.logprobs.size()}};
    if (k > 0) {
      json top = json::array();
      for (size_t p = 0; p * k < s.top_logprobs.size() && p * k < s.top_ids.size(); ++p) {
        json row = json::array();
        for (size_t j = p * k; j < (p + 1) * k && j < s.top_ids.size(); ++j)
          row.push_back(json::array({s.top_logprobs[j], s.top_ids[j], nullptr}));
        top.push_back(std::move(row));
      }
      r["top_logprobs"] = std::move(top);
    }
    results.push_back(std::move(r));
  }
  return {{"results", std::move(results)},
          {"meta_info",
           {{"id", std::string(id)},
            {"weight_version", std::to_string(result.weight_version)},
            {"input_tokens", request.Tokens()},
            {"scored_tokens", request.ScoredTokens()}}}};
}

}  // namespace tandem::inference

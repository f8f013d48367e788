// POST /score to a teacher (teacher_client.h).
#include "workers/roles/teacher_client.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "workers/roles/http_post.h"

namespace tandem::roles {

using nlohmann::json;

std::string ScoreBody(const ScoreCall& call, size_t begin, size_t end) {
  json ids = json::array(), from = json::array();
  for (size_t i = begin; i < end; ++i) {
    ids.push_back(call.sequences[i]);
    from.push_back(call.score_from[i]);
  }
  json body = {{"input_ids", ids}, {"score_from", from}, {"temperature", call.temperature}};
  if (call.top_k > 0) body["top_logprobs_num"] = call.top_k;
  return body.dump();
}

namespace {

// A finite number at `x` (`where` names it).
Status FiniteNumber(const json& x, const std::string& where, float& out) {
  if (!x.is_number() || !std::isfinite(x.get<double>())) return DataLoss(where + ": expected a finite number");
  out = static_cast<float>(x.get<double>());
  return Status::Ok();
}

// The `expected` rows of `k` [log-prob, id, ...] entries at `top` into `s`.
Status TopRows(const json& r, const std::string& where, size_t expected, int64_t k, TeacherScore& s) {
  const auto top = r.find("top_logprobs");
  if (top == r.end() || !top->is_array() || top->size() != expected)
    return DataLoss(where + ".top_logprobs: expected " + std::to_string(expected) + " rows");
  s.top_ids.reserve(expected * static_cast<size_t>(k));
  s.top_logprobs.reserve(expected * static_cast<size_t>(k));
  for (size_t p = 0; p < expected; ++p) {
    const std::string row = where + ".top_logprobs[" + std::to_string(p) + "]";
    const json& entries = (*top)[p];
    if (!entries.is_array() || entries.size() != static_cast<size_t>(k))
      return DataLoss(row + ": expected " + std::to_string(k) + " entries");
    for (size_t i = 0; i < entries.size(); ++i) {
      const json& e = entries[i];
      const std::string at = row + "[" + std::to_string(i) + "]";
      if (!e.is_array() || e.size() < 2 || !e[1].is_number_integer() || e[1].get<int64_t>() < 0 ||
          e[1].get<int64_t>() > std::numeric_limits<int32_t>::max())
        return DataLoss(at + ": expected [log-prob, token id >= 0, ...]");
      float lp = 0;
      TANDEM_RETURN_IF_ERROR(FiniteNumber(e[0], at + "[0]", lp));
      s.top_logprobs.push_back(lp);
      s.top_ids.push_back(static_cast<int32_t>(e[1].get<int64_t>()));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<TeacherScore>> ParseScoreAnswer(const std::string& body, const ScoreCall& call, size_t begin,
                                                     size_t end) {
  TANDEM_ASSIGN_OR_RETURN(const json j, ParseJsonBounded(body), "answer");
  const auto results = j.is_object() ? j.find("results") : j.end();
  if (results == j.end() || !results->is_array() || results->size() != end - begin)
    return DataLoss("answer: expected {\"results\": [...]} with " + std::to_string(end - begin) + " results");
  std::vector<TeacherScore> out;
  for (size_t i = begin; i < end; ++i) {
    const std::string where = "results[" + std::to_string(i - begin) + "]";
    const json& r = (*results)[i - begin];
    const auto lps = r.is_object() ? r.find("token_logprobs") : r.end();
    const size_t expected = call.sequences[i].size() - static_cast<size_t>(call.score_from[i]);
    if (lps == r.end() || !lps->is_array() || lps->size() != expected)
      return DataLoss(where + ".token_logprobs: expected " + std::to_string(expected) + " log-probs");
    TeacherScore s;
    s.logprobs.resize(expected);
    for (size_t p = 0; p < expected; ++p)
      TANDEM_RETURN_IF_ERROR(FiniteNumber((*lps)[p], where + ".token_logprobs[" + std::to_string(p) + "]", s.logprobs[p]));
    if (call.top_k > 0) TANDEM_RETURN_IF_ERROR(TopRows(r, where, expected, call.top_k, s));
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::vector<TeacherScore>> Score(const RolloutEndpoint& teacher, const ScoreCall& call,
                                          std::chrono::milliseconds timeout) {
  if (call.score_from.size() != call.sequences.size())
    return InvalidArgument("score call: " + std::to_string(call.score_from.size()) + " score_from for " +
                           std::to_string(call.sequences.size()) + " sequences");
  const std::string where = "teacher " + teacher.Describe() + " /score";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<TeacherScore> out;
  for (size_t begin = 0; begin < call.sequences.size(); begin += kScoreSequencesPerBody) {
    const size_t end = std::min(call.sequences.size(), begin + kScoreSequencesPerBody);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return DeadlineExceeded(where + ": no answer within the timeout");
    TANDEM_ASSIGN_OR_RETURN(const std::string body,
                            PostJson(teacher.host, teacher.port, "/score", ScoreBody(call, begin, end), left, where));
    TANDEM_ASSIGN_OR_RETURN(std::vector<TeacherScore> part, ParseScoreAnswer(body, call, begin, end), where);
    for (auto& v : part) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace tandem::roles

// POST /score to a teacher (teacher_client.h).
#include "workers/roles/teacher_client.h"

#include <algorithm>
#include <cmath>

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
  return json{{"input_ids", ids}, {"score_from", from}, {"temperature", call.temperature}}.dump();
}

StatusOr<std::vector<std::vector<float>>> ParseScoreAnswer(const std::string& body, const ScoreCall& call, size_t begin,
                                                           size_t end) {
  TANDEM_ASSIGN_OR_RETURN(const json j, ParseJsonBounded(body), "answer");
  const auto results = j.is_object() ? j.find("results") : j.end();
  if (results == j.end() || !results->is_array() || results->size() != end - begin)
    return DataLoss("answer: expected {\"results\": [...]} with " + std::to_string(end - begin) + " results");
  std::vector<std::vector<float>> out;
  for (size_t i = begin; i < end; ++i) {
    const std::string where = "results[" + std::to_string(i - begin) + "]";
    const json& r = (*results)[i - begin];
    const auto lps = r.is_object() ? r.find("token_logprobs") : r.end();
    const size_t expected = call.sequences[i].size() - static_cast<size_t>(call.score_from[i]);
    if (lps == r.end() || !lps->is_array() || lps->size() != expected)
      return DataLoss(where + ".token_logprobs: expected " + std::to_string(expected) + " log-probs");
    std::vector<float> v;
    v.reserve(expected);
    for (const json& x : *lps) {
      if (!x.is_number() || !std::isfinite(x.get<double>()))
        return DataLoss(where + ".token_logprobs[" + std::to_string(v.size()) + "]: expected a finite number");
      v.push_back(static_cast<float>(x.get<double>()));
    }
    out.push_back(std::move(v));
  }
  return out;
}

StatusOr<std::vector<std::vector<float>>> Score(const RolloutEndpoint& teacher, const ScoreCall& call,
                                                std::chrono::milliseconds timeout) {
  if (call.score_from.size() != call.sequences.size())
    return InvalidArgument("score call: " + std::to_string(call.score_from.size()) + " score_from for " +
                           std::to_string(call.sequences.size()) + " sequences");
  const std::string where = "teacher " + teacher.Describe() + " /score";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::vector<float>> out;
  for (size_t begin = 0; begin < call.sequences.size(); begin += kScoreSequencesPerBody) {
    const size_t end = std::min(call.sequences.size(), begin + kScoreSequencesPerBody);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return DeadlineExceeded(where + ": no answer within the timeout");
    TANDEM_ASSIGN_OR_RETURN(const std::string body,
                            PostJson(teacher.host, teacher.port, "/score", ScoreBody(call, begin, end), left, where));
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> part, ParseScoreAnswer(body, call, begin, end), where);
    for (auto& v : part) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace tandem::roles

// POST /generate to a rollout (rollout_client.h).
#include "workers/roles/rollout_client.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::roles {

using nlohmann::json;

std::string GenerateBody(const GenerateCall& call) {
  json sp = {{"temperature", call.temperature}, {"max_new_tokens", call.max_new_tokens}, {"n", call.n}};
  if (!call.stop_token_ids.empty()) sp["stop_token_ids"] = call.stop_token_ids;
  if (call.seed >= 0) sp["seed"] = call.seed;
  return json{{"input_ids", call.prompts}, {"sampling_params", sp}, {"return_logprob", true}}.dump();
}

StatusOr<std::vector<RolloutSample>> ParseGenerateAnswer(const std::string& body, size_t expected) {
  TANDEM_ASSIGN_OR_RETURN(const json j, ParseJsonBounded(body), "answer");
  const json list = j.is_array() ? j : json::array({j});
  if (list.size() != expected)
    return DataLoss("answer: " + std::to_string(list.size()) + " samples, asked for " + std::to_string(expected));
  std::vector<RolloutSample> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& s = list[i];
    const std::string where = "answer sample " + std::to_string(i);
    if (!s.is_object() || !s.contains("output_ids") || !s["output_ids"].is_array() || !s.contains("meta_info") ||
        !s["meta_info"].is_object())
      return DataLoss(where + ": expected an object with output_ids and meta_info");
    const json& meta = s["meta_info"];
    RolloutSample r;
    for (const json& id : s["output_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return DataLoss(where + ": output_ids: expected token ids");
      r.output_ids.push_back(id.get<int32_t>());
    }
    const auto lps = meta.find("output_token_logprobs");
    if (lps == meta.end() || !lps->is_array() || lps->size() != r.output_ids.size())
      return DataLoss(where + ": meta_info.output_token_logprobs: expected one per output id");
    for (size_t k = 0; k < lps->size(); ++k) {
      const json& e = (*lps)[k];
      if (!e.is_array() || e.size() < 2 || !e[0].is_number() || !e[1].is_number_integer() ||
          e[1].get<int64_t>() != r.output_ids[k] || !std::isfinite(e[0].get<double>()))
        return DataLoss(where + ": output_token_logprobs[" + std::to_string(k) + "]: expected [logprob, id, ...] of output " +
                        std::to_string(k));
      r.logprobs.push_back(static_cast<float>(e[0].get<double>()));
    }
    if (const auto fr = meta.find("finish_reason"); fr != meta.end() && fr->is_object() && fr->contains("type") &&
                                                     (*fr)["type"].is_string())
      r.finish_reason = (*fr)["type"].get<std::string>();
    if (const auto wv = meta.find("weight_version"); wv != meta.end()) {
      if (wv->is_string()) {
        try {
          r.weight_version = std::stoll(wv->get<std::string>());
        } catch (const std::exception&) {
          return DataLoss(where + ": meta_info.weight_version: not a number");
        }
      } else if (wv->is_number_integer()) {
        r.weight_version = wv->get<int64_t>();
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<RolloutSample>> Generate(const RolloutEndpoint& rollout, const GenerateCall& call,
                                              std::chrono::milliseconds timeout) {
  const std::string where = "rollout " + rollout.Describe() + " /generate";
  TANDEM_ASSIGN_OR_RETURN(const std::string body,
                          PostJson(rollout.host, rollout.port, "/generate", GenerateBody(call), timeout, where));
  const size_t expected = call.prompts.size() * static_cast<size_t>(call.n);
  TANDEM_ASSIGN_OR_RETURN(std::vector<RolloutSample> samples, ParseGenerateAnswer(body, expected), where);
  return samples;
}

}  // namespace tandem::roles

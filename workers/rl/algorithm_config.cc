// An RL algorithm's configuration and its strict JSON options (algorithm_config.h).
#include "workers/rl/algorithm_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem::rl {
namespace {

using nlohmann::json;

// One object's keys, read strictly: each getter checks a type and a range
// and names the key in its error; Finish refuses keys nobody read.
class StrictObject {
 public:
  StrictObject(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status Known(const std::vector<std::string_view>& keys) const {
    for (const auto& item : j_.items()) {
      bool known = false;
      for (const std::string_view k : keys) known = known || item.key() == k;
      if (!known) {
        std::string list;
        for (const std::string_view k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        return InvalidArgument(where_ + ": unknown key \"" + item.key() + "\" (known: " + list + ")");
      }
    }
    return Status::Ok();
  }
  bool Has(const char* key) const { return j_.contains(key); }
  bool IsNull(const char* key) const { return j_.at(key).is_null(); }

  // A number satisfying `ok` (described by `range`).
  Status Number(const char* key, double* out, const std::function<bool(double)>& ok, const char* range) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !ok(v.get<double>()))
      return Error(key, std::string("a number ") + range, v);
    *out = v.get<double>();
    return Status::Ok();
  }
  Status Integer(const char* key, int64_t* out, int64_t min) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) ||
        v.get<int64_t>() < min)
      return Error(key, "an integer >= " + std::to_string(min), v);
    *out = v.get<int64_t>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Error(key, "true or false", v);
    *out = v.get<bool>();
    return Status::Ok();
  }
  // A string, parsed by `parse` (whose error lists the choices).
  template <typename T, typename Parse>
  Status Choice(const char* key, T* out, Parse parse) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_.at(key);
    if (!v.is_string()) return Error(key, "a string", v);
    auto parsed = parse(v.get<std::string>());
    if (!parsed.ok()) return parsed.status().WithContext(where_ + "." + key);
    *out = *parsed;
    return Status::Ok();
  }
  Status Error(const char* key, const std::string& expected, const json& got) const {
    return InvalidArgument(where_ + "." + key + ": expected " + expected + ", got " +
                           got.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

bool NonNegative(double v) { return v >= 0; }

Status ApplyOverlong(const json& j, const std::string& where, std::optional<OverlongShaping>* out) {
  if (j.is_null()) {
    out->reset();
    return Status::Ok();
  }
  if (!j.is_object())
    return InvalidArgument(where + ": expected null or an object {cache, penalty, max_length}, got " +
                           j.dump(-1, ' ', false, json::error_handler_t::replace));
  StrictObject o(j, where);
  TANDEM_RETURN_IF_ERROR(o.Known({"cache", "penalty", "max_length"}));
  OverlongShaping s = out->value_or(OverlongShaping{});
  if (!out->has_value() && !o.Has("cache"))
    return InvalidArgument(where + ".cache: required (the tokens before max_length where the penalty grows)");
  TANDEM_RETURN_IF_ERROR(o.Integer("cache", &s.cache, 1));
  TANDEM_RETURN_IF_ERROR(o.Number("penalty", &s.penalty, NonNegative, ">= 0"));
  if (o.Has("max_length")) {
    if (o.IsNull("max_length")) s.max_length = 0;
    else TANDEM_RETURN_IF_ERROR(o.Integer("max_length", &s.max_length, 1));
  }
  if (s.max_length > 0 && s.cache > s.max_length)
    return InvalidArgument(where + ".cache: " + std::to_string(s.cache) + " is longer than max_length " +
                           std::to_string(s.max_length));
  *out = s;
  return Status::Ok();
}

Status ApplyDistill(const json& j, const std::string& where, std::optional<DistillConfig>* out) {
  if (j.is_null()) {
    out->reset();
    return Status::Ok();
  }
  if (!j.is_object())
    return InvalidArgument(where + ": expected null or an object {rl_coef, distill_coef, ratio_cap, top_k, top_k_coef}, got " +
                           j.dump(-1, ' ', false, json::error_handler_t::replace));
  StrictObject o(j, where);
  TANDEM_RETURN_IF_ERROR(o.Known({"rl_coef", "distill_coef", "ratio_cap", "top_k", "top_k_coef"}));
  DistillConfig d = out->value_or(DistillConfig{});
  TANDEM_RETURN_IF_ERROR(o.Number("rl_coef", &d.rl_coef, NonNegative, ">= 0"));
  TANDEM_RETURN_IF_ERROR(o.Number("distill_coef", &d.distill_coef, NonNegative, ">= 0"));
  TANDEM_RETURN_IF_ERROR(o.Number("ratio_cap", &d.loss.ratio_cap, [](double v) { return v >= 1; }, ">= 1"));
  TANDEM_RETURN_IF_ERROR(o.Integer("top_k", &d.top_k, 0));
  if (d.top_k > kMaxDistillTopK)
    return InvalidArgument(where + ".top_k: expected an integer in [0, " + std::to_string(kMaxDistillTopK) + "], got " +
                           std::to_string(d.top_k));
  TANDEM_RETURN_IF_ERROR(o.Number("top_k_coef", &d.top_k_coef, NonNegative, ">= 0"));
  *out = d;
  return Status::Ok();
}

}  // namespace

Status Validate(const AlgorithmConfig& c) {
  TANDEM_RETURN_IF_ERROR(Validate(c.advantage));
  TANDEM_RETURN_IF_ERROR(Validate(c.loss));
  if (c.overlong) {
    OverlongShaping s = *c.overlong;
    if (s.max_length == 0) s.max_length = std::max<int64_t>(s.cache, 1);  // the job fills it in
    TANDEM_RETURN_IF_ERROR(Validate(s));
  }
  if (c.distill) {
    TANDEM_RETURN_IF_ERROR(Validate(c.distill->loss), "distill");
    if (!(c.distill->rl_coef >= 0 && std::isfinite(c.distill->rl_coef)) ||
        !(c.distill->distill_coef >= 0 && std::isfinite(c.distill->distill_coef)))
      return InvalidArgument("distill: rl_coef and distill_coef must be finite numbers >= 0");
    if (c.distill->top_k < 0 || c.distill->top_k > kMaxDistillTopK)
      return InvalidArgument("distill.top_k: expected an integer in [0, " + std::to_string(kMaxDistillTopK) + "], got " +
                             std::to_string(c.distill->top_k));
    if (!(c.distill->top_k_coef >= 0 && std::isfinite(c.distill->top_k_coef)))
      return InvalidArgument("distill.top_k_coef: expected a finite number >= 0");
  }
  return Status::Ok();
}

StatusOr<AlgorithmConfig> ApplyAlgorithmOptions(const AlgorithmConfig& config, const json& options,
                                                std::string_view where_view) {
  const std::string where(where_view);
  AlgorithmConfig c = config;
  if (options.is_null()) return c;
  if (!options.is_object())
    return InvalidArgument(where + ": expected an object, got " +
                           options.dump(-1, ' ', false, json::error_handler_t::replace));
  StrictObject o(options, where);
  TANDEM_RETURN_IF_ERROR(o.Known({"advantage_estimator", "advantage_eps", "std_unbiased", "clip_ratio_low",
                                  "clip_ratio_high", "clip_ratio_c", "loss_agg_mode", "max_response_length",
                                  "kl_coef", "kl_estimator", "entropy_coef", "dynamic_sampling",
                                  "overlong_shaping", "distill"}));
  TANDEM_RETURN_IF_ERROR(o.Choice("advantage_estimator", &c.advantage.estimator, ParseAdvantageEstimator));
  TANDEM_RETURN_IF_ERROR(o.Number("advantage_eps", &c.advantage.eps, NonNegative, ">= 0"));
  TANDEM_RETURN_IF_ERROR(o.Bool("std_unbiased", &c.advantage.std_unbiased));
  TANDEM_RETURN_IF_ERROR(
      o.Number("clip_ratio_low", &c.loss.clip_ratio_low, [](double v) { return v >= 0 && v < 1; }, "in [0, 1)"));
  TANDEM_RETURN_IF_ERROR(o.Number("clip_ratio_high", &c.loss.clip_ratio_high, NonNegative, ">= 0"));
  if (o.Has("clip_ratio_c")) {
    if (o.IsNull("clip_ratio_c")) {
      c.loss.clip_ratio_c.reset();
    } else {
      double v = 0;
      TANDEM_RETURN_IF_ERROR(o.Number("clip_ratio_c", &v, [](double x) { return x > 1; }, "> 1 (or null: off)"));
      c.loss.clip_ratio_c = v;
    }
  }
  TANDEM_RETURN_IF_ERROR(o.Choice("loss_agg_mode", &c.loss.aggregation, ParseLossAggregation));
  if (o.Has("max_response_length")) {
    if (o.IsNull("max_response_length")) c.loss.max_response_length = 0;
    else TANDEM_RETURN_IF_ERROR(o.Integer("max_response_length", &c.loss.max_response_length, 1));
  }
  TANDEM_RETURN_IF_ERROR(o.Number("kl_coef", &c.loss.kl_coef, NonNegative, ">= 0"));
  TANDEM_RETURN_IF_ERROR(o.Choice("kl_estimator", &c.loss.kl_estimator, ParseKlEstimator));
  TANDEM_RETURN_IF_ERROR(o.Number("entropy_coef", &c.loss.entropy_coef, NonNegative, ">= 0"));
  TANDEM_RETURN_IF_ERROR(o.Bool("dynamic_sampling", &c.dynamic_sampling));
  if (o.Has("overlong_shaping"))
    TANDEM_RETURN_IF_ERROR(ApplyOverlong(options.at("overlong_shaping"), where + ".overlong_shaping", &c.overlong));
  if (o.Has("distill")) TANDEM_RETURN_IF_ERROR(ApplyDistill(options.at("distill"), where + ".distill", &c.distill));
  TANDEM_RETURN_IF_ERROR(Validate(c), where);
  return c;
}

json AlgorithmOptionsJson(const AlgorithmConfig& c) {
  json j;
  j["advantage_estimator"] = std::string(AdvantageEstimatorName(c.advantage.estimator));
  j["advantage_eps"] = c.advantage.eps;
  j["std_unbiased"] = c.advantage.std_unbiased;
  j["clip_ratio_low"] = c.loss.clip_ratio_low;
  j["clip_ratio_high"] = c.loss.clip_ratio_high;
  j["clip_ratio_c"] = c.loss.clip_ratio_c ? json(*c.loss.clip_ratio_c) : json(nullptr);
  j["loss_agg_mode"] = std::string(LossAggregationName(c.loss.aggregation));
  j["max_response_length"] = c.loss.max_response_length > 0 ? json(c.loss.max_response_length) : json(nullptr);
  j["kl_coef"] = c.loss.kl_coef;
  j["kl_estimator"] = std::string(KlEstimatorName(c.loss.kl_estimator));
  j["entropy_coef"] = c.loss.entropy_coef;
  j["dynamic_sampling"] = c.dynamic_sampling;
  if (c.overlong) {
    j["overlong_shaping"] = {{"cache", c.overlong->cache},
                             {"penalty", c.overlong->penalty},
                             {"max_length", c.overlong->max_length > 0 ? json(c.overlong->max_length) : json(nullptr)}};
  } else {
    j["overlong_shaping"] = nullptr;
  }
  j["distill"] = c.distill ? json{{"rl_coef", c.distill->rl_coef},
                                  {"distill_coef", c.distill->distill_coef},
                                  {"ratio_cap", c.distill->loss.ratio_cap},
                                  {"top_k", c.distill->top_k},
                                  {"top_k_coef", c.distill->top_k_coef}}
                           : json(nullptr);
  return j;
}

StatusOr<AlgorithmConfig> WithJobLimits(const AlgorithmConfig& config, int64_t max_response_tokens) {
  if (max_response_tokens <= 0)
    return InvalidArgument("max response tokens: expected > 0, got " + std::to_string(max_response_tokens));
  AlgorithmConfig c = config;
  if (c.loss.max_response_length == 0) c.loss.max_response_length = max_response_tokens;
  if (c.overlong) {
    if (c.overlong->max_length == 0) c.overlong->max_length = max_response_tokens;
    TANDEM_RETURN_IF_ERROR(Validate(*c.overlong));
  }
  TANDEM_RETURN_IF_ERROR(Validate(c));
  return c;
}

}  // namespace tandem::rl

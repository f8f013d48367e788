// Reading a HF config.json into ModelConfig (config.h; docs/model.md
// "Config"). A ConfigReader walks the document's keys once: each modelled key
// is read with its HF default and checked; the keys left over go to `extra`.
#include "workers/model/config.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/bounded_json.h"

namespace tandem::model {
namespace {

using nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 20;         // hidden, intermediate sizes
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 30;
constexpr double kMaxParameters = 1e13;

std::string Describe(const json& v) {
  std::string s = DumpJson(v);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Reads the keys of one config object, remembering which were modelled.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string_view source) : j_(j), source_(source) {}

  bool Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json* Get(const std::string& key) {
    used_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Status Error(const std::string& path, const std::string& expected, const json* got) const {
    return InvalidArgument(std::string(source_) + ": " + path + ": expected " + expected +
                           (got ? ", got " + Describe(*got) : ""));
  }

  // An integer in [lo, hi] into *out; *out (the default) stays when absent or null.
  Status Int(const std::string& key, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
      return Error(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", v);
    *out = v->get<int64_t>();
    return Status::Ok();
  }
  // A finite number > 0 (or >= 0 when allow_zero).
  Status Number(const std::string& key, bool allow_zero, double* out) { return NumberAt(key, Get(key), allow_zero, out); }
  Status NumberAt(const std::string& path, const json* v, bool allow_zero, double* out) const {
    if (!v) return Status::Ok();
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
        (!allow_zero && v->get<double>() == 0))
      return Error(path, allow_zero ? "a finite number >= 0" : "a finite number > 0", v);
    *out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool* out) {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Error(key, "true or false", v);
    *out = v->get<bool>();
    return Status::Ok();
  }
  // The key must be absent, null or equal to `only` (a setting the model does
  // not implement otherwise).
  Status Only(const std::string& key, const json& only, const std::string& why) {
    const json* v = Get(key);
    if (!v || *v == only) return Status::Ok();
    return Error(key, DumpJson(only) + " (" + why + ")", v);
  }

  json Leftover() const {
    json extra = json::object();
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key())) extra[it.key()] = it.value();
    return extra;
  }

 private:
  const json& j_;
  std::string_view source_;
  std::set<std::string> used_;
};

StatusOr<Architecture> ReadArchitecture(ConfigReader& r) {
  const std::string supported = "\"Qwen3ForCausalLM\" or \"Qwen3MoeForCausalLM\"";
  std::optional<Architecture> from_arch, from_type;
  if (const json* a = r.Get("architectures")) {
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string())
      return r.Error("architectures", "a list of one architecture name, " + supported, a);
    const std::string name = (*a)[0].get<std::string>();
    if (name == ArchitectureName(Architecture::kQwen3)) from_arch = Architecture::kQwen3;
    else if (name == ArchitectureName(Architecture::kQwen3Moe)) from_arch = Architecture::kQwen3Moe;
    else return r.Error("architectures[0]", "one of the supported architectures " + supported, &(*a)[0]);
  }
  if (const json* t = r.Get("model_type")) {
    const std::string name = t->is_string() ? t->get<std::string>() : "";
    if (name == ModelTypeName(Architecture::kQwen3)) from_type = Architecture::kQwen3;
    else if (name == ModelTypeName(Architecture::kQwen3Moe)) from_type = Architecture::kQwen3Moe;
    else return r.Error("model_type", "\"qwen3\" or \"qwen3_moe\" (architectures " + supported + ")", t);
  }
  if (from_arch && from_type && *from_arch != *from_type)
    return r.Error("model_type", "\"" + std::string(ModelTypeName(*from_arch)) + "\" to match architectures",
                   r.Get("model_type"));
  if (from_arch) return *from_arch;
  if (from_type) return *from_type;
  return r.Error("architectures", "one of the supported architectures " + supported + " (or a model_type)", nullptr);
}

// rope: 5.x `rope_parameters {rope_theta, rope_type}`, 4.x top-level
// `rope_theta` and `rope_scaling` (null or type "default").
Status ReadRope(ConfigReader& r, ModelConfig& c) {
  auto check_type = [&](const std::string& path, const json& obj) -> Status {
    for (const char* key : {"rope_type", "type"}) {
      if (!obj.contains(key) || obj.at(key).is_null()) continue;
      if (obj.at(key) != "default")
        return r.Error(path + "." + key, "\"default\" (the only rope type implemented)", &obj.at(key));
    }
    return Status::Ok();
  };
  std::optional<double> theta_top, theta_params;
  if (const json* v = r.Get("rope_theta")) {
    double t = 0;
    TANDEM_RETURN_IF_ERROR(r.NumberAt("rope_theta", v, false, &t));
    theta_top = t;
  }
  if (const json* p = r.Get("rope_parameters")) {
    if (!p->is_object()) return r.Error("rope_parameters", "an object {rope_theta, rope_type}", p);
    TANDEM_RETURN_IF_ERROR(check_type("rope_parameters", *p));
    if (p->contains("rope_theta")) {
      double t = 0;
      TANDEM_RETURN_IF_ERROR(r.NumberAt("rope_parameters.rope_theta", &p->at("rope_theta"), false, &t));
      theta_params = t;
    }
    if (p->contains("partial_rotary_factor") && p->at("partial_rotary_factor") != 1.0)
      return r.Error("rope_parameters.partial_rotary_factor", "1.0 (partial rotary is not implemented)",
                     &p->at("partial_rotary_factor"));
  }
  if (const json* s = r.Get("rope_scaling")) {
    if (!s->is_object()) return r.Error("rope_scaling", "null or an object with rope_type \"default\"", s);
    TANDEM_RETURN_IF_ERROR(check_type("rope_scaling", *s));
  }
  if (theta_top && theta_params && *theta_top != *theta_params)
    return r.Error("rope_theta", "the same value as rope_parameters.rope_theta (" +
                   std::to_string(*theta_params) + ")", r.Get("rope_theta"));
  if (theta_params) c.rope_theta = *theta_params;
  else if (theta_top) c.rope_theta = *theta_top;
  TANDEM_RETURN_IF_ERROR(r.Only("partial_rotary_factor", 1.0, "partial rotary is not implemented"));
  return Status::Ok();
}

Status ReadDtype(ConfigReader& r, ModelConfig& c) {
  std::optional<ConfigDtype> seen;
  for (const char* key : {"dtype", "torch_dtype"}) {
    const json* v = r.Get(key);
    if (!v) continue;
    std::optional<ConfigDtype> d;
    for (ConfigDtype x : {ConfigDtype::kFloat32, ConfigDtype::kBFloat16, ConfigDtype::kFloat16})
      if (v->is_string() && v->get<std::string>() == ConfigDtypeName(x)) d = x;
    if (!d) return r.Error(key, "\"float32\", \"bfloat16\" or \"float16\"", v);
    if (seen && *seen != *d)
      return r.Error(key, "the same dtype as dtype (\"" + std::string(ConfigDtypeName(*seen)) + "\")", v);
    seen = d;
  }
  if (seen) c.dtype = *seen;
  return Status::Ok();
}

Status ReadMoe(ConfigReader& r, ModelConfig& c) {
  // 4.x `num_experts`, 5.x `num_local_experts` (HF's attribute_map).
  std::optional<int64_t> experts;
  for (const char* key : {"num_local_experts", "num_experts"}) {
    int64_t e = -1;
    TANDEM_RETURN_IF_ERROR(r.Int(key, 0, kMaxExperts, &e));
    if (e < 0) continue;
    if (experts && *experts != e)
      return r.Error(key, "the same value as num_local_experts (" + std::to_string(*experts) + ")", r.Get(key));
    experts = e;
  }
  if (experts) c.num_experts = *experts;
  TANDEM_RETURN_IF_ERROR(r.Int("num_experts_per_tok", 1, kMaxExperts, &c.num_experts_per_tok));
  TANDEM_RETURN_IF_ERROR(r.Int("moe_intermediate_size", 1, kMaxDim, &c.moe_intermediate_size));
  TANDEM_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &c.norm_topk_prob));
  TANDEM_RETURN_IF_ERROR(r.Int("decoder_sparse_step", 1, kMaxLayers, &c.decoder_sparse_step));
  TANDEM_RETURN_IF_ERROR(r.Number("router_aux_loss_coef", true, &c.router_aux_loss_coef));
  TANDEM_RETURN_IF_ERROR(r.Bool("output_router_logits", &c.output_router_logits));
  if (const json* m = r.Get("mlp_only_layers")) {
    if (!m->is_array()) return r.Error("mlp_only_layers", "a list of layer indices", m);
    c.mlp_only_layers.clear();
    for (size_t i = 0; i < m->size(); ++i) {
      const json& x = (*m)[i];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.num_hidden_layers)
        return r.Error("mlp_only_layers[" + std::to_string(i) + "]",
                       "a layer index in [0, " + std::to_string(c.num_hidden_layers) + ")", &x);
      c.mlp_only_layers.push_back(x.get<int64_t>());
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view ArchitectureName(Architecture a) {
  return a == Architecture::kQwen3 ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM";
}
std::string_view ModelTypeName(Architecture a) { return a == Architecture::kQwen3 ? "qwen3" : "qwen3_moe"; }

std::string_view ConfigDtypeName(ConfigDtype d) {
  switch (d) {
    case ConfigDtype::kFloat32: return "float32";
    case ConfigDtype::kBFloat16: return "bfloat16";
    case ConfigDtype::kFloat16: return "float16";
  }
  return "float32";
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (architecture != Architecture::kQwen3Moe || num_experts <= 0) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::NumParameters() const {
  const int64_t h = hidden_size, d = head_dim;
  int64_t per_layer_attn = h * num_attention_heads * d * 2 + h * num_key_value_heads * d * 2 + 2 * d + 2 * h;
  int64_t total = vocab_size * h * (tie_word_embeddings ? 1 : 2) + h;
  for (int64_t l = 0; l < num_hidden_layers; ++l) {
    total += per_layer_attn;
    if (IsMoeLayer(l)) total += h * num_experts + num_experts * 3 * h * moe_intermediate_size;
    else total += 3 * h * intermediate_size;
  }
  return total;
}

ModelConfig DefaultConfig(Architecture a) {
  ModelConfig c;
  c.architecture = a;
  if (a == Architecture::kQwen3Moe) {
    c.hidden_size = 2048;
    c.intermediate_size = 6144;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.head_dim = c.hidden_size / c.num_attention_heads;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 768;
    c.router_aux_loss_coef = 0.001;
  }
  return c;
}

Status ValidateModelConfig(const ModelConfig& c) {
  auto bad = [](const std::string& key, const std::string& expected, int64_t got) {
    return InvalidArgument(key + ": expected " + expected + ", got " + std::to_string(got));
  };
  auto positive = [&](const char* key, int64_t v, int64_t hi) -> Status {
    if (v < 1 || v > hi) return bad(key, "an integer in [1, " + std::to_string(hi) + "]", v);
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size, kMaxVocab));
  TANDEM_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size, kMaxDim));
  TANDEM_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_hidden_layers, kMaxLayers));
  TANDEM_RETURN_IF_ERROR(positive("num_attention_heads", c.num_attention_heads, kMaxHeads));
  TANDEM_RETURN_IF_ERROR(positive("num_key_value_heads", c.num_key_value_heads, kMaxHeads));
  TANDEM_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size, kMaxDim));
  TANDEM_RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position_embeddings, kMaxPositions));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return bad("num_key_value_heads",
               "a divisor of num_attention_heads (" + std::to_string(c.num_attention_heads) + ")",
               c.num_key_value_heads);
  if (c.head_dim < 2 || c.head_dim > 1024 || c.head_dim % 2 != 0)
    return bad("head_dim", "an even integer in [2, 1024] (rotary embeddings rotate pairs)", c.head_dim);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    return InvalidArgument("rms_norm_eps: expected a finite number > 0");
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    return InvalidArgument("rope_theta: expected a finite number > 0");
  if (c.architecture == Architecture::kQwen3 && c.num_experts != 0)
    return bad("num_experts", "0 for Qwen3ForCausalLM (a dense model)", c.num_experts);
  if (c.num_experts < 0 || c.num_experts > kMaxExperts)
    return bad("num_experts", "an integer in [0, " + std::to_string(kMaxExperts) + "]", c.num_experts);
  if (c.num_experts > 0) {
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts)
      return bad("num_experts_per_tok", "an integer in [1, num_experts (" + std::to_string(c.num_experts) + ")]",
                 c.num_experts_per_tok);
    TANDEM_RETURN_IF_ERROR(positive("moe_intermediate_size", c.moe_intermediate_size, kMaxDim));
    TANDEM_RETURN_IF_ERROR(positive("decoder_sparse_step", c.decoder_sparse_step, kMaxLayers));
  }
  for (size_t i = 0; i < c.mlp_only_layers.size(); ++i)
    if (c.mlp_only_layers[i] < 0 || c.mlp_only_layers[i] >= c.num_hidden_layers)
      return bad("mlp_only_layers[" + std::to_string(i) + "]",
                 "a layer index in [0, " + std::to_string(c.num_hidden_layers) + ")", c.mlp_only_layers[i]);
  if (!(c.router_aux_loss_coef >= 0) || !std::isfinite(c.router_aux_loss_coef))
    return InvalidArgument("router_aux_loss_coef: expected a finite number >= 0");
  // Guard the products below against overflow with a floating estimate.
  const double h = static_cast<double>(c.hidden_size);
  const double est = static_cast<double>(c.vocab_size) * h * 2 +
                     static_cast<double>(c.num_hidden_layers) *
                         (4 * h * static_cast<double>(c.num_attention_heads * c.head_dim) +
                          3 * h * static_cast<double>(c.intermediate_size) +
                          3 * h * static_cast<double>(c.num_experts) * static_cast<double>(c.moe_intermediate_size));
  if (est > kMaxParameters)
    return InvalidArgument("config: the model would have about " + std::to_string(est) +
                           " parameters, more than the limit 1e13");
  return Status::Ok();
}

StatusOr<ModelConfig> ModelConfigFromJson(const json& j, std::string_view source) {
  if (!j.is_object()) return InvalidArgument(std::string(source) + ": expected a JSON object");
  ConfigReader r(j, source);
  TANDEM_ASSIGN_OR_RETURN(Architecture arch, ReadArchitecture(r));
  ModelConfig c = DefaultConfig(arch);
  TANDEM_RETURN_IF_ERROR(r.Int("vocab_size", 1, kMaxVocab, &c.vocab_size));
  TANDEM_RETURN_IF_ERROR(r.Int("hidden_size", 1, kMaxDim, &c.hidden_size));
  TANDEM_RETURN_IF_ERROR(r.Int("num_hidden_layers", 1, kMaxLayers, &c.num_hidden_layers));
  TANDEM_RETURN_IF_ERROR(r.Int("num_attention_heads", 1, kMaxHeads, &c.num_attention_heads));
  // null means "as many as attention heads" (HF's __post_init__).
  c.num_key_value_heads = r.Has("num_key_value_heads") || !j.contains("num_key_value_heads")
                              ? c.num_key_value_heads
                              : c.num_attention_heads;
  TANDEM_RETURN_IF_ERROR(r.Int("num_key_value_heads", 1, kMaxHeads, &c.num_key_value_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return r.Error("num_key_value_heads",
                   "a divisor of num_attention_heads (" + std::to_string(c.num_attention_heads) + ")",
                   r.Get("num_key_value_heads"));
  // Qwen3: head_dim defaults to 128; Qwen3-MoE (and an explicit null): hidden / heads.
  if (arch == Architecture::kQwen3Moe || (j.contains("head_dim") && j.at("head_dim").is_null()))
    c.head_dim = c.hidden_size / c.num_attention_heads;
  TANDEM_RETURN_IF_ERROR(r.Int("head_dim", 2, 1024, &c.head_dim));
  if (c.head_dim % 2 != 0 || c.head_dim < 2)
    return r.Error("head_dim", "an even integer >= 2 (rotary embeddings rotate pairs)",
                   j.contains("head_dim") ? &j.at("head_dim") : nullptr);
  TANDEM_RETURN_IF_ERROR(r.Int("intermediate_size", 1, kMaxDim, &c.intermediate_size));
  TANDEM_RETURN_IF_ERROR(r.Int("max_position_embeddings", 1, kMaxPositions, &c.max_position_embeddings));
  TANDEM_RETURN_IF_ERROR(r.Number("rms_norm_eps", false, &c.rms_norm_eps));
  TANDEM_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  TANDEM_RETURN_IF_ERROR(ReadRope(r, c));
  TANDEM_RETURN_IF_ERROR(ReadDtype(r, c));
  if (arch == Architecture::kQwen3Moe) TANDEM_RETURN_IF_ERROR(ReadMoe(r, c));
  // Settings the model does not implement: refused, not ignored.
  TANDEM_RETURN_IF_ERROR(r.Only("hidden_act", "silu", "the only activation implemented"));
  TANDEM_RETURN_IF_ERROR(r.Only("attention_bias", false, "attention biases are not implemented"));
  TANDEM_RETURN_IF_ERROR(r.Only("use_sliding_window", false, "sliding-window attention is not implemented"));
  TANDEM_RETURN_IF_ERROR(r.Only("attention_dropout", 0.0, "attention dropout is not implemented"));
  if (const json* lt = r.Get("layer_types")) {
    if (!lt->is_array()) return r.Error("layer_types", "a list of \"full_attention\"", lt);
    for (size_t i = 0; i < lt->size(); ++i)
      if ((*lt)[i] != "full_attention")
        return r.Error("layer_types[" + std::to_string(i) + "]",
                       "\"full_attention\" (sliding-window attention is not implemented)", &(*lt)[i]);
  }
  c.extra = r.Leftover();
  if (j.contains("layer_types")) c.extra["layer_types"] = j.at("layer_types");
  Status valid = ValidateModelConfig(c);
  if (!valid.ok()) return valid.WithContext(source);
  return c;
}

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  auto j = ParseJsonBounded(json_text);
  if (!j.ok()) return j.status().WithContext(source);
  return ModelConfigFromJson(*j, source);
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss(path + ": read failed");
  return ParseModelConfig(text.str(), path);
}

json ToHfJson(const ModelConfig& c) {
  json j = json::object();
  j["architectures"] = json::array({std::string(ArchitectureName(c.architecture))});
  j["model_type"] = std::string(ModelTypeName(c.architecture));
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = false;
  j["use_sliding_window"] = false;
  j["attention_dropout"] = 0.0;
  // 5.x names, then the 4.x aliases (5.x folds a top-level rope_theta and
  // torch_dtype into these; 4.x reads them).
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  j["rope_theta"] = c.rope_theta;
  j["dtype"] = std::string(ConfigDtypeName(c.dtype));
  j["torch_dtype"] = std::string(ConfigDtypeName(c.dtype));
  if (c.architecture == Architecture::kQwen3Moe) {
    j["num_local_experts"] = c.num_experts;
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    j["output_router_logits"] = c.output_router_logits;
  }
  for (auto it = c.extra.begin(); it != c.extra.end(); ++it)
    if (!j.contains(it.key())) j[it.key()] = it.value();
  return j;
}

}  // namespace tandem::model

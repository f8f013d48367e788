// The model's configuration, read from a Hugging Face config.json of
// `Qwen3ForCausalLM` or `Qwen3MoeForCausalLM` (docs/model.md "Config";
// schemas/model.schema.json; DESIGN.md "Formats users already have").
//
// Field names and defaults are HF's (transformers' Qwen3Config and
// Qwen3MoeConfig). Both generations of config.json load: transformers 4.x
// (`num_experts`, a top-level `rope_theta`, `rope_scaling`, `torch_dtype`)
// and 5.x save_pretrained (`num_local_experts`, `rope_parameters:
// {rope_theta, rope_type}`, `dtype`); where both spellings are present they
// must agree. Settings the model does not implement (a rope type other than
// "default", attention biases, sliding windows, an activation other than
// SiLU, partial rotary embeddings) are refused, never ignored. Every error is
// an InvalidArgument naming the key path and what was expected; an unknown
// architecture names the supported ones. Keys the model has no use for
// (token ids, transformers_version, ...) are kept verbatim in `extra` and
// written back by ToHfJson.
//
// This header and config.cc need no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::model {

enum class Architecture { kQwen3, kQwen3Moe };

// "Qwen3ForCausalLM" / "Qwen3MoeForCausalLM"; the HF model_type ("qwen3",
// "qwen3_moe").
std::string_view ArchitectureName(Architecture a);
std::string_view ModelTypeName(Architecture a);

// The parameters' dtype named by config.json (`dtype` or `torch_dtype`).
enum class ConfigDtype { kFloat32, kBFloat16, kFloat16 };
std::string_view ConfigDtypeName(ConfigDtype d);  // "float32", "bfloat16", "float16"

struct ModelConfig {
  Architecture architecture = Architecture::kQwen3;
  int64_t vocab_size = 151936;
  int64_t hidden_size = 4096;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;
  int64_t intermediate_size = 22016;       // dense MLP (and MoE models' dense layers)
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;             // rope_type "default" only
  bool tie_word_embeddings = false;
  ConfigDtype dtype = ConfigDtype::kFloat32;  // HF's default when absent
  // MoE (architecture kQwen3Moe; num_experts == 0 for dense models).
  int64_t num_experts = 0;                 // 4.x `num_experts`, 5.x `num_local_experts`
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;    // layer indices with a dense MLP
  double router_aux_loss_coef = 0.0;
  bool output_router_logits = false;
  // Keys read but not modelled, written back verbatim by ToHfJson.
  nlohmann::json extra = nlohmann::json::object();

  // True when layer `layer` has a MoE MLP, exactly as HF's Qwen3-MoE decides:
  // not in mlp_only_layers, num_experts > 0 and (layer + 1) %
  // decoder_sparse_step == 0. Always false for kQwen3.
  bool IsMoeLayer(int64_t layer) const;

  // Number of parameters (elements) of the model, lm_head included unless
  // tied.
  int64_t NumParameters() const;
};

// The defaults of an architecture (HF's Qwen3Config() / Qwen3MoeConfig()).
ModelConfig DefaultConfig(Architecture a);

// Parses config.json text (bounded nesting). `source` names the file in
// errors ("config.json: num_key_value_heads: expected a positive integer
// dividing num_attention_heads (8), got 3").
StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source = "config.json");
// The same from a parsed document.
StatusOr<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, std::string_view source = "config.json");
// Reads and parses a file (NotFound when it cannot be read).
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Checks the invariants ParseModelConfig enforces on a config built in code
// (positive sizes, head counts dividing, experts_per_tok <= num_experts, ...).
Status ValidateModelConfig(const ModelConfig& c);

// A config.json that transformers 5.x loads (and 4.x too): the 5.x names
// (`num_local_experts`, `rope_parameters`, `dtype`) plus the 4.x aliases
// (`num_experts`, `rope_theta`, `torch_dtype`), then `extra`.
nlohmann::json ToHfJson(const ModelConfig& c);

}  // namespace tandem::model

// The sft presets (sft_presets.h).
#include "workers/roles/sft_presets.h"

#include <array>

namespace tandem::roles {
namespace {

struct Preset {
  std::string_view name;
  int64_t hidden, layers, heads, kv_heads, head_dim, intermediate;
};

constexpr std::array<Preset, 3> kPresets{{
    {"tiny", 64, 2, 4, 2, 16, 192},
    {"small", 192, 4, 4, 2, 48, 576},
    {"base", 768, 16, 12, 4, 64, 2304},
}};

}  // namespace

StatusOr<model::ModelConfig> SftPreset(std::string_view name, int64_t vocab_size) {
  for (const Preset& p : kPresets) {
    if (p.name != name) continue;
    model::ModelConfig c = model::DefaultConfig(model::Architecture::kQwen3);
    c.vocab_size = vocab_size;
    c.hidden_size = p.hidden;
    c.num_hidden_layers = p.layers;
    c.num_attention_heads = p.heads;
    c.num_key_value_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.intermediate_size = p.intermediate;
    c.max_position_embeddings = 2048;
    c.tie_word_embeddings = true;
    c.rope_theta = 10000.0;
    return c;
  }
  std::string names;
  for (const Preset& p : kPresets) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return InvalidArgument("unknown model preset '" + std::string(name) + "' (known: " + names + ")");
}

std::vector<std::string> SftPresetNames() {
  std::vector<std::string> out;
  for (const Preset& p : kPresets) out.emplace_back(p.name);
  return out;
}

}  // namespace tandem::roles

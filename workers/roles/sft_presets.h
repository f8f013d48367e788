// Model configs for sft from scratch (docs/model.md, "sft"): Qwen3 dense
// presets sized for the byte-level tokenizer (vocabulary 259), embeddings
// tied. "tiny" (~0.1M parameters) is for tests, "small" (~2M) learns easy
// synthetic-arith on 2 CPU cores in about three minutes, "base" (~110M) is
// for a GPU. Each field can be overridden by a flag.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/model/config.h"

namespace tandem::roles {

// The preset named `name` with `vocab_size`; InvalidArgument naming the
// presets for an unknown name.
StatusOr<model::ModelConfig> SftPreset(std::string_view name, int64_t vocab_size);
std::vector<std::string> SftPresetNames();

}  // namespace tandem::roles

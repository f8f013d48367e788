// model.safetensors.index.json, the index of a sharded checkpoint, as
// transformers (save_pretrained) and huggingface_hub write it:
//   {"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}
// with shards named model-00001-of-00003.safetensors.
//
// Contract: ParseSafetensorsIndex accepts an object whose "weight_map" is an
// object of strings, each a plain file name in the checkpoint directory (no
// '/', not "." or "..", no NUL, not empty: a name that would escape the
// directory is refused, naming the tensor); "metadata", when present, is an
// object, and its "total_size", when present, a non-negative integer (not
// checked against the shards: third-party indexes get it wrong, transformers
// ignores it). Other top-level keys are ignored, as transformers does.
// SafetensorsIndexJson writes the text byte for byte as transformers does
// (json.dumps(indent=2, sort_keys=True) + "\n", non-ASCII escaped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem::model {

inline constexpr std::string_view kSafetensorsSingleFileName = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexFileName = "model.safetensors.index.json";
// The largest index file read (a 100k-tensor index is about 10 MB).
inline constexpr uint64_t kMaxSafetensorsIndexBytes = 100'000'000;

struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<uint64_t> total_size;             // metadata.total_size
};

// `file` names the index in errors.
StatusOr<SafetensorsIndex> ParseSafetensorsIndex(std::string_view text, std::string_view file);

std::string SafetensorsIndexJson(const std::map<std::string, std::string>& weight_map, uint64_t total_size);

// "model-00001-of-00003.safetensors" for shard 0 of 3 (at least 5 digits each).
std::string SafetensorsShardFileName(size_t shard, size_t shard_count);

// Ok when `name` is a plain file name (no '/', not "."/"..", no NUL, not empty).
Status CheckPlainFileName(std::string_view name);

}  // namespace tandem::model

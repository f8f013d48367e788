// The manifest of one published weight version (docs/weights.md "The
// manifest"; issue #15 item 1): what a reader needs to find every parameter
// in the publisher's flat buffers, and to know the bytes are whole.
//
//   {"format": "tandem.weights/1", "version": 3, "digest": "xxh64:0123456789abcdef",
//    "buffers": [{"dtype": "F32", "bytes": 1048576}],
//    "tensors": [{"name": "model.embed_tokens.weight", "dtype": "F32", "shape": [300, 64],
//                 "buffer": 0, "offset": 0}, ...]}
//
// `tensors` are the publisher's ParameterSet slots (parameter_set.h), in
// buffer order: HF names, except each MoE layer's experts, which are one
// stacked tensor per layer in the kernels' layout
// (model.layers.{i}.mlp.experts.w_gate_up / w_down). `offset` is in bytes
// from the start of its buffer. `digest` is XXH64 (seed 0, xxh64.h) of the
// buffers' bytes, buffer 0 first, each whole (alignment padding included).
//
// Contract: ParseWeightManifest never throws and accepts only a manifest
// ValidateWeightManifest passes; every error is InvalidArgument naming the
// field by its JSON path ("tensors[3].offset") and what was expected. Valid
// means: the format string above; version >= 0; 1..64 buffers with a float
// or integer dtype and 0 <= bytes < 2^56; tensors with unique non-empty
// names (at most 1024 bytes), dims >= 0 (at most 8 of them), a buffer index in range,
// an offset aligned to the dtype's size, and bytes = prod(shape) * size
// that lie inside the buffer without overlapping another tensor. Unknown
// keys are refused (a typo is not ignored). ToJson(m) parses back to m.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/model/dtype.h"

namespace tandem::weights {

inline constexpr std::string_view kManifestFormat = "tandem.weights/1";

struct WeightManifest {
  struct Buffer {
    model::DType dtype = model::DType::kF32;
    uint64_t bytes = 0;
  };
  struct Tensor {
    std::string name;
    model::DType dtype = model::DType::kF32;
    std::vector<int64_t> shape;
    int buffer = 0;
    uint64_t offset = 0;  // bytes from the buffer's start
    uint64_t nbytes() const;
  };
  int64_t version = 0;
  uint64_t digest = 0;  // XXH64 of the buffers (see above)
  std::vector<Buffer> buffers;
  std::vector<Tensor> tensors;

  uint64_t total_bytes() const;  // sum of the buffers' bytes
  const Tensor* Find(std::string_view name) const;
};

Status ValidateWeightManifest(const WeightManifest& m);
StatusOr<WeightManifest> ParseWeightManifest(std::string_view json_text);
StatusOr<WeightManifest> WeightManifestFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const WeightManifest& m);

// "[300, 64]", for messages.
std::string ShapeString(const std::vector<int64_t>& shape);
// "xxh64:0123456789abcdef"
std::string DigestString(uint64_t digest);

}  // namespace tandem::weights

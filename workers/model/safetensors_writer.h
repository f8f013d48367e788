// Writing safetensors files and checkpoint directories that the official
// library and transformers read, byte for byte as they write them.
//
// Contract, one file (WriteSafetensors): the tensors are validated first
// (non-empty unique UTF-8 names, not "__metadata__"; dims >= 0; nbytes ==
// prod(shape) * DTypeSize; data non-null unless nbytes is 0) and nothing is
// written when one is wrong. The layout is the official writer's: tensors
// ordered by dtype, widest first (I64, F64, F32, I32, BF16, F16, I16, I8, U8,
// BOOL: safetensors' Dtype order, descending), then by name; the header is
// compact JSON ({"__metadata__": {...}} first, only when metadata is not
// empty; then each tensor as {"dtype","shape","data_offsets"} in data order),
// padded with spaces to a multiple of 8 bytes, so every tensor's data is
// aligned to its element size when the file is mapped. Sorting by name alone
// would misalign tensors, and padding between tensors is a hole the format
// refuses. The bytes go to a temporary file in the same directory, which is
// fsync'ed, renamed over `path`, and the directory fsync'ed: after a crash,
// `path` holds the old file or the new one, never half of one.
//
// Contract, a checkpoint (WriteSafetensorsCheckpoint): the tensors are split
// into shards as huggingface_hub does (in the caller's order, a new shard
// when the next tensor would take the current one past max_shard_bytes, a
// tensor larger than that alone in its shard). One shard: `dir`/model.safetensors.
// Several: model-00001-of-0000N.safetensors ... and model.safetensors.index.json
// {"metadata": {"total_size": bytes of tensor data}, "weight_map": {...}}
// (SafetensorsIndexJson). Each file carries `metadata` plus "format": "pt"
// (transformers refuses a file whose metadata lacks a known format). `dir`
// (and its parents) are created if missing. Rewriting a checkpoint replaces it: files of the
// old layout that the new one does not use (model.safetensors, the index,
// model-*-of-*.safetensors) are removed, in an order such that a reader
// (transformers' rule: model.safetensors first) sees the old checkpoint, the
// new one, or an error, never a mix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/dtype.h"

namespace tandem::model {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // nbytes in host memory, row-major, little-endian
  size_t nbytes = 0;
};

struct WriteOptions {
  uint64_t max_shard_bytes = 5ull << 30;
  std::map<std::string, std::string> metadata;  // "__metadata__" of every file
};

// The first 8 + N bytes of the file WriteSafetensors writes (size, header
// JSON, padding); `order` receives the indices of `tensors` in data order.
StatusOr<std::string> SafetensorsHeaderBytes(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata,
                                             std::vector<size_t>* order);

Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata);

Status WriteSafetensorsCheckpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                  const WriteOptions& options);

}  // namespace tandem::model

// A checkpoint directory in the Hugging Face layout: model.safetensors, or
// model.safetensors.index.json plus the shards its weight_map names.
//
// Contract: Open looks for model.safetensors first and the index second, as
// transformers does (a directory with both reads as the single file). For a
// sharded checkpoint every shard the index names must be a plain file name
// inside `dir` (no "../", no absolute path; symlinks, as in the HF cache, are
// followed), must exist and be a valid safetensors file, must hold every
// tensor the index maps to it, and must hold no tensor the index does not map
// to it. Errors name the directory, index or shard, and the tensor. Views
// stay valid while the checkpoint (or a copy) lives.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/model/safetensors_file.h"

namespace tandem::model {

class SafetensorsCheckpoint {
 public:
  static StatusOr<SafetensorsCheckpoint> Open(const std::string& dir);

  // Every tensor: the files in order (shards by file name), each in data order.
  std::vector<std::string> names() const { return names_; }
  bool Contains(std::string_view name) const { return where_.find(name) != where_.end(); }
  // NotFound "<dir>: no tensor \"x\"" when absent.
  StatusOr<TensorView> Get(std::string_view name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  bool sharded() const { return sharded_; }
  const std::string& dir() const { return dir_; }

 private:
  SafetensorsCheckpoint() = default;

  std::string dir_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> names_;
  std::map<std::string, size_t, std::less<>> where_;  // name -> files_[i]
};

}  // namespace tandem::model

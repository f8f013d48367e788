// One safetensors file, mmap'ed read-only, with views of its tensors.
//
// Contract: Open maps the whole file (a regular file, or a symlink to one, as
// in the Hugging Face cache) and validates its header with
// ParseSafetensorsHeader; every error names the path. A TensorView points
// into the mapping: it stays valid while the SafetensorsFile, or any copy of
// it, lives (copies share the mapping; moving does not move it). The data of
// a view is aligned to its dtype's size when the writer aligned it (tandem's
// writer and the official one do: header padded to 8 bytes, tensors ordered
// by dtype size); a file from another writer may not be, so readers copy
// with memcpy rather than cast. The file must not be truncated by another
// process while mapped (the kernel would deliver SIGBUS on access).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/model/dtype.h"
#include "workers/model/safetensors_header.h"

namespace tandem::model {

// A tensor inside a mapped file: `nbytes` bytes at `data`, row-major.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the path of the file that holds it

  int64_t numel() const {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    return n;
  }
};

class SafetensorsFile {
 public:
  // NotFound when `path` does not exist; DataLoss / InvalidArgument as
  // ParseSafetensorsHeader for a bad file; all naming `path`.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in data order (the order the official writer lays them out).
  const std::vector<std::string>& names() const { return names_; }
  bool Contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  // NotFound "<path>: no tensor \"x\"" when absent.
  StatusOr<TensorView> Get(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsHeader& header() const { return header_; }
  uint64_t file_bytes() const { return size_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<const std::byte> mapping_;  // munmap'ed by the last copy
  uint64_t size_ = 0;
  SafetensorsHeader header_;
  std::vector<std::string> names_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> header_.tensors[i]
};

}  // namespace tandem::model

// Helpers of the safetensors tests: a temporary directory removed at the
// end, files written byte for byte, files built by hand from the format
// (8-byte little-endian header size, header JSON, data), random bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::model::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }
  // The names in the directory, sorted.
  std::vector<std::string> List() const;

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, std::string_view bytes);
std::string ReadBytes(const std::string& path);

// The 8-byte little-endian encoding of `n`.
std::string U64Le(uint64_t n);
// A safetensors file: U64Le(header.size()) + header + data, exactly as given.
std::string HandBuiltFile(std::string_view header, std::string_view data);

// `n` random bytes (a fresh seed each run).
std::vector<std::byte> RandomBytes(size_t n);

inline std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace tandem::model::testing

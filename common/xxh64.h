// XXH64 (Yann Collet's xxHash, 64-bit variant, as specified in
// xxhash/doc/xxhash_spec.md): the digest of a published weight version
// (workers/weights/weight_manifest.h) and of a checkpoint's files
// (workers/checkpoint/checkpoint_digest.h). Written here rather than linked
// from libxxhash so that the GPU machine's standalone build
// (workers/standalone) needs no extra package.
//
// Contract: Xxh64 is the streaming form; Update may be called with any split
// of the input and Digest() equals XXH64(all bytes, seed), the same value
// `xxhsum -H64` prints. Digest() does not change the state (more Update calls
// may follow). Torch-free, no allocation; not thread-safe per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  uint64_t v_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

// One-shot XXH64.
uint64_t Xxh64Of(const void* data, size_t n, uint64_t seed = 0);

// A digest as the manifests write it, 16 lowercase hex digits, and back:
// nullopt unless exactly 16 lowercase hex digits.
std::string Xxh64Hex(uint64_t digest);
std::optional<uint64_t> ParseXxh64Hex(std::string_view hex);

}  // namespace tandem

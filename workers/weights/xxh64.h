// XXH64 (Yann Collet's xxHash, 64-bit variant, as specified in
// xxhash/doc/xxhash_spec.md): the digest of a published weight version
// (weight_manifest.h). Written here rather than linked from libxxhash so the
// GPU machine's standalone build (workers/standalone) needs no extra package.
//
// Contract: Xxh64 is the streaming form; Update may be called with any split
// of the input and Digest() equals XXH64(all bytes, seed), the same value
// `xxhsum -H64` prints. Digest() does not change the state (more Update calls
// may follow). Torch-free, no allocation; not thread-safe per object.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::weights {

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

}  // namespace tandem::weights

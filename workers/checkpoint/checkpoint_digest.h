// The digest of a checkpoint's files (docs/weights.md "Checkpoints"): XXH64
// (common/xxh64.h, the weight manifests' digest too), a fast
// non-cryptographic checksum (~10 GB/s, so verifying a checkpoint costs its
// read, not its hash). It detects torn, truncated and bit-flipped files; it
// is no defence against someone who forges a checkpoint on purpose (the run
// dir is trusted storage whose bytes may be damaged, not attacked).
//
// In the manifest a digest is 16 lowercase hex digits ("xxh64";
// Xxh64Hex and ParseXxh64Hex, common/xxh64.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/xxh64.h"

namespace tandem::checkpoint {

inline constexpr std::string_view kDigestAlgorithm = "xxh64";

// Streaming XXH64 of the bytes given to Update, in order.
class Digester {
 public:
  void Update(std::span<const std::byte> bytes) { h_.Update(bytes.data(), bytes.size()); }
  // The digest of everything so far (Update may go on afterwards).
  uint64_t Digest() const { return h_.Digest(); }

 private:
  Xxh64 h_;
};

// The digest of `bytes` in one call (equal to a Digester fed the same bytes).
uint64_t DigestOf(std::span<const std::byte> bytes);

}  // namespace tandem::checkpoint

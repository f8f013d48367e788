// The digest of a checkpoint's files (docs/weights.md "Checkpoints"): XXH3
// 64-bit from Debian's libxxhash, a fast non-cryptographic checksum
// (tens of GB/s, so verifying a checkpoint costs its read, not its hash).
// It detects torn, truncated and bit-flipped files; it is no defence against
// someone who forges a checkpoint on purpose (the run dir is trusted storage
// whose bytes may be damaged, not attacked).
//
// In the manifest a digest is 16 lowercase hex digits ("xxh3-64").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::checkpoint {

inline constexpr std::string_view kDigestAlgorithm = "xxh3-64";

// Streaming XXH3-64 of the bytes given to Update, in order. Move-only.
class Digester {
 public:
  Digester();
  ~Digester();
  Digester(Digester&& other) noexcept;
  Digester& operator=(Digester&& other) noexcept;
  Digester(const Digester&) = delete;
  Digester& operator=(const Digester&) = delete;

  void Update(std::span<const std::byte> bytes);
  // The digest of everything so far (Update may go on afterwards).
  uint64_t Digest() const;

 private:
  void* state_ = nullptr;  // XXH3_state_t*, opaque here so xxhash.h stays in the .cc
};

// The digest of `bytes` in one call (equal to a Digester fed the same bytes).
uint64_t DigestOf(std::span<const std::byte> bytes);

// "0123456789abcdef" for the manifest, and back: nullopt unless exactly 16
// lowercase hex digits.
std::string DigestToHex(uint64_t digest);
std::optional<uint64_t> DigestFromHex(std::string_view hex);

}  // namespace tandem::checkpoint

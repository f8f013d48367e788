// The checkpoint digest's hex form (see checkpoint_digest.h).
#include "workers/checkpoint/checkpoint_digest.h"

namespace tandem::checkpoint {

uint64_t DigestOf(std::span<const std::byte> bytes) { return Xxh64Of(bytes.data(), bytes.size()); }

std::string DigestToHex(uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) out[static_cast<size_t>(i)] = kDigits[digest & 15];
  return out;
}

std::optional<uint64_t> DigestFromHex(std::string_view hex) {
  if (hex.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (const char c : hex) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace tandem::checkpoint

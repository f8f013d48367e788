// Lowercase hex of raw bytes (tokens, MACs, random ids).
#pragma once

#include <cstddef>
#include <string>

namespace tandem {

inline std::string HexEncode(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace tandem

// GPT-2's byte-level alphabet (byte_level.h).
#include "workers/data/byte_level.h"

#include <array>

#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

bool Printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points below 0x144; -1 = not in the alphabet
  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[static_cast<size_t>(b)] = Printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_cp[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet alphabet;
  return alphabet;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t b) { return TheAlphabet().to_cp[b]; }

std::optional<uint8_t> CodePointToByte(char32_t c) {
  const auto& a = TheAlphabet();
  if (c >= a.to_byte.size() || a.to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(a.to_byte[c]);
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(ch)), &out);
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view byte_level) {
  std::string out;
  out.reserve(byte_level.size());
  size_t pos = 0;
  while (pos < byte_level.size()) {
    const auto b = CodePointToByte(NextCodePoint(byte_level, &pos));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace tandem::data

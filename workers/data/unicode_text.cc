// UTF-8 checking and repair, NFC through ICU, and the pattern character
// classes (unicode_text.h).
#include "workers/data/unicode_text.h"

#include <limits>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

namespace tandem::data {
namespace {

// Length of the well-formed sequence starting at text[pos], or 0 when it is
// ill-formed; *bad_len is then the length of its maximal subpart (>= 1).
size_t WellFormedLength(std::string_view text, size_t pos, size_t* bad_len) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = b(pos);
  *bad_len = 1;
  if (lead < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) return 0;
    const uint8_t c = b(pos + k);
    const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (c < klo || c > khi) return 0;
    *bad_len = k + 1;
  }
  *bad_len = 1;
  return need + 1;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t bad = 0;
    const size_t n = WellFormedLength(text, pos, &bad);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string ReplaceInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t bad = 0;
    const size_t n = WellFormedLength(text, pos, &bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      pos += bad;
    } else {
      out.append(text.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

StatusOr<std::string> NormalizeNfc(std::string_view text) {
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return InvalidArgument("text of " + std::to_string(text.size()) + " bytes is too long to normalize (limit 2 GiB)");
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return Internal(std::string("ICU NFC normalizer unavailable: ") + u_errorName(err));
  if (IsNfc(text)) return std::string(text);
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) return InvalidArgument(std::string("NFC normalization failed: ") + u_errorName(err));
  return out;
}

bool IsNfc(std::string_view text) {
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) return false;
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return true;
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return false;
  const bool yes = nfc->isNormalizedUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), err);
  return U_SUCCESS(err) && yes;
}

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(text[i])); };
  const char32_t lead = b(*pos);
  if (lead < 0x80) {
    *pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t c = ((lead & 0x1F) << 6) | (b(*pos + 1) & 0x3F);
    *pos += 2;
    return c;
  }
  if (lead < 0xF0) {
    const char32_t c = ((lead & 0x0F) << 12) | ((b(*pos + 1) & 0x3F) << 6) | (b(*pos + 2) & 0x3F);
    *pos += 3;
    return c;
  }
  const char32_t c = ((lead & 0x07) << 18) | ((b(*pos + 1) & 0x3F) << 12) | ((b(*pos + 2) & 0x3F) << 6) |
                     (b(*pos + 3) & 0x3F);
  *pos += 4;
  return c;
}

bool IsLetter(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0;
}

bool IsNumber(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
}

bool IsWhitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0;
}

bool IsAssigned(char32_t c) { return u_charType(static_cast<UChar32>(c)) != U_UNASSIGNED; }

bool IsWordCharacter(char32_t c) { return c == '_' || IsLetter(c) || IsNumber(c); }

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace tandem::data

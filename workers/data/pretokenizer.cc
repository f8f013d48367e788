// The split patterns as matchers over code points (pretokenizer.h). Each
// Match* function returns the length in code points of the pattern's match
// at position i (every position matches one of the alternatives: a letter,
// a number, whitespace or "other"), trying the alternatives in order as a
// backtracking engine does.
#include "workers/data/pretokenizer.h"

#include <cstdint>

#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kCrLf = 8 };

// The text as code points with their classes.
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<size_t> offset;  // byte offset of each code point, plus the end

  // Refills the buffers (kept between calls: their capacity is reused).
  void Assign(std::string_view text) {
    cp.clear();
    cls.clear();
    offset.clear();
    size_t pos = 0;
    while (pos < text.size()) {
      offset.push_back(pos);
      const char32_t c = NextCodePoint(text, &pos);
      cp.push_back(c);
      uint8_t k = 0;
      if (IsLetter(c)) k |= kLetter;
      else if (IsNumber(c)) k |= kNumber;
      else if (IsWhitespace(c)) k |= kSpace;
      if (c == '\r' || c == '\n') k |= kCrLf;
      cls.push_back(k);
    }
    offset.push_back(text.size());
  }
  size_t size() const { return cp.size(); }
  bool Is(size_t i, uint8_t k) const { return i < cp.size() && (cls[i] & k) != 0; }
  // Neither letter, number nor whitespace: [^\s\p{L}\p{N}].
  bool IsOther(size_t i) const { return i < cp.size() && (cls[i] & (kLetter | kNumber | kSpace)) == 0; }
  size_t RunEnd(size_t i, uint8_t k) const {
    while (Is(i, k)) ++i;
    return i;
  }
  size_t OtherRunEnd(size_t i) const {
    while (IsOther(i)) ++i;
    return i;
  }
};

char32_t AsciiLower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at i; case-insensitive (ASCII) or not.
size_t MatchContraction(const CodePoints& t, size_t i, bool fold) {
  if (t.cp[i] != '\'' || i + 1 >= t.size()) return 0;
  const auto at = [&](size_t k) { return fold ? AsciiLower(t.cp[k]) : t.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  const char32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at i, where t.cp[i] is whitespace.
size_t MatchTrailingSpace(const CodePoints& t, size_t i) {
  const size_t j = t.RunEnd(i, kSpace);
  if (j == t.size()) return j - i;      // \s+ then end of text
  if (j - i >= 2) return j - i - 1;     // \s+(?!\S): leave the last space for the next piece
  return j - i;                         // \s+
}

size_t MatchQwen2(const CodePoints& t, size_t i) {
  if (const size_t n = MatchContraction(t, i, /*fold=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (t.Is(i, kLetter)) return t.RunEnd(i, kLetter) - i;
  if (!t.Is(i, kNumber | kCrLf) && t.Is(i + 1, kLetter)) return t.RunEnd(i + 1, kLetter) - i;
  // \p{N}
  if (t.Is(i, kNumber)) return 1;
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t k = i;
    if (t.cp[k] == ' ' && t.IsOther(k + 1)) ++k;
    if (t.IsOther(k)) return t.RunEnd(t.OtherRunEnd(k), kCrLf) - i;
  }
  // t.cp[i] is whitespace from here on. \s*[\r\n]+: up to the last CR/LF of the run.
  const size_t j = t.RunEnd(i, kSpace);
  for (size_t k = j; k > i; --k)
    if (t.Is(k - 1, kCrLf)) return k - i;
  return MatchTrailingSpace(t, i);
}

size_t MatchGpt2(const CodePoints& t, size_t i) {
  if (const size_t n = MatchContraction(t, i, /*fold=*/false)) return n;
  const size_t k = t.cp[i] == ' ' ? i + 1 : i;  // the optional leading space
  for (const uint8_t cls : {kLetter, kNumber})
    if (t.Is(k, cls)) return t.RunEnd(k, cls) - i;
  if (t.IsOther(k)) return t.OtherRunEnd(k) - i;
  return MatchTrailingSpace(t, i);
}

}  // namespace

std::string_view SplitPatternRegex(SplitPattern pattern) {
  return pattern == SplitPattern::kQwen2 ? kQwen2Regex : kGpt2Regex;
}

std::optional<SplitPattern> RecognizeSplitPattern(std::string_view regex) {
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  return std::nullopt;
}

void SplitPreTokens(SplitPattern pattern, std::string_view text, std::vector<PreToken>* out) {
  if (text.empty()) return;
  thread_local CodePoints t;
  t.Assign(text);
  size_t i = 0;
  while (i < t.size()) {
    size_t n = pattern == SplitPattern::kQwen2 ? MatchQwen2(t, i) : MatchGpt2(t, i);
    if (n == 0) n = 1;  // defensive: every position matches, but never loop forever
    out->push_back({t.offset[i], t.offset[i + n]});
    i += n;
  }
}

}  // namespace tandem::data

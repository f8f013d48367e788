// Exact parsing of answer numbers (number.h).
#include "workers/data/number.h"

#include <numeric>

namespace tandem::data {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212

bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool AddOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// num/den with den != 0 reduced to den > 0; both arguments non-negative or
// num of either sign.
std::optional<Rational> Reduce(int64_t num, int64_t den) {
  if (den == 0) return std::nullopt;
  if (num == INT64_MIN || den == INT64_MIN) return std::nullopt;
  if (den < 0) { num = -num; den = -den; }
  const int64_t g = std::gcd(num < 0 ? -num : num, den);
  return Rational{num / g, den / g};
}

std::optional<Rational> Divide(const Rational& a, const Rational& b) {
  int64_t n = 0, d = 0;
  if (!MulOk(a.num, b.den, &n) || !MulOk(a.den, b.num, &d)) return std::nullopt;
  return Reduce(n, d);
}

// The value of the digit run `int_digits` (commas skipped) with the decimal
// digits `frac_digits`: nullopt when it does not fit.
std::optional<Rational> DecimalValue(std::string_view int_digits, std::string_view frac_digits) {
  int64_t num = 0, den = 1;
  for (const char c : int_digits) {
    if (c == ',') continue;
    if (!MulOk(num, 10, &num) || !AddOk(num, c - '0', &num)) return std::nullopt;
  }
  for (const char c : frac_digits) {
    if (!MulOk(num, 10, &num) || !AddOk(num, c - '0', &num) || !MulOk(den, 10, &den)) return std::nullopt;
  }
  return Reduce(num, den);
}

struct Scanned {
  size_t end = 0;
  std::optional<Rational> value;
};

// Length of the sign at `i` (0 when none): '-', '+' or U+2212.
size_t SignLength(std::string_view t, size_t i, bool* negative) {
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) {
    *negative = t[i] == '-';
    return 1;
  }
  if (t.substr(i, kUnicodeMinus.size()) == kUnicodeMinus) {
    *negative = true;
    return kUnicodeMinus.size();
  }
  return 0;
}

// An unsigned decimal at `i`: digits with optional thousands groups and an
// optional fraction part, or '.' and digits.
std::optional<Scanned> ScanDecimal(std::string_view t, size_t i, bool allow_slash) {
  size_t j = i;
  while (j < t.size() && IsDigit(t[j])) ++j;
  const size_t first_group = j - i;
  if (first_group >= 1 && first_group <= 3) {
    // ",ddd" groups, each exactly three digits not followed by a fourth.
    while (j + 3 < t.size() && t[j] == ',' && IsDigit(t[j + 1]) && IsDigit(t[j + 2]) && IsDigit(t[j + 3]) &&
           (j + 4 >= t.size() || !IsDigit(t[j + 4]))) {
      j += 4;
    }
  }
  const std::string_view int_part = t.substr(i, j - i);
  std::string_view frac_part;
  if (j + 1 < t.size() && t[j] == '.' && IsDigit(t[j + 1])) {
    size_t k = j + 1;
    while (k < t.size() && IsDigit(t[k])) ++k;
    frac_part = t.substr(j + 1, k - j - 1);
    j = k;
  }
  if (int_part.empty() && frac_part.empty()) return std::nullopt;
  Scanned s{j, DecimalValue(int_part, frac_part)};
  if (allow_slash && frac_part.empty() && int_part.find(',') == std::string_view::npos && j + 1 < t.size() &&
      t[j] == '/' && IsDigit(t[j + 1])) {
    size_t k = j + 1;
    while (k < t.size() && IsDigit(t[k])) ++k;
    const std::optional<Rational> den = DecimalValue(t.substr(j + 1, k - j - 1), {});
    s.end = k;
    s.value = (s.value && den && den->num != 0) ? Divide(*s.value, *den) : std::nullopt;
  }
  return s;
}

// A signed decimal filling the braces `{...}` that open at `i`.
std::optional<Scanned> ScanBracedDecimal(std::string_view t, size_t i) {
  if (i >= t.size() || t[i] != '{') return std::nullopt;
  size_t j = i + 1;
  while (j < t.size() && t[j] == ' ') ++j;
  bool negative = false;
  j += SignLength(t, j, &negative);
  std::optional<Scanned> d = ScanDecimal(t, j, /*allow_slash=*/false);
  if (!d) return std::nullopt;
  j = d->end;
  while (j < t.size() && t[j] == ' ') ++j;
  if (j >= t.size() || t[j] != '}') return std::nullopt;
  if (d->value && negative) d->value->num = -d->value->num;
  d->end = j + 1;
  return d;
}

// "\frac{A}{B}" (or \dfrac, \tfrac) at `i`.
std::optional<Scanned> ScanLatexFraction(std::string_view t, size_t i) {
  size_t j = i;
  for (const std::string_view cmd : {"\\frac", "\\dfrac", "\\tfrac"}) {
    if (t.substr(i, cmd.size()) == cmd) {
      j = i + cmd.size();
      break;
    }
  }
  if (j == i) return std::nullopt;
  const std::optional<Scanned> a = ScanBracedDecimal(t, j);
  if (!a) return std::nullopt;
  const std::optional<Scanned> b = ScanBracedDecimal(t, a->end);
  if (!b) return std::nullopt;
  Scanned s{b->end, std::nullopt};
  if (a->value && b->value && b->value->num != 0) s.value = Divide(*a->value, *b->value);
  return s;
}

bool SignAllowedAfter(std::string_view t, size_t i) {
  if (i == 0) return true;
  const char p = t[i - 1];
  return !(IsAlnum(p) || p == ')' || p == ']' || p == '}');
}

}  // namespace

std::string ToString(const Rational& r) {
  return r.den == 1 ? std::to_string(r.num) : std::to_string(r.num) + "/" + std::to_string(r.den);
}

std::vector<NumberToken> ScanNumbers(std::string_view t) {
  std::vector<NumberToken> out;
  size_t i = 0;
  while (i < t.size()) {
    bool negative = false;
    size_t body = i;
    if (SignAllowedAfter(t, i)) body = i + SignLength(t, i, &negative);
    std::optional<Scanned> s = ScanLatexFraction(t, body);
    if (!s && body < t.size() && (IsDigit(t[body]) || t[body] == '.')) s = ScanDecimal(t, body, /*allow_slash=*/true);
    if (!s) {
      ++i;
      continue;
    }
    if (s->value && negative) s->value->num = -s->value->num;
    out.push_back(NumberToken{i, s->end, s->value});
    i = s->end;
  }
  return out;
}

std::optional<Rational> ParseNumber(std::string_view text) {
  auto trim = [](std::string_view& s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  };
  trim(text);
  if (!text.empty() && text.front() == '$') text.remove_prefix(1);
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (!text.empty() && text.back() == '%') text.remove_suffix(1);
  trim(text);
  const std::vector<NumberToken> tokens = ScanNumbers(text);
  if (tokens.size() != 1 || tokens[0].begin != 0 || tokens[0].end != text.size()) return std::nullopt;
  return tokens[0].value;
}

}  // namespace tandem::data

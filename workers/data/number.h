// Numbers as math answers write them, parsed to exact rationals (docs/model.md,
// "Data sets and rewards", "Numbers").
//
// ScanNumbers finds every number in a text, in reading order: integers with
// or without thousands separators ("1234", "1,234"; a comma counts as a
// separator only before exactly three digits), decimals ("3.50", ".5"),
// fractions of integers ("3/4") and LaTeX fractions ("\frac{3}{4}",
// "\dfrac", "\tfrac"), each with an optional sign ('-', '+' or U+2212) when
// the sign does not follow a digit, letter or closing bracket ("5-3" is 5
// then 3). Values are exact and reduced, so "0.5", "1/2" and "\frac{2}{4}"
// are equal. A number that does not fit int64 numerator/denominator (more
// than 18 digits, say) is still found, with no value. Nothing recurses, and
// the scan is linear in the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

// num/den reduced, den > 0.
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
  friend bool operator==(const Rational&, const Rational&) = default;
};

// "3", "-3/4", "1.25" -> "5/4" is written as "5/4".
std::string ToString(const Rational& r);

struct NumberToken {
  size_t begin = 0;  // byte offsets into the scanned text
  size_t end = 0;
  std::optional<Rational> value;  // nullopt: too large for int64, or a zero denominator
};

std::vector<NumberToken> ScanNumbers(std::string_view text);

// The value of `text` when, after trimming whitespace, a leading '$', a
// trailing '.' and a trailing '%', the whole of it is one number.
std::optional<Rational> ParseNumber(std::string_view text);

}  // namespace tandem::data

// Byte sizes: "80GiB" -> 85899345920 (see byte_size.h). Exact integer
// arithmetic, no floating point, so "0.1KB" is 100 bytes, not 99.
#include "orchestrator/spec/byte_size.h"

#include <array>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tandem::spec {
namespace {

__extension__ typedef unsigned __int128 U128;

struct Unit {
  std::string_view name;
  uint64_t bytes;
};

// Longest names first, so "KiB" is not read as "B".
constexpr std::array<Unit, 9> kUnits{{
    {"KiB", uint64_t{1} << 10},
    {"MiB", uint64_t{1} << 20},
    {"GiB", uint64_t{1} << 30},
    {"TiB", uint64_t{1} << 40},
    {"KB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
    {"B", 1},
}};

// "80G" as shown after "got": JSON-quoted, at most 40 bytes of it.
std::string Shown(std::string_view text) {
  std::string head(text.substr(0, 40));
  return nlohmann::json(head).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         (text.size() > 40 ? "..." : "");
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

struct Split {
  std::string_view whole, fraction;  // digits; fraction may be empty
  uint64_t unit = 0;
};

// Splits `text` by the pattern, or returns unit 0 when it does not match.
Split SplitSize(std::string_view text) {
  Split out;
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (text.size() > u.name.size() && text.substr(text.size() - u.name.size()) == u.name) {
      unit = &u;
      break;
    }
  }
  if (!unit) return out;
  std::string_view number = text.substr(0, text.size() - unit->name.size());
  size_t dot = number.find('.');
  std::string_view whole = number.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
  auto digits = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (!IsDigit(c)) return false;
    }
    return true;
  };
  if (!digits(whole)) return out;
  if (dot != std::string_view::npos && !digits(fraction)) return out;
  out.whole = whole;
  out.fraction = fraction;
  out.unit = unit->bytes;
  return out;
}

}  // namespace

bool IsByteSizeText(std::string_view text) { return SplitSize(text).unit != 0; }

StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  const std::string shown = Shown(text);
  Split s = SplitSize(text);
  if (s.unit == 0) {
    return InvalidArgument(fmt::format(
        "expected a size such as \"80GiB\" or \"1.5TiB\" (a number and one of the units B, KiB, MiB, "
        "GiB, TiB, KB, MB, GB, TB), got {}",
        shown));
  }
  const std::string too_big = fmt::format("expected at most {} bytes (8 PiB), got {}", kMaxByteSize, shown);
  // The whole part, stopping as soon as it is certainly too big.
  uint64_t whole = 0;
  for (char c : s.whole) {
    whole = whole * 10 + static_cast<uint64_t>(c - '0');
    if (whole > kMaxByteSize) return InvalidArgument(too_big);
  }
  U128 bytes = static_cast<U128>(whole) * s.unit;
  // The fraction: at most 19 digits count (the rest is far below one byte).
  uint64_t num = 0, den = 1;
  for (size_t i = 0; i < s.fraction.size() && i < 19; ++i) {
    num = num * 10 + static_cast<uint64_t>(s.fraction[i] - '0');
    den *= 10;
  }
  bytes += static_cast<U128>(num) * s.unit / den;
  if (bytes > kMaxByteSize) return InvalidArgument(too_big);
  if (bytes == 0) return InvalidArgument(fmt::format("expected at least 1 byte, got {}", shown));
  return static_cast<uint64_t>(bytes);
}

}  // namespace tandem::spec

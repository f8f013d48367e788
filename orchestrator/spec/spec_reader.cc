// Reading a JSON document against the job spec schema, collecting every
// violation with its path (see spec_reader.h).
#include "orchestrator/spec/spec_reader.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tandem::spec::internal {
namespace {

constexpr size_t kMaxShownString = 40;

bool IsAsciiAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsPlainKey(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(),
                     [](char c) { return IsAsciiAlnum(c) || c == '_' || c == '-' || c == '$'; });
}

// ^[A-Za-z0-9][A-Za-z0-9_<extra>-]{0,62}$
bool IsName(std::string_view s, bool allow_dot) {
  if (s.empty() || s.size() > 63 || !IsAsciiAlnum(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), [&](char c) {
    return IsAsciiAlnum(c) || c == '_' || c == '-' || (allow_dot && c == '.');
  });
}

bool AnyString(std::string_view s) { return !HasNul(s); }
bool NonEmptyText(std::string_view s) { return !s.empty() && !HasNul(s); }

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string QuoteList(std::initializer_list<std::string_view> items) {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += ", ";
    out += fmt::format("\"{}\"", s);
  }
  return out;
}

}  // namespace

const StringRule kAnyString{AnyString, "a string"};
const StringRule kText{NonEmptyText, "a non-empty string"};
const StringRule kJobNameRule{IsJobName,
                              "a job name (1-63 letters, digits, '_', '.' or '-', "
                              "starting with a letter or digit)"};
const StringRule kRoleNameRule{IsRoleName,
                               "a role name (1-63 letters, digits, '_' or '-', "
                               "starting with a letter or digit)"};

bool IsJobName(std::string_view s) { return IsName(s, /*allow_dot=*/true); }
bool IsRoleName(std::string_view s) { return IsName(s, /*allow_dot=*/false); }
bool IsEnvName(std::string_view s) {
  if (s.empty() || !(IsAsciiAlnum(s[0]) || s[0] == '_') || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAsciiAlnum(c) || c == '_'; });
}
bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

std::string JoinKey(std::string_view path, std::string_view key) {
  if (!IsPlainKey(key)) {
    std::string quoted = Json(std::string(key)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return fmt::format("{}[{}]", path, quoted);
  }
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

std::string JoinIndex(std::string_view path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

std::string Describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      if (s.size() <= kMaxShownString) {
        return v.dump(-1, ' ', false, Json::error_handler_t::replace);
      }
      size_t cut = kMaxShownString;
      // Do not split a UTF-8 sequence.
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
      return Json(s.substr(0, cut)).dump(-1, ' ', false, Json::error_handler_t::replace) + "...";
    }
    case Json::value_t::discarded: return "nothing";
    default: return v.dump();
  }
}

void Reader::Error(std::string path, std::string message) {
  errors_->push_back(SpecError{std::move(path), std::move(message)});
}

bool Reader::ExpectObject(const Json& v, std::string_view path) {
  if (v.is_object()) return true;
  Error(std::string(path), "expected an object, got " + Describe(v));
  return false;
}

void Reader::CheckKeys(const Json& obj, std::string_view path,
                       std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string_view best;
    size_t best_d = 3;  // suggest only close matches
    for (std::string_view a : allowed) {
      size_t d = EditDistance(key, a);
      if (d < best_d) best_d = d, best = a;
    }
    if (!best.empty()) {
      Error(JoinKey(path, key), fmt::format("unknown key; did you mean \"{}\"?", best));
    } else {
      Error(JoinKey(path, key), fmt::format("unknown key; expected one of {}", QuoteList(allowed)));
    }
  }
}

std::optional<std::string> Reader::String(const Json& v, std::string_view path,
                                          const StringRule& rule) {
  if (!v.is_string()) {
    Error(std::string(path), fmt::format("expected {}, got {}", rule.expected, Describe(v)));
    return std::nullopt;
  }
  const auto& s = v.get_ref<const std::string&>();
  if (HasNul(s)) {
    Error(std::string(path), fmt::format("expected {} without NUL characters, got {}",
                                         rule.expected, Describe(v)));
    return std::nullopt;
  }
  if (!rule.valid(s)) {
    Error(std::string(path), fmt::format("expected {}, got {}", rule.expected, Describe(v)));
    return std::nullopt;
  }
  return s;
}

std::optional<std::string> Reader::Enum(const Json& v, std::string_view path,
                                        std::initializer_list<std::string_view> choices) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  }
  Error(std::string(path), fmt::format("expected one of {}, got {}", QuoteList(choices), Describe(v)));
  return std::nullopt;
}

std::optional<int64_t> Reader::Integer(const Json& v, std::string_view path, int64_t min,
                                       int64_t max) {
  // JSON Schema's "integer" is any number with a zero fractional part (2.0 too).
  std::optional<long double> value;
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    value = static_cast<long double>(v.get<int64_t>());
  } else if (v.is_number_unsigned()) {
    value = static_cast<long double>(v.get<uint64_t>());
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d) value = d;
  }
  if (!value || *value < static_cast<long double>(min)) {
    Error(std::string(path), fmt::format("expected an integer >= {}, got {}", min, Describe(v)));
    return std::nullopt;
  }
  if (*value > static_cast<long double>(max)) {
    Error(std::string(path), fmt::format("expected an integer <= {}, got {}", max, Describe(v)));
    return std::nullopt;
  }
  return static_cast<int64_t>(*value);
}

std::optional<double> Reader::Number(const Json& v, std::string_view path, double min, double max) {
  std::optional<double> value;
  if (v.is_number()) {
    double d = v.get<double>();
    if (std::isfinite(d)) value = d;
  }
  if (!value || *value < min) {
    Error(std::string(path), fmt::format("expected a number >= {}, got {}", min, Describe(v)));
    return std::nullopt;
  }
  if (*value > max) {
    Error(std::string(path), fmt::format("expected a number <= {}, got {}", max, Describe(v)));
    return std::nullopt;
  }
  return value;
}

std::optional<double> Reader::NumberAbove(const Json& v, std::string_view path, double above,
                                          double max) {
  std::optional<double> value;
  if (v.is_number()) {
    double d = v.get<double>();
    if (std::isfinite(d)) value = d;
  }
  if (!value || *value <= above) {
    Error(std::string(path), fmt::format("expected a number > {}, got {}", above, Describe(v)));
    return std::nullopt;
  }
  if (*value > max) {
    Error(std::string(path), fmt::format("expected a number <= {}, got {}", max, Describe(v)));
    return std::nullopt;
  }
  return value;
}

std::optional<bool> Reader::Bool(const Json& v, std::string_view path) {
  if (v.is_boolean()) return v.get<bool>();
  Error(std::string(path), "expected true or false, got " + Describe(v));
  return std::nullopt;
}

std::optional<std::vector<std::string>> Reader::StringArray(const Json& v, std::string_view path,
                                                            const StringRule& rule) {
  if (!v.is_array()) {
    Error(std::string(path), "expected an array of strings, got " + Describe(v));
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    auto s = String(v[i], JoinIndex(path, i), rule);
    if (s) out.push_back(std::move(*s));
    else ok = false;
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::map<std::string, std::string>> Reader::Env(const Json& v,
                                                              std::string_view path) {
  if (!v.is_object()) {
    Error(std::string(path),
          "expected an object of environment variables (names to strings), got " + Describe(v));
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  bool ok = true;
  for (const auto& [name, value] : v.items()) {
    std::string p = JoinKey(path, name);
    if (!IsEnvName(name)) {
      Error(p, "expected a variable name matching [A-Za-z_][A-Za-z0-9_]*");
      ok = false;
    } else if (name.rfind("TANDEM_", 0) == 0) {
      // Five of them pick a worker's kernels (workers/ops/kernel_choices.h):
      // say where that choice goes.
      const std::string flag = name == "TANDEM_TREE_ATTENTION"    ? "--tree-attention"
                               : name == "TANDEM_MOE_EXPERTS"     ? "--moe-experts"
                               : name == "TANDEM_DECODE_GEMV"     ? "--decode-gemv"
                               : name == "TANDEM_PAGED_ATTENTION" ? "--paged-attention"
                               : name == "TANDEM_PAGED_SPLITS"    ? "--paged-splits"
                                                                  : "";
      Error(p, "TANDEM_* variables are set by tandem and may not be set in a spec" +
                   (flag.empty() ? std::string() : " (give the workers' args " + flag + " instead)"));
      ok = false;
    } else if (name == "CUDA_VISIBLE_DEVICES") {
      Error(p, "CUDA_VISIBLE_DEVICES is set by tandem from the placement and may not be set in a spec");
      ok = false;
    }
    auto s = String(value, p, kAnyString);
    if (!s) ok = false;
    else out[name] = std::move(*s);
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace tandem::spec::internal

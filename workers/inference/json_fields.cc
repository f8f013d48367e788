// Strict readers of request-body fields (json_fields.h).
#include "workers/inference/json_fields.h"

#include <limits>

namespace tandem::inference {

using json = nlohmann::json;

std::string QuoteKey(std::string_view key) {
  constexpr size_t kMax = 64;
  return "\"" + std::string(key.substr(0, kMax)) + (key.size() > kMax ? "...\"" : "\"");
}

std::string Index(std::string_view path, size_t i) { return std::string(path) + "[" + std::to_string(i) + "]"; }

Status WrongType(std::string_view path, std::string_view expected, const json& got) {
  return InvalidArgument(std::string(path) + ": expected " + std::string(expected) + ", got " + got.type_name());
}

StatusOr<int64_t> AsInt64(const json& v, std::string_view path, std::string_view expected) {
  if (!v.is_number_integer()) return WrongType(path, expected, v);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(std::string(path) + ": " + std::to_string(u) + " is too large");
    return static_cast<int64_t>(u);
  }
  return v.get<int64_t>();
}

StatusOr<double> AsNumber(const json& v, std::string_view path) {
  if (!v.is_number()) return WrongType(path, "a number", v);
  return v.get<double>();
}

StatusOr<bool> AsBool(const json& v, std::string_view path) {
  if (!v.is_boolean()) return WrongType(path, "true or false", v);
  return v.get<bool>();
}

StatusOr<int32_t> AsTokenId(const json& v, std::string_view path, int64_t vocab) {
  if (!v.is_number_integer()) return WrongType(path, "an integer token id", v);
  const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  const bool big = !neg && v.get<uint64_t>() >= static_cast<uint64_t>(vocab);
  if (neg || big) {
    const std::string shown = neg ? std::to_string(v.get<int64_t>()) : std::to_string(v.get<uint64_t>());
    return InvalidArgument(std::string(path) + ": token id " + shown + " outside the vocabulary [0, " +
                           std::to_string(vocab) + ")");
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

StatusOr<std::vector<int32_t>> TokenList(const json& v, std::string_view path, int64_t vocab) {
  if (!v.is_array()) return WrongType(path, "a list of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(const int32_t id, AsTokenId(v[i], Index(path, i), vocab));
    ids.push_back(id);
  }
  return ids;
}

}  // namespace tandem::inference

// Strict readers of request-body fields, shared by /generate's and /score's
// JSON (generate_json.h, score_json.h): each checks one value's type and
// range and answers InvalidArgument with a message that starts with the
// field's path ("input_ids[2][5]: token id 512 outside the vocabulary
// [0, 300)"). Torch-free; nothing here throws on any parsed JSON.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/status.h"

namespace tandem::inference {

template <size_t N>
bool Known(const std::array<std::string_view, N>& names, std::string_view key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

// "a, b, c": for "unknown field ... (known: ...)".
template <size_t N>
std::string KnownList(const std::array<std::string_view, N>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// A key from the body, safe to quote in a message (bounded; invalid UTF-8 is
// replaced when the message is dumped as JSON).
std::string QuoteKey(std::string_view key);
// "path[i]".
std::string Index(std::string_view path, size_t i);
Status WrongType(std::string_view path, std::string_view expected, const nlohmann::json& got);

StatusOr<int64_t> AsInt64(const nlohmann::json& v, std::string_view path, std::string_view expected = "an integer");
StatusOr<double> AsNumber(const nlohmann::json& v, std::string_view path);
StatusOr<bool> AsBool(const nlohmann::json& v, std::string_view path);
// A token id in [0, vocab).
StatusOr<int32_t> AsTokenId(const nlohmann::json& v, std::string_view path, int64_t vocab);
StatusOr<std::vector<int32_t>> TokenList(const nlohmann::json& v, std::string_view path, int64_t vocab);

// A request body: a JSON object at most `max_depth` deep whose keys are all
// `known` ("body: empty; ...", "body: expected a JSON object, got array",
// "unknown field \"x\" (known: ...)").
template <size_t N>
StatusOr<nlohmann::json> ParseBodyObject(std::string_view text, size_t max_depth,
                                         const std::array<std::string_view, N>& known) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return InvalidArgument("body: empty; expected a JSON object");
  auto parsed = ParseJsonBounded(text, max_depth);
  if (!parsed.ok()) return parsed.status().WithContext("body");
  if (!parsed->is_object()) return WrongType("body", "a JSON object", *parsed);
  for (const auto& [key, value] : parsed->items())
    if (!Known(known, key)) return InvalidArgument("unknown field " + QuoteKey(key) + " (known: " + KnownList(known) + ")");
  return parsed;
}

}  // namespace tandem::inference

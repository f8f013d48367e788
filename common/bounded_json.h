// JSON from outside (HTTP bodies, spec files, lines a task wrote into its run
// dir), parsed with a bound on nesting depth, and JSON text for output that
// never throws on invalid UTF-8 (issue #12 point 1).
//
// nlohmann's parser is iterative, but copying, comparing and dumping a value
// recurse: a document nested 200,000 levels deep overflows the stack later.
// JsonDepthWithin scans the text once (strings respected, no allocation) and
// ParseJsonBounded refuses a document deeper than the limit with an error
// naming it. A string taken from outside (a request path) may hold invalid
// UTF-8, on which json::dump() throws type_error 316: DumpJson replaces such
// bytes with U+FFFD instead.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

// Deepest nesting of arrays and objects any JSON tandem reads may have. Job
// specs nest about 6 levels; run-dir lines 3.
inline constexpr size_t kMaxJsonDepth = 64;

// True when no array or object in `text` is nested deeper than `max_depth`
// (`[]` is depth 1). Brackets inside strings do not count; the text need not
// be valid JSON (the parser judges that).
inline bool JsonDepthWithin(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// Parses `text`: InvalidArgument when it is nested deeper than `max_depth`
// ("JSON nested deeper than 64 levels (the limit)") or is not valid JSON
// ("not valid JSON"). Never throws.
template <typename Json = nlohmann::json>
StatusOr<Json> ParseJsonBounded(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  if (!JsonDepthWithin(text, max_depth))
    return InvalidArgument("JSON nested deeper than " + std::to_string(max_depth) + " levels (the limit)");
  // No JSON text holds a raw NUL (in strings it must be escaped), and the
  // parser would stop at one and accept "{}\0anything".
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return InvalidArgument("not valid JSON: NUL byte at offset " + std::to_string(nul));
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  return j;
}

// j.dump(indent), with invalid UTF-8 replaced by U+FFFD instead of throwing.
template <typename Json>
std::string DumpJson(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tandem

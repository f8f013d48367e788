// The control protocol's line codec, version 1 (schemas/control.schema.json;
// docs/control-protocol.md "Framing"): what tandemd and every worker agree on
// below the messages themselves. One definition for both ends: the protocol
// version, the line and nesting limits, how a line becomes a JSON object
// (never by throwing), the `error` line, and the error codes of a Status.
//
// Guarantees: ParseLine never throws and never recurses on the input; a line
// nested deeper than kMaxDepth or longer than the limit is refused before
// nlohmann::json sees it. Everything here is pure (no I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::control {

inline constexpr int kProtocolVersion = 1;
// Longest line either side accepts, newline included.
inline constexpr size_t kDefaultMaxLineBytes = 1 << 20;
// Deepest nesting of arrays and objects in a line (a hello is 4 deep).
// (common/bounded_json.h counts it.)
inline constexpr size_t kMaxDepth = 32;

// One line (without its newline; a trailing '\r' is dropped) as a JSON object
// with a string `type`. Errors are kInvalidArgument whose message says what
// was wrong; `id` is filled when the line is an object with an integer id.
struct ParsedObject {
  nlohmann::json body;          // an object; its "type" is a string
  std::string type;
  std::optional<int64_t> id;    // the integer "id", when present
};
StatusOr<ParsedObject> ParseLine(std::string_view line, std::optional<int64_t>* id_out = nullptr);

// The protocol's code for a Status code ("invalid_argument", "unauthenticated"
// for kPermissionDenied, ..., "internal" for anything else).
std::string_view ErrorCodeFor(StatusCode code);

// An error line: {"type":"error","id":id|null,"code","message"}, with
// "command" when not empty. Both ends send this form.
nlohmann::json ErrorLine(std::optional<int64_t> id, std::string_view code, std::string_view message,
                         std::string_view command = {});

// A line as sent: compact, invalid UTF-8 replaced, never throws.
std::string DumpLine(const nlohmann::json& line);

}  // namespace tandem::control

// JSON Lines files from outside, read row by row with the bad-row policy of
// the file data sets (docs/model.md, "Data sets and rewards", "Hostile
// rows"). A row is a non-blank line (a trailing '\r' is dropped); each is
// parsed with a bound on nesting depth (common/bounded_json.h) and a bound
// on length (kMaxJsonlLineBytes, so a file with no newline cannot take all
// memory), then handed to the caller's row function, which checks its keys.
// A row that is not JSON, too deep, too long, or refused by the row function
// is, under BadRowPolicy::kError, the error "PATH:LINE: why"; under kSkip,
// counted in the LoadReport (with the first few reasons) and passed over.
// An unreadable file is always an error.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/data/dataset.h"

namespace tandem::data {

inline constexpr size_t kMaxJsonlLineBytes = size_t{16} << 20;

enum class BadRowPolicy { kError, kSkip };

// Calls row(json, line_number) for each row until `limit` rows were accepted
// (nullopt: all). The row function returns an error to refuse a row.
Status ReadJsonl(const std::string& path, BadRowPolicy policy, std::optional<size_t> limit,
                 const std::function<Status(const nlohmann::json&, size_t)>& row, LoadReport* report);

// The string at key path `keys` of `j` ({"reward_model", "ground_truth"}),
// or InvalidArgument "key 'reward_model.ground_truth': missing" / "expected a
// string, got number".
StatusOr<std::string> JsonStringAt(const nlohmann::json& j, std::initializer_list<std::string_view> keys);

// The value at key path `keys`, or nullptr when a key is missing or a value
// on the way is not an object.
const nlohmann::json* JsonAt(const nlohmann::json& j, std::initializer_list<std::string_view> keys);

// "key 'a.b'" for error messages.
std::string KeyPathName(std::initializer_list<std::string_view> keys);

}  // namespace tandem::data

// A JSON-valued command-line flag (`--dataset-options '{"level": 2}'`),
// parsed with the bounded parser (common/bounded_json.h). On bad JSON it
// prints "tandem-worker COMMAND: FLAG: what was wrong" to stderr and
// returns false: the command then exits 2. Empty text leaves `out` as is.
#pragma once

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::roles {

inline bool ParseJsonFlag(const char* command, const char* flag, const std::string& text, nlohmann::json& out) {
  if (text.empty()) return true;
  StatusOr<nlohmann::json> j = ParseJsonBounded(text);
  if (!j.ok()) {
    std::cerr << "tandem-worker " << command << ": " << flag << ": " << j.status().message() << "\n";
    return false;
  }
  out = std::move(*j);
  return true;
}

}  // namespace tandem::roles

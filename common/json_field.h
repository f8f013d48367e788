// Typed fields of JSON from outside (files a task can write, messages), read
// without exceptions. nlohmann's j.value(key, fallback) throws when `j` is
// not an object or the field has another type: a record a task rewrote as
// {"job_id": 5} or [] must not throw in the daemon. These give the field's
// value when `j` is an object holding `key` with the asked type, else
// `fallback`.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem {

inline std::string StringField(const nlohmann::json& j, const char* key, std::string fallback = "") {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

inline int64_t IntField(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_integer() && !it->is_number_unsigned()) return it->get<int64_t>();
  if (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return it->get<int64_t>();
  return fallback;
}

}  // namespace tandem

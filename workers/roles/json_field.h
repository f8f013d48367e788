// One field of a JSON object read back from a file (a checkpoint's
// trainer_state.json), type- and range-checked: InvalidArgument naming the
// key when it is missing, of another type, negative or not finite.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::roles {

// T: bool, a non-negative integer, or a finite non-negative number.
template <class T>
Status ReadJsonField(const nlohmann::json& j, const char* key, T* out) {
  const auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(std::string("no \"") + key + "\"");
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return InvalidArgument(std::string("\"") + key + "\" is not a boolean");
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() || it->template get<int64_t>() < 0)
      return InvalidArgument(std::string("\"") + key + "\" is not a non-negative integer");
  } else {
    if (!it->is_number() || !std::isfinite(it->template get<double>()) || it->template get<double>() < 0)
      return InvalidArgument(std::string("\"") + key + "\" is not a finite non-negative number");
  }
  *out = it->template get<T>();
  return Status::Ok();
}

}  // namespace tandem::roles

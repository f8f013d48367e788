// The implementation an environment variable picks for a glue op
// (TANDEM_TREE_ATTENTION, TANDEM_MOE_EXPERTS: kernel_choices.h): the
// index in `names` of the variable's value, 0 when it is unset or empty.
// Any other value throws c10::Error naming the variable, the value (its
// first 64 bytes) and the choices. Callers read it once (a function-local
// static): the process keeps the implementation it started with.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace tandem::ops {

inline size_t EnvChoice(const char* var, std::span<const std::string_view> names) {
  const char* set = std::getenv(var);
  const std::string_view value = set == nullptr ? "" : set;
  if (value.empty()) return 0;
  std::string expected;
  size_t i = 0;
  for (const std::string_view name : names) {
    if (name == value) return i;
    expected += (i++ == 0 ? "" : ", ") + std::string(name);
  }
  TORCH_CHECK(false, var, "=", std::string(value.substr(0, 64)), ": expected one of ", expected);
  return 0;
}

}  // namespace tandem::ops

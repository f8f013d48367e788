// The implementation an environment variable picks (env_choice.h): unset or
// empty is the first choice, a name its index, anything else an error naming
// the variable, the value and the choices.
#include "workers/ops/env_choice.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <string>

namespace tandem::ops {
namespace {

TEST(EnvChoice, PicksByNameAndRefusesAnythingElse) {
  const char* var = "TANDEM_ENV_CHOICE_TEST";
  const std::array<std::string_view, 2> names = {"tiles", "varlen-flash"};
  ::unsetenv(var);
  EXPECT_EQ(EnvChoice(var, names), 0u);
  ::setenv(var, "", 1);
  EXPECT_EQ(EnvChoice(var, names), 0u);
  ::setenv(var, "varlen-flash", 1);
  EXPECT_EQ(EnvChoice(var, names), 1u);
  ::setenv(var, "Varlen-Flash", 1);
  std::string error;
  try {
    EnvChoice(var, names);
  } catch (const c10::Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("TANDEM_ENV_CHOICE_TEST=Varlen-Flash: expected one of tiles, varlen-flash"), std::string::npos)
      << error;
  ::unsetenv(var);
}

}  // namespace
}  // namespace tandem::ops

// The tool-calls workflow's calculator (calculator.h): a table of good and
// hostile expressions.
#include <gtest/gtest.h>

#include <string>

#include "workers/agents/calculator.h"

namespace tandem::agents {
namespace {

TEST(Calculator, EvaluatesExactly) {
  const std::pair<const char*, const char*> table[] = {
      {"1 + 2", "3"},           {"(12 + 7) * 3", "57"},   {"7 / 2", "7/2"},       {"-7 / 2", "-7/2"},
      {"6 / -4", "-3/2"},       {"2 - 3 * 4", "-10"},     {"((1))", "1"},         {"1.5 * 4", "6"},
      {"0.1 + 0.2", "3/10"},    {"--3", "3"},             {"+4 - -4", "8"},       {"10 / 4 * 2", "5"},
      {" 9\t*\n9 ", "81"},      {"1/3 + 1/6", "1/2"},     {"9223372036854775807", "9223372036854775807"},
  };
  for (const auto& [expr, want] : table) {
    StatusOr<std::string> got = Calculate(expr);
    ASSERT_TRUE(got.ok()) << expr << ": " << got.status().ToString();
    EXPECT_EQ(*got, want) << expr;
  }
}

TEST(Calculator, RefusesHostileInputWithWhatAndWhere) {
  const std::pair<std::string, const char*> table[] = {
      {"1 / 0", "division by zero at byte 5"},
      {"1 / (2 - 2)", "division by zero"},
      {"2 ** 3", "a number expected, got '*' at byte 3"},
      {"1 +", "a number expected, the expression ended"},
      {"(1 + 2", "')' expected"},
      {"1 2", "unexpected '2' at byte 2"},
      {"x + 1", "a number expected, got 'x'"},
      {"", "a number expected"},
      {"9223372036854775807 + 1", "beyond 64 bits"},
      {"99999999999999999999999999999999999", "beyond 64 bits"},
      {"3000000000 * 3000000000 * 3000000000", "beyond 64 bits"},
      {std::string(40, '(') + "1" + std::string(40, ')'), "nesting deeper than 32"},
      {std::string(300, '1'), "the expression is 300 bytes, at most 256"},
      {std::string(200, '-') + "1", "nesting deeper than 32"},
  };
  for (const auto& [expr, want] : table) {
    StatusOr<std::string> got = Calculate(expr);
    ASSERT_FALSE(got.ok()) << expr << " gave " << *got;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(want), std::string::npos) << expr << ": " << got.status().message();
  }
}

}  // namespace
}  // namespace tandem::agents

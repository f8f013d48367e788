// Nesting depth of JSON from outside (common/bounded_json.h) and the job spec
// parser's refusal of a spec nested deeper than the limit (issue #12 point 1).
#include <string>

#include <gtest/gtest.h>

#include "common/bounded_json.h"
#include "orchestrator/spec/job_spec.h"

namespace tandem {
namespace {

TEST(JsonDepthTest, CountsArraysAndObjectsNotStrings) {
  EXPECT_TRUE(JsonDepthWithin("{}", 1));
  EXPECT_FALSE(JsonDepthWithin("[[]]", 1));
  EXPECT_TRUE(JsonDepthWithin("[[]]", 2));
  EXPECT_TRUE(JsonDepthWithin(R"(["[[[[", "\"[[[["])", 1));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":[1],"b":{"c":2}})", 2));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":[1],"b":{"c":[2]}})", 2));
  EXPECT_TRUE(JsonDepthWithin("]]]]}}}", 0));
}

TEST(JsonDepthTest, ParseRefusesDeepDocumentsNamingTheLimit) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  auto j = ParseJsonBounded(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("nested deeper than 64 levels"), std::string::npos) << j.status().ToString();
  EXPECT_TRUE(ParseJsonBounded(std::string(64, '[') + std::string(64, ']')).ok());
  EXPECT_FALSE(ParseJsonBounded("{").ok());
}

TEST(JsonDepthTest, ParseRefusesANulByteNamingItsOffset) {
  const std::string with_nul("{}\0{\"junk\": 1}", 14);
  auto j = ParseJsonBounded(with_nul);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("NUL byte at offset 2"), std::string::npos) << j.status().ToString();
  EXPECT_TRUE(ParseJsonBounded("{\"a\": \"\\u0000\"}").ok());  // an escaped NUL in a string is JSON
}

TEST(JsonDepthTest, DumpReplacesInvalidUtf8) {
  const nlohmann::json j = {{"path", std::string("/v1/\xff\xfe")}};
  EXPECT_NO_THROW((void)DumpJson(j));
  EXPECT_NE(DumpJson(j).find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(JsonDepthTest, JobSpecTextNestedTooDeepIsOneErrorNamingTheLimit) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string text = R"({"name":"d","roles":{"r":{"command":["true"]}},"x":)" + deep + "}";
  spec::ParseResult r = spec::ParseJobSpecText(text);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("nested deeper than 64 levels"), std::string::npos) << r.errors[0].message;
}

}  // namespace
}  // namespace tandem

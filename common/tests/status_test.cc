#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace tandem {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  TANDEM_ASSIGN_OR_RETURN(int h, Half(x), "first half");
  TANDEM_ASSIGN_OR_RETURN(int q, Half(h), "second half");
  return q;
}

Status Check(int x) {
  TANDEM_RETURN_IF_ERROR(Quarter(x).status(), "check " + std::to_string(x));
  return Status::Ok();
}

TEST(Status, ContextFormsATrail) {
  EXPECT_EQ(Quarter(8).value(), 2);
  Status s = Check(6);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "check 6: second half: odd value 3");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: check 6: second half: odd value 3");
  EXPECT_TRUE(Check(4).ok());
}

TEST(Status, ErrnoMapsToCodes) {
  EXPECT_EQ(ErrnoStatus("open /nope", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus("bind", EADDRINUSE).code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ErrnoStatus("open /nope", ENOENT).message().find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace tandem

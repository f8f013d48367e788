// ATen operators by name (aten_call.h): arguments by name, defaults filled
// in, alternatives, and the errors for an unknown operator, an unknown
// argument and a missing one.
#include "workers/ops/aten_call.h"

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>

#include <functional>
#include <string>

namespace tandem::ops {
namespace {

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "";
}

TEST(AtenCall, CallsByNameWithDefaultsAndAlternatives) {
  const at::Tensor a = at::ones({3}), b = at::ones({3}) * 2;
  ASSERT_TRUE(HasOp("aten::add", "Tensor"));
  EXPECT_FALSE(HasOp("aten::no_such_op", ""));
  auto r = CallOp("aten::add", "Tensor", {{"other", b}, {"self", a}});  // alpha defaults to 1
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].toTensor().equal(at::ones({3}) * 3));
  r = CallOp("aten::add", "Tensor", {{"input|self", a}, {"other", b}, {"alpha", 3}});
  EXPECT_TRUE(r[0].toTensor().equal(at::ones({3}) * 7));
}

TEST(AtenCall, ErrorsNameWhatIsWrong) {
  const at::Tensor a = at::ones({3});
  EXPECT_NE(ErrorOf([&] { CallOp("aten::no_such_op", "", {}); }).find("no such operator"), std::string::npos);
  const std::string unknown = ErrorOf([&] { CallOp("aten::add", "Tensor", {{"self", a}, {"other", a}, {"beta", 2}}); });
  EXPECT_NE(unknown.find("no argument beta"), std::string::npos) << unknown;
  const std::string missing = ErrorOf([&] { CallOp("aten::add", "Tensor", {{"self", a}}); });
  EXPECT_NE(missing.find("argument other is required"), std::string::npos) << missing;
}

}  // namespace
}  // namespace tandem::ops

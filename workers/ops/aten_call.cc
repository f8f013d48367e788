// ATen operators by name (aten_call.h).
#include "workers/ops/aten_call.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string_view>

namespace tandem::ops {
namespace {

bool NameMatches(std::string_view given, std::string_view schema_name) {
  for (size_t start = 0;;) {
    const size_t bar = given.find('|', start);
    if (given.substr(start, bar == std::string_view::npos ? bar : bar - start) == schema_name) return true;
    if (bar == std::string_view::npos) return false;
    start = bar + 1;
  }
}

}  // namespace

bool HasOp(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchema({name, overload}).has_value();
}

std::vector<c10::IValue> CallOp(const char* name, const char* overload, const std::vector<OpArg>& args) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(op.has_value(), name, (*overload != 0 ? "." : ""), overload, ": this LibTorch has no such operator");
  const c10::FunctionSchema& schema = op->schema();
  std::vector<bool> used(args.size(), false);
  torch::jit::Stack stack;
  for (const c10::Argument& a : schema.arguments()) {
    size_t i = 0;
    while (i < args.size() && !NameMatches(args[i].name, a.name())) ++i;
    if (i < args.size()) {
      TORCH_CHECK(!used[i], name, ": argument ", args[i].name, " matches two arguments of ", schema);
      used[i] = true;
      stack.push_back(args[i].value);
    } else {
      TORCH_CHECK(a.default_value().has_value(), name, ": argument ", a.name(), " is required by ", schema);
      stack.push_back(*a.default_value());
    }
  }
  for (size_t i = 0; i < args.size(); ++i)
    TORCH_CHECK(used[i], name, ": no argument ", args[i].name, " in ", schema);
  op->callBoxed(&stack);
  return stack;
}

}  // namespace tandem::ops

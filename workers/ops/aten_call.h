// Calling an ATen operator by name through the dispatcher, its arguments by
// name (issue #19: the dense attention kernels PyTorch ships, whose C++
// signatures move between versions). Compiles against any LibTorch; a
// renamed or missing argument is a runtime c10::Error naming it and the
// operator's schema, never a build break on the GPU machine.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace tandem::ops {

struct OpArg {
  std::string name;  // the schema's name; "a|b" matches whichever of the two the schema has
  c10::IValue value;
};

// Whether this LibTorch registers the operator `name` ("aten::add") with
// `overload` ("Tensor"; "" for none).
bool HasOp(const char* name, const char* overload);

// Calls it and returns its outputs. Arguments not given take the schema's
// defaults. Throws c10::Error for an unknown operator, an argument the schema
// does not have, a required argument not given, and whatever the operator
// itself throws.
std::vector<c10::IValue> CallOp(const char* name, const char* overload, const std::vector<OpArg>& args);

}  // namespace tandem::ops

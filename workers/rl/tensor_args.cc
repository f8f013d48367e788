// Tensor argument checks (tensor_args.h).
#include "workers/rl/tensor_args.h"

#include <ATen/ops/stack.h>

namespace tandem::rl {
namespace {

bool IsFloating(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}

std::string TypeName(at::ScalarType t) { return std::string(c10::toString(t)); }

}  // namespace

std::string ShapeString(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

Status CheckFloating(std::string_view name, const at::Tensor& t, at::IntArrayRef sizes) {
  const std::string n(name);
  if (!t.defined()) return InvalidArgument(n + ": missing (an undefined tensor)");
  if (!IsFloating(t.scalar_type()))
    return InvalidArgument(n + ": expected float32, bfloat16, float16 or float64, got " + TypeName(t.scalar_type()));
  if (t.sizes() != sizes)
    return InvalidArgument(n + ": expected shape " + ShapeString(sizes) + ", got " + ShapeString(t.sizes()));
  return Status::Ok();
}

Status CheckFloatingRank(std::string_view name, const at::Tensor& t, int64_t rank) {
  const std::string n(name);
  if (!t.defined()) return InvalidArgument(n + ": missing (an undefined tensor)");
  if (!IsFloating(t.scalar_type()))
    return InvalidArgument(n + ": expected float32, bfloat16, float16 or float64, got " + TypeName(t.scalar_type()));
  if (t.dim() != rank)
    return InvalidArgument(n + ": expected " + std::to_string(rank) + " dimensions, got shape " +
                           ShapeString(t.sizes()));
  return Status::Ok();
}

Status CheckMask(std::string_view name, const at::Tensor& t, at::IntArrayRef sizes) {
  const std::string n(name);
  if (!t.defined()) return InvalidArgument(n + ": missing (an undefined tensor)");
  if (t.scalar_type() != at::kBool && !c10::isIntegralType(t.scalar_type(), /*includeBool=*/false))
    return InvalidArgument(n + ": expected bool or an integer type (nonzero = counted), got " +
                           TypeName(t.scalar_type()));
  if (t.sizes() != sizes)
    return InvalidArgument(n + ": expected shape " + ShapeString(sizes) + ", got " + ShapeString(t.sizes()));
  return Status::Ok();
}

Status CheckIndex(std::string_view name, const at::Tensor& t, int64_t n) {
  const std::string s(name);
  if (!t.defined()) return InvalidArgument(s + ": missing (an undefined tensor)");
  if (!c10::isIntegralType(t.scalar_type(), /*includeBool=*/false))
    return InvalidArgument(s + ": expected an integer type, got " + TypeName(t.scalar_type()));
  if (t.dim() != 1 || t.size(0) != n)
    return InvalidArgument(s + ": expected shape [" + std::to_string(n) + "], got " + ShapeString(t.sizes()));
  return Status::Ok();
}

Status CheckDevice(std::string_view name, const at::Tensor& t, const at::Device& device) {
  if (t.device() != device)
    return InvalidArgument(std::string(name) + ": on " + t.device().str() + ", expected " + device.str() +
                           " (where the log-probs are)");
  return Status::Ok();
}

at::ScalarType ComputeType(std::initializer_list<at::Tensor> ts) {
  for (const at::Tensor& t : ts)
    if (t.defined() && t.scalar_type() == at::kDouble) return at::kDouble;
  return at::kFloat;
}

std::vector<std::pair<std::string, double>> ScalarsToHost(
    const std::vector<std::pair<const char*, const at::Tensor*>>& named) {
  std::vector<std::string> names;
  std::vector<at::Tensor> values;
  for (const auto& [name, t] : named) {
    if (!t->defined()) continue;
    names.emplace_back(name);
    values.push_back(t->detach().to(at::kDouble).reshape({}));
  }
  std::vector<std::pair<std::string, double>> out;
  if (values.empty()) return out;
  const at::Tensor host = at::stack(values).to(at::kCPU).contiguous();  // one copy
  const double* p = host.data_ptr<double>();
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], p[i]);
  return out;
}

}  // namespace tandem::rl

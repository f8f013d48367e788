// ParameterSet <-> weight manifest (parameter_manifest.h).
#include "workers/weights/parameter_manifest.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <c10/core/GradMode.h>
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <optional>

#include "workers/model/checkpoint.h"

namespace tandem::weights {

StatusOr<WeightManifest> ManifestOf(int64_t version, const model::ParameterSet& params) {
  WeightManifest m;
  m.version = version;
  for (size_t b = 0; b < params.buffers().size(); ++b) {
    const at::Tensor& buf = params.buffers()[b];
    const std::optional<model::DType> dt = model::DTypeOf(buf.scalar_type());
    if (!dt)
      return InvalidArgument("publish: parameter buffer " + std::to_string(b) + " has dtype " +
                             std::string(c10::toString(buf.scalar_type())) + ", expected a float type");
    m.buffers.push_back({*dt, static_cast<uint64_t>(buf.nbytes())});
  }
  for (const model::ParameterSet::Slot& s : params.slots()) {
    const model::DType dt = m.buffers.at(static_cast<size_t>(s.buffer)).dtype;
    m.tensors.push_back({s.name, dt, s.leaf.sizes().vec(), s.buffer,
                         static_cast<uint64_t>(s.offset) * model::DTypeSize(dt)});
  }
  TANDEM_RETURN_IF_ERROR(ValidateWeightManifest(m), "publish: the parameters' manifest");
  return m;
}

Status CheckReaderMatches(const WeightManifest& m, const model::ParameterSet& params) {
  std::map<std::string_view, const model::ParameterSet::Slot*> slots;
  for (const model::ParameterSet::Slot& s : params.slots()) slots[s.name] = &s;
  for (const WeightManifest::Tensor& t : m.tensors)
    if (!slots.count(t.name))
      return InvalidArgument("tensor \"" + t.name + "\" (shape " + ShapeString(t.shape) +
                             ") is published but is not a parameter of this model");
  for (const model::ParameterSet::Slot& s : params.slots()) {
    const WeightManifest::Tensor* t = m.Find(s.name);
    const std::vector<int64_t> want = s.leaf.sizes().vec();
    if (!t) return NotFound("tensor \"" + s.name + "\" (shape " + ShapeString(want) + ") is not published");
    if (t->shape != want)
      return InvalidArgument("tensor \"" + s.name + "\": published shape " + ShapeString(t->shape) +
                             ", this model has " + ShapeString(want));
    if (!model::TorchType(t->dtype))
      return InvalidArgument("tensor \"" + s.name + "\": published dtype " + std::string(model::DTypeName(t->dtype)) +
                             ", expected a float type (F32, BF16, F16 or F64)");
  }
  return Status::Ok();
}

bool SameLayout(const WeightManifest& m, const model::ParameterSet& params) {
  if (m.buffers.size() != params.buffers().size() || m.tensors.size() != params.slots().size()) return false;
  for (size_t b = 0; b < m.buffers.size(); ++b) {
    const at::Tensor& buf = params.buffers()[b];
    if (model::DTypeOf(buf.scalar_type()) != m.buffers[b].dtype || static_cast<uint64_t>(buf.nbytes()) != m.buffers[b].bytes)
      return false;
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const model::ParameterSet::Slot& s = params.slots()[i];
    const WeightManifest::Tensor& t = m.tensors[i];
    if (t.name != s.name || t.buffer != s.buffer || t.dtype != m.buffers[static_cast<size_t>(t.buffer)].dtype ||
        t.offset != static_cast<uint64_t>(s.offset) * model::DTypeSize(t.dtype) || t.shape != s.leaf.sizes().vec())
      return false;
  }
  return true;
}

Status CopyIntoParameters(const WeightManifest& m, std::span<const std::byte* const> bytes,
                          const model::ParameterSet& params, at::Device source) {
  if (bytes.size() != m.buffers.size())
    return Internal("copy weights: " + std::to_string(bytes.size()) + " buffers given for a manifest of " +
                    std::to_string(m.buffers.size()));
  TANDEM_RETURN_IF_ERROR(CheckReaderMatches(m, params));
  c10::NoGradGuard no_grad;
  try {
    if (SameLayout(m, params)) {
      for (size_t b = 0; b < m.buffers.size(); ++b) {
        const at::Tensor& dst = params.buffers()[b];
        if (m.buffers[b].bytes == 0) continue;
        if (dst.device().is_cpu() && source.is_cpu()) {
          std::memcpy(dst.data_ptr(), bytes[b], m.buffers[b].bytes);
        } else {
          const at::Tensor src = at::from_blob(const_cast<std::byte*>(bytes[b]), {static_cast<int64_t>(m.buffers[b].bytes)},
                                               at::TensorOptions().dtype(at::kByte).device(source));
          dst.view(at::kByte).copy_(src);
        }
      }
      return Status::Ok();
    }
    for (const model::ParameterSet::Slot& s : params.slots()) {
      const WeightManifest::Tensor& t = *m.Find(s.name);
      if (t.nbytes() == 0) continue;
      const at::Tensor src = at::from_blob(const_cast<std::byte*>(bytes[static_cast<size_t>(t.buffer)] + t.offset), t.shape,
                                           at::TensorOptions().dtype(*model::TorchType(t.dtype)).device(source));
      s.leaf.copy_(src);
    }
  } catch (const c10::Error& e) {
    return Internal(std::string("copy weights: ") + e.what_without_backtrace());
  }
  return Status::Ok();
}

}  // namespace tandem::weights

// Bridges the kernels' tandem::Status to LibTorch's errors, and the checks
// every glue function makes on its tensor arguments (docs/kernels-torch.md,
// "Contracts"). A failed check throws c10::Error (TORCH_CHECK) with a message
// naming the function and the argument: never a crash, never abort().
#pragma once

#include <c10/util/Exception.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "common/status.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace tandem::ops {

// Throws c10::Error with the status' message (and its context trail).
inline void ThrowIfError(const Status& status, const char* where) {
  TORCH_CHECK(status.ok(), where, ": ", status.ToString());
}

template <typename T>
T ValueOrThrow(StatusOr<T> v, const char* where) {
  ThrowIfError(v.status(), where);
  return std::move(v).value();
}

// Defined, of `dim` dimensions, of scalar type `type`, on `device_type`.
inline void CheckTensor(const at::Tensor& t, const char* fn, const char* name, int64_t dim, at::ScalarType type,
                        c10::DeviceType device_type) {
  TORCH_CHECK(t.defined(), fn, ": ", name, " is undefined");
  TORCH_CHECK(t.dim() == dim, fn, ": ", name, " must have ", dim, " dimensions, got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == type, fn, ": ", name, " must be ", type, ", got ", t.scalar_type());
  TORCH_CHECK(t.device().type() == device_type, fn, ": ", name, " must be on ", device_type, ", got ",
              t.device());
}

// The dtype the kernels take on a device: fp32 on the CPU, bf16 on CUDA.
// Throws for any other device (or CUDA when the glue was built without it).
#ifdef TANDEM_TORCH_CUDA
inline constexpr const char* kSupportedDevices = "CPU fp32 or CUDA bf16";
#else
inline constexpr const char* kSupportedDevices = "CPU fp32; this build has no CUDA path";
#endif
inline at::ScalarType KernelDtype(const at::Tensor& t, const char* fn) {
  TORCH_CHECK(t.defined(), fn, ": undefined tensor");
  if (t.device().is_cpu()) return at::kFloat;
#ifdef TANDEM_TORCH_CUDA
  if (t.device().is_cuda()) return at::kBFloat16;
#endif
  TORCH_CHECK(false, fn, ": tensors on ", t.device(), " are not supported (", kSupportedDevices, ")");
  return at::kFloat;
}

// Test hook: when on, every floating-point output the glue allocates is
// filled with NaN before the kernel writes it, so an element the kernel
// leaves unwritten fails the tests' comparisons (kernels/testing/compare.h).
// Off by default (one atomic load per output).
void SetPoisonOutputsForTesting(bool on);
bool PoisonOutputsForTesting();

// at::empty, poisoned when the test hook is on.
at::Tensor NewOutput(at::IntArrayRef sizes, const at::TensorOptions& options);

// Whether t's data starts on a multiple of `bytes` (the kernels' vector
// accesses).
inline bool AlignedTo(const at::Tensor& t, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
}

#ifdef TANDEM_TORCH_CUDA
// A bf16 tensor's data as the kernels' pointer type (check the dtype first);
// null for an undefined tensor (the kernels' optional arguments).
inline __nv_bfloat16* Bf16(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<__nv_bfloat16*>(t.data_ptr()) : nullptr;
}
// The stream the kernels launch on: LibTorch's current one.
inline cudaStream_t CurrentStream() { return c10::cuda::getCurrentCUDAStream().stream(); }
#endif

inline int32_t CheckedInt32(int64_t v, const char* fn, const char* what) {
  TORCH_CHECK(v >= 0 && v <= INT32_MAX, fn, ": ", what, " = ", v, " out of int32 range");
  return static_cast<int32_t>(v);
}

}  // namespace tandem::ops

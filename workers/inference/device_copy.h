// Host values to the device without a synchronising copy (docs/inference.md
// "A step's host work"). A host-to-device copy from pageable memory waits
// for the stream, so each one between a step's kernels holds the host until
// the device is idle, and the kernels after it are launched one by one onto
// an idle device. On CUDA these go through pinned memory (LibTorch's caching
// host allocator, which keeps a block until the copy that reads it is done)
// and are copied on the current stream without waiting; on the CPU the
// host tensor is the result.
#pragma once

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

namespace tandem::inference {

// A [values.size()] tensor of T's dtype (int32, int64, float, ...).
template <typename T>
at::Tensor ToDevice(const std::vector<T>& values, at::Device device) {
  at::Tensor host = at::empty({static_cast<int64_t>(values.size())},
                              at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value).pinned_memory(device.is_cuda()));
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return device.is_cuda() ? host.to(device, /*non_blocking=*/true) : host;
}

}  // namespace tandem::inference

// Helpers for the GPU tests of kernels/: checked CUDA calls, an RAII device
// buffer, bf16 host conversion, poisoning (every byte 0xFF: NaN in bf16 and
// fp32) and copies back for comparison against the CPU oracle.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/testing/compare.h"

// Fails the current test on any CUDA error (every call is checked).
#define TANDEM_CUDA_OK(expr)                                                            \
  do {                                                                                  \
    cudaError_t _e = (expr);                                                            \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_e);              \
  } while (0)

namespace tandem::kernels::testing {

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  cudaError_t Poison() { return cudaMemset(p_, 0xFF, n_ * sizeof(T)); }
  cudaError_t Upload(const std::vector<T>& h) { return cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice); }
  cudaError_t Download(std::vector<T>& h) const {
    h.resize(n_);
    return cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}
inline std::vector<float> ToFloat(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}
// Rounds in place to bf16, so the oracle sees the kernel's inputs exactly.
inline void RoundToBf16(std::vector<float>& v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
}
inline double Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / v.size());
}
inline double RelativeL2(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Uniform in [lo, hi), rounded to bf16 (the kernels' inputs exactly).
inline std::vector<float> RandomBf16(std::mt19937_64& rng, size_t n, float lo = -1, float hi = 1) {
  std::vector<float> v = RandomVector(rng, n, lo, hi);
  RoundToBf16(v);
  return v;
}

// A bf16 device buffer made from floats (or n poisoned elements), read
// back as floats; failures fail the current test.
struct Bf16Buffer {
  DeviceBuffer<__nv_bfloat16> buf;
  explicit Bf16Buffer(const std::vector<float>& h) : buf(h.size()) { EXPECT_EQ(buf.Upload(ToBf16(h)), cudaSuccess); }
  explicit Bf16Buffer(size_t n) : buf(n) { EXPECT_EQ(buf.Poison(), cudaSuccess); }
  __nv_bfloat16* get() const { return buf.get(); }
  std::vector<float> Get() const {
    std::vector<__nv_bfloat16> h;
    EXPECT_EQ(buf.Download(h), cudaSuccess);
    return ToFloat(h);
  }
};

}  // namespace tandem::kernels::testing

// Helpers for the tests of workers/rl/: small tensors from literals, fresh
// random tensors from a printed seed, tolerances as code
// (|out - ref| <= atol + rtol |ref|, kernels/testing/compare.h) and central
// finite differences in float64.
#pragma once

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/testing/compare.h"

namespace tandem::rl::testing {

using kernels::testing::Tolerance;
// float32 arithmetic against values written out by hand or in float64.
inline constexpr Tolerance kF32{1e-6, 1e-5};

// A CPU tensor of `values` with `sizes` (float64 unless `type` says otherwise).
inline at::Tensor T(const std::vector<double>& values, at::IntArrayRef sizes, at::ScalarType type = at::kDouble) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  if (!values.empty()) std::memcpy(t.data_ptr<double>(), values.data(), values.size() * sizeof(double));
  return t.to(type);
}
inline at::Tensor T(const std::vector<double>& values, at::ScalarType type = at::kDouble) {
  return T(values, {static_cast<int64_t>(values.size())}, type);
}
inline at::Tensor Ints(const std::vector<int64_t>& values, at::IntArrayRef sizes) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kLong));
  if (!values.empty()) std::memcpy(t.data_ptr<int64_t>(), values.data(), values.size() * sizeof(int64_t));
  return t;
}
inline at::Tensor Ints(const std::vector<int64_t>& values) { return Ints(values, {static_cast<int64_t>(values.size())}); }

// Uniform in [lo, hi), float64.
inline at::Tensor Random(std::mt19937_64& rng, at::IntArrayRef sizes, double lo = -1, double hi = 1) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  std::uniform_real_distribution<double> dist(lo, hi);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}
// A 0/1 mask with responses of random lengths in [min_len, T] (left-aligned).
inline at::Tensor RandomMask(std::mt19937_64& rng, int64_t b, int64_t t, int64_t min_len = 1) {
  at::Tensor m = at::empty({b, t}, at::TensorOptions().dtype(at::kBool));
  std::uniform_int_distribution<int64_t> len(min_len, t);
  bool* p = m.data_ptr<bool>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = len(rng);
    for (int64_t j = 0; j < t; ++j) p[i * t + j] = j < n;
  }
  return m;
}

inline double D(const at::Tensor& t) { return t.detach().to(at::kCPU, at::kDouble).item<double>(); }

// Empty when close; what is wrong otherwise.
inline std::string Close(const at::Tensor& out, const at::Tensor& ref, Tolerance tol = kF32) {
  if (!out.defined() || !ref.defined()) return "undefined tensor";
  if (out.sizes() != ref.sizes()) return "shape mismatch";
  const at::Tensor o = out.detach().to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor r = ref.detach().to(at::kCPU, at::kFloat).contiguous();
  return kernels::testing::CheckClose(o.data_ptr<float>(), r.data_ptr<float>(), static_cast<size_t>(o.numel()), tol);
}
inline std::string Close(double out, double ref, Tolerance tol = kF32) {
  const float o = static_cast<float>(out), r = static_cast<float>(ref);
  return kernels::testing::CheckClose(&o, &r, 1, tol);
}

inline at::Tensor Grad(const at::Tensor& loss, const at::Tensor& input) {
  return torch::autograd::grad({loss}, {input}, {}, /*retain_graph=*/true, /*create_graph=*/false,
                               /*allow_unused=*/true)[0];
}

// Central differences of loss(x) (x float64) at every coordinate.
inline at::Tensor FiniteDifferences(const std::function<double(const at::Tensor&)>& loss, const at::Tensor& x,
                                    double eps = 1e-6) {
  at::Tensor g = at::empty_like(x);
  at::Tensor probe = x.detach().clone();
  double* p = probe.data_ptr<double>();
  double* gp = g.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = p[i];
    p[i] = v + eps;
    const double up = loss(probe);
    p[i] = v - eps;
    const double down = loss(probe);
    p[i] = v;
    gp[i] = (up - down) / (2 * eps);
  }
  return g;
}

}  // namespace tandem::rl::testing

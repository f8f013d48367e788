// Helpers shared by the glue tests (workers/ops/tests/): the devices to run
// on (the CPU always; CUDA when the glue has its CUDA path and a GPU is
// present), fresh random tensors from a printed seed, tolerances as code
// (kernels/testing/compare.h) applied to tensors, and a finite-difference
// gradient check.
#pragma once

#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/testing/compare.h"
#include "workers/ops/glue_common.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tandem::ops::testing {

using kernels::testing::Tolerance;

inline std::vector<at::Device> TestDevices() {
  std::vector<at::Device> d{at::Device(at::kCPU)};
#ifdef TANDEM_TORCH_CUDA
  if (c10::cuda::device_count() > 0) d.emplace_back(at::kCUDA, 0);
#endif
  return d;
}

inline std::string DeviceName(const ::testing::TestParamInfo<at::Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda";
}

// The kernels' dtype on a device: fp32 on the CPU, bf16 on CUDA.
inline at::ScalarType DataType(const at::Device& d) { return d.is_cpu() ? at::kFloat : at::kBFloat16; }

// A CPU float64 tensor of uniform values in [lo, hi).
inline at::Tensor Random(std::mt19937_64& rng, at::IntArrayRef sizes, double lo = -1, double hi = 1) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  std::uniform_real_distribution<double> dist(lo, hi);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

inline at::Tensor IntTensor(const std::vector<int32_t>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kInt));
  if (!v.empty()) std::memcpy(t.data_ptr<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// The input as the kernel sees it (dtype of the device, on the device) and
// the same values in float64 on the CPU, both leaves requiring grad.
struct Input {
  at::Tensor dev;
  at::Tensor ref;
};
inline Input MakeInput(const at::Tensor& f64, const at::Device& device, bool grad = true) {
  Input in;
  in.dev = f64.to(device, DataType(device)).detach();
  in.ref = in.dev.to(at::kCPU, at::kDouble).detach();  // the rounded values
  if (grad) {
    in.dev.requires_grad_(true);
    in.ref.requires_grad_(true);
  }
  return in;
}

// |out - ref| <= atol + rtol |ref| elementwise, NaN never passes.
inline std::string Close(const at::Tensor& out, const at::Tensor& ref, Tolerance tol) {
  if (!out.defined() || !ref.defined()) return "undefined tensor";
  if (out.sizes() != ref.sizes()) return "shape mismatch";
  const at::Tensor o = out.detach().to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor r = ref.detach().to(at::kCPU, at::kFloat).contiguous();
  return kernels::testing::CheckClose(o.data_ptr<float>(), r.data_ptr<float>(), o.numel(), tol);
}

inline double Rms(const at::Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.detach().to(at::kDouble).pow(2).mean().sqrt().item<double>();
}

// fp32 outputs against the fp64 reference; bf16 (GPU) outputs with an
// absolute term scaled by the reference's RMS, as the kernels' GPU tests do.
inline Tolerance OutputTol(const at::Device& d, const at::Tensor& ref) {
  if (d.is_cpu()) return {1e-4 * Rms(ref) + 1e-6, 1e-3};
  return {5e-2 * Rms(ref) + 1e-4, 2e-2};
}
inline Tolerance GradTol(const at::Device& d, const at::Tensor& ref) {
  if (d.is_cpu()) return {2e-4 * Rms(ref) + 1e-6, 2e-3};
  return {1e-1 * Rms(ref) + 1e-4, 3e-2};
}

inline std::vector<at::Tensor> Grads(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grad_out,
                                     const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad(outputs, inputs, grad_out, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

// Central finite differences of loss(inputs) (a scalar) on `samples` random
// coordinates of every input (CPU fp32 inputs), against the analytic grads.
inline void CheckFiniteDifferences(const std::function<double(const std::vector<at::Tensor>&)>& loss,
                                   const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& grads,
                                   std::mt19937_64& rng, int samples = 12, double eps = 1e-2, double tol = 5e-3) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].numel() == 0) continue;
    std::uniform_int_distribution<int64_t> pick(0, inputs[i].numel() - 1);
    const at::Tensor g = grads[i].to(at::kDouble).contiguous();
    for (int s = 0; s < samples; ++s) {
      const int64_t e = pick(rng);
      auto probe = [&](double delta) {
        std::vector<at::Tensor> in;
        for (const auto& t : inputs) in.push_back(t.detach().clone());
        in[i].data_ptr<float>()[e] += static_cast<float>(delta);
        return loss(in);
      };
      const double fd = (probe(eps) - probe(-eps)) / (2 * eps);
      const double an = g.data_ptr<double>()[e];
      EXPECT_NEAR(an, fd, tol * (1 + std::fabs(fd))) << "input " << i << " element " << e;
    }
  }
}

// Turns the glue's output poisoning on for the duration of a test.
class PoisonOutputs {
 public:
  PoisonOutputs() { SetPoisonOutputsForTesting(true); }
  ~PoisonOutputs() { SetPoisonOutputsForTesting(false); }
};

}  // namespace tandem::ops::testing

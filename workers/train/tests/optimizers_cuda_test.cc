// The optimizers on a GPU (scripts/gpu/run_optimizers.sh; docs/optimizers.md
// "Tested"): compiled with LibTorch's CUDA path only, skipped without a
// device. On a tiny MoE model's parameters on cuda:0, the gradients drawn
// on the CPU from a seed (the same in every run):
//   - native AdamW on the GPU against native AdamW on the CPU, fp32: the
//     same ops on another device (bound 1e-5 after 30 steps);
//   - staged AdamW and Muon through the stream pipeline (2 buffers of
//     64 KiB: dozens of buckets in flight) against native on the GPU, bf16
//     with fp32 masters: bit for bit (bound 1e-6), the optimizer's device
//     memory within the buffers;
//   - a release of native state gives its bytes back to the device
//     (cudaMemGetInfo) and a resume brings the same state back;
//   - a resume returns with its copies in flight: a step, a state read or
//     a release right after it sees the whole state (bit for bit an
//     optimizer never released).
#ifdef TANDEM_TORCH_CUDA

#include <gtest/gtest.h>

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <functional>

#include "workers/model/tests/model_test_util.h"
#include "workers/train/adamw.h"
#include "workers/train/muon.h"

namespace tandem::train {
namespace {

model::ParameterSet Params(at::Device device, at::ScalarType dtype) {
  static const model::ModelConfig c = model::testing::TinyConfig(/*moe=*/true, /*layers=*/3);
  model::ParameterSet p = model::ParameterSet::Create(c, device, dtype);
  at::manual_seed(7);
  c10::NoGradGuard no_grad;
  for (const model::ParameterSet::Slot& s : p.slots()) s.leaf.detach().copy_(at::randn(s.leaf.sizes()) * 0.3);
  return p;
}

void RunSteps(model::ParameterSet& p, Optimizer& o, int steps) {
  for (int step = 0; step < steps; ++step) {
    at::manual_seed(1000 + step);
    for (const at::Tensor& g : p.grad_buffers()) g.copy_(at::randn(g.sizes()) * (step % 7 == 3 ? 50.0 : 0.5));
    StatusOr<double> n = o.Step(1e-3 * (1 + step % 3));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
  }
}

double MaxDiff(const model::ParameterSet& a, const model::ParameterSet& b) {
  double d = 0;
  for (size_t i = 0; i < a.buffers().size(); ++i)
    d = std::max(d, (a.buffers()[i].cpu().to(at::kFloat) - b.buffers()[i].cpu().to(at::kFloat)).abs().max().item<double>());
  return d;
}

double StateDiff(const Optimizer& a, const Optimizer& b) {
  const OptimizerState sa = a.State(), sb = b.State();
  EXPECT_EQ(sa.tensors.size(), sb.tensors.size());
  double d = 0;
  for (const auto& [name, t] : sa.tensors) d = std::max(d, (t.cpu() - sb.tensors.at(name).cpu()).abs().max().item<double>());
  return d;
}

AdamWOptions Options(Residency residency) {
  AdamWOptions o;
  o.max_grad_norm = 10.0;
  o.staging = {residency, 2, 64 << 10};
  return o;
}

using Make = std::function<StatusOr<std::unique_ptr<Optimizer>>(model::ParameterSet&, Residency)>;

void StagedEqualsNative(const char* name, const Make& make) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  const at::Device gpu(at::kCUDA, 0);
  model::ParameterSet a = Params(gpu, at::kBFloat16), b = Params(gpu, at::kBFloat16);
  auto native = make(a, Residency::kNative);
  auto staged = make(b, Residency::kStaged);
  ASSERT_TRUE(native.ok() && staged.ok()) << staged.status().ToString();
  RunSteps(a, **native, 30);
  RunSteps(b, **staged, 30);
  const double d = MaxDiff(a, b), s = StateDiff(**native, **staged);
  std::printf("[cuda] %s staged (2 x 64 KiB, streams) vs native, 30 steps: params max |diff| %.3g, state %.3g\n", name,
              d, s);
  EXPECT_LE(d, 1e-6);
  EXPECT_LE(s, 1e-6);
  EXPECT_LE((*staged)->device_bytes(), 2 * (64 << 10));
}

TEST(OptimizersCuda, NativeAdamWOnTheGpuIsTheCpusUpdate) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  model::ParameterSet cpu = Params(at::kCPU, at::kFloat), gpu = Params(at::Device(at::kCUDA, 0), at::kFloat);
  auto on_cpu = AdamW::Create(cpu, Options(Residency::kNative));
  auto on_gpu = AdamW::Create(gpu, Options(Residency::kNative));
  ASSERT_TRUE(on_cpu.ok() && on_gpu.ok());
  RunSteps(cpu, **on_cpu, 30);
  RunSteps(gpu, **on_gpu, 30);
  const double d = MaxDiff(cpu, gpu);
  std::printf("[cuda] native AdamW, GPU vs CPU fp32, 30 steps: max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST(OptimizersCuda, StagedAdamWThroughStreamsEqualsNative) {
  StagedEqualsNative("adamw", [](model::ParameterSet& p, Residency r) -> StatusOr<std::unique_ptr<Optimizer>> {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> o, AdamW::Create(p, Options(r)));
    return std::unique_ptr<Optimizer>(std::move(o));
  });
}

TEST(OptimizersCuda, StagedMuonThroughStreamsEqualsNative) {
  StagedEqualsNative("muon", [](model::ParameterSet& p, Residency r) -> StatusOr<std::unique_ptr<Optimizer>> {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Muon> o, Muon::Create(p, MuonOptions{}, Options(r)));
    return std::unique_ptr<Optimizer>(std::move(o));
  });
}

TEST(OptimizersCuda, AReleaseGivesTheStateBackToTheDevice) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  model::ParameterSet p = Params(at::Device(at::kCUDA, 0), at::kBFloat16);
  auto o = AdamW::Create(p, Options(Residency::kNative));
  ASSERT_TRUE(o.ok());
  RunSteps(p, **o, 3);
  OptimizerState before = (*o)->State();
  for (auto& [k, t] : before.tensors) t = t.cpu().clone();
  auto free_bytes = [] {
    size_t free = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    return static_cast<int64_t>(free);
  };
  const int64_t state = (*o)->device_bytes(), free0 = free_bytes();
  ASSERT_TRUE((*o)->Release().ok());
  const int64_t freed = free_bytes() - free0;
  std::printf("[cuda] release of %lld B of AdamW state: the device's free memory rose by %lld B\n",
              static_cast<long long>(state), static_cast<long long>(freed));
  EXPECT_EQ((*o)->device_bytes(), 0);
  // The driver frees whole segments: at least 7/8 of the claim (the ledger's leak rule).
  EXPECT_GE(freed, state - state / 8);
  ASSERT_TRUE((*o)->Resume().ok());
  EXPECT_EQ((*o)->device_bytes(), state);
  for (const auto& [k, t] : (*o)->State().tensors) EXPECT_TRUE(at::equal(t.cpu(), before.tensors.at(k))) << k;
}

// Released and resumed at every step, each use right after the resume
// (the copies still in flight), against a twin never released: the same
// parameters and state, bit for bit. A second release straight after a
// resume, before any use, keeps the state too.
TEST(OptimizersCuda, AResumesCopiesInFlightAreWaitedFor) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  const at::Device gpu(at::kCUDA, 0);
  model::ParameterSet a = Params(gpu, at::kBFloat16), b = Params(gpu, at::kBFloat16);
  auto moved = AdamW::Create(a, Options(Residency::kNative));
  auto kept = AdamW::Create(b, Options(Residency::kNative));
  ASSERT_TRUE(moved.ok() && kept.ok());
  for (int step = 0; step < 8; ++step) {
    ASSERT_TRUE((*moved)->Release().ok());
    ASSERT_TRUE((*moved)->Resume().ok());
    if (step % 2 == 1) {  // a release before the copies were waited for
      ASSERT_TRUE((*moved)->Release().ok());
      ASSERT_TRUE((*moved)->Resume().ok());
    }
    RunSteps(a, **moved, 1);
    RunSteps(b, **kept, 1);
  }
  ASSERT_TRUE((*moved)->Release().ok());
  ASSERT_TRUE((*moved)->Resume().ok());
  const double d = MaxDiff(a, b), s = StateDiff(**moved, **kept);  // State() right after the resume
  std::printf("[cuda] AdamW released and resumed every step vs never, 8 steps: params %.3g, state %.3g\n", d, s);
  EXPECT_EQ(d, 0);
  EXPECT_EQ(s, 0);
}

}  // namespace
}  // namespace tandem::train

#endif  // TANDEM_TORCH_CUDA

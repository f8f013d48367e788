// The fused AdamW update on the GPU against the CPU implementation: the same
// bits for fp32 parameters (vectorised and misaligned pointers, sizes off
// the vector width), and for bf16 and fp16 parameters the same fp32 master,
// the parameter its rounding. Outputs poisoned where the kernel must write.
// The clip's sum of squares: the CPU's sum, the same bits on every run.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/adamw/adamw_cuda.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using testing::DeviceBuffer;

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

const AdamWStep kStep{3e-3, 0.1, 0.9, 0.95, 1e-8, 5, 0.5};

TEST(AdamWGpu, Fp32IsTheCpusUpdateBitForBit) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  std::mt19937_64 rng(testing::FreshSeed());
  for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{1001}, size_t{(1 << 20) + 3}}) {
    for (size_t offset : {size_t{0}, size_t{1}}) {  // 1: every pointer off the 16-byte vector alignment
      const size_t total = n + offset;
      std::vector<float> g = testing::RandomVector(rng, total), w = testing::RandomVector(rng, total),
                         m = testing::RandomVector(rng, total, -0.1f, 0.1f), v = testing::RandomVector(rng, total, 0, 0.01f);
      DeviceBuffer<float> dg(total), dw(total), dm(total), dv(total);
      ASSERT_EQ(dg.Upload(g), cudaSuccess);
      ASSERT_EQ(dw.Upload(w), cudaSuccess);
      ASSERT_EQ(dm.Upload(m), cudaSuccess);
      ASSERT_EQ(dv.Upload(v), cudaSuccess);
      ASSERT_TRUE(AdamWCuda(kStep, AdamWParamType::kF32, n, dw.get() + offset, dg.get() + offset, nullptr,
                            dm.get() + offset, dv.get() + offset, nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(AdamWCpu(kStep, n, g.data() + offset, w.data() + offset, m.data() + offset, v.data() + offset).ok());
      std::vector<float> ow, om, ov;
      ASSERT_EQ(dw.Download(ow), cudaSuccess);
      ASSERT_EQ(dm.Download(om), cudaSuccess);
      ASSERT_EQ(dv.Download(ov), cudaSuccess);
      const std::string where = "n " + std::to_string(n) + " offset " + std::to_string(offset);
      EXPECT_EQ(ow, w) << where;
      EXPECT_EQ(om, m) << where;
      EXPECT_EQ(ov, v) << where;
    }
  }
}

template <typename P>
void ExpectMasterPath(AdamWParamType type, float (*to_float)(P), P (*from_float)(float)) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (size_t n : {size_t{5}, size_t{(1 << 16) + 1}}) {
    std::vector<float> master = testing::RandomVector(rng, n), m = testing::RandomVector(rng, n, -0.1f, 0.1f),
                       v = testing::RandomVector(rng, n, 0, 0.01f);
    std::vector<P> grad(n), param(n);
    std::vector<float> grad_f(n);
    const std::vector<float> gr = testing::RandomVector(rng, n);
    for (size_t i = 0; i < n; ++i) {
      grad[i] = from_float(gr[i]);
      grad_f[i] = to_float(grad[i]);
      param[i] = from_float(master[i]);
    }
    DeviceBuffer<P> dp(n), dg(n);
    DeviceBuffer<float> dmaster(n), dm(n), dv(n);
    ASSERT_EQ(dp.Poison(), cudaSuccess);
    ASSERT_EQ(dg.Upload(grad), cudaSuccess);
    ASSERT_EQ(dmaster.Upload(master), cudaSuccess);
    ASSERT_EQ(dm.Upload(m), cudaSuccess);
    ASSERT_EQ(dv.Upload(v), cudaSuccess);
    ASSERT_TRUE(AdamWCuda(kStep, type, n, dp.get(), dg.get(), dmaster.get(), dm.get(), dv.get(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(AdamWCpu(kStep, n, grad_f.data(), master.data(), m.data(), v.data()).ok());
    std::vector<P> op;
    std::vector<float> omaster, om;
    ASSERT_EQ(dp.Download(op), cudaSuccess);
    ASSERT_EQ(dmaster.Download(omaster), cudaSuccess);
    ASSERT_EQ(dm.Download(om), cudaSuccess);
    EXPECT_EQ(omaster, master) << "n " << n;
    EXPECT_EQ(om, m) << "n " << n;
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += to_float(op[i]) != to_float(from_float(master[i]));
    EXPECT_EQ(wrong, 0u) << "parameters that are not their master's rounding, n " << n;
  }
}

TEST(AdamWGpu, Bf16ParametersAreTheirFp32MastersRounding) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  ExpectMasterPath<__nv_bfloat16>(
      AdamWParamType::kBf16, [](__nv_bfloat16 x) { return __bfloat162float(x); },
      [](float x) { return __float2bfloat16_rn(x); });
}

TEST(AdamWGpu, Fp16ParametersAreTheirFp32MastersRounding) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  ExpectMasterPath<__half>(
      AdamWParamType::kF16, [](__half x) { return __half2float(x); }, [](float x) { return __float2half_rn(x); });
}

TEST(SumSquaresGpu, IsTheCpusSumAndTheSameOnEveryRun) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  std::mt19937_64 rng(testing::FreshSeed());
  DeviceBuffer<double> workspace(kSumSquaresCudaBlocks), out(1);
  for (size_t n : {size_t{1}, size_t{1001}, size_t{(1 << 22) + 3}}) {
    const std::vector<float> x = testing::RandomVector(rng, n, -3, 3);
    double cpu = 0;
    ASSERT_TRUE(SumSquaresCpu(static_cast<int64_t>(n), x.data(), &cpu).ok());
    DeviceBuffer<float> dx(n);
    ASSERT_EQ(dx.Upload(x), cudaSuccess);
    std::vector<double> runs;
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(cudaMemset(out.get(), 0, sizeof(double)), cudaSuccess);
      ASSERT_TRUE(SumSquaresCuda(AdamWParamType::kF32, n, dx.get(), workspace.get(), out.get(), nullptr).ok());
      std::vector<double> h;
      ASSERT_EQ(out.Download(h), cudaSuccess);
      runs.push_back(h[0]);
    }
    EXPECT_EQ(runs[0], runs[1]) << "n " << n;
    EXPECT_NEAR(runs[0], cpu, 1e-12 * cpu) << "n " << n;
    // It adds to *out: a second call over the same data doubles it.
    ASSERT_TRUE(SumSquaresCuda(AdamWParamType::kF32, n, dx.get(), workspace.get(), out.get(), nullptr).ok());
    std::vector<double> h;
    ASSERT_EQ(out.Download(h), cudaSuccess);
    EXPECT_NEAR(h[0], 2 * cpu, 2e-12 * cpu) << "n " << n;
  }
  // bf16: the squares of the bf16 values.
  const std::vector<float> x = testing::RandomVector(rng, 999, -3, 3);
  std::vector<__nv_bfloat16> xb(x.size());
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = __float2bfloat16_rn(x[i]);
    xr[i] = __bfloat162float(xb[i]);
  }
  double cpu = 0;
  ASSERT_TRUE(SumSquaresCpu(static_cast<int64_t>(xr.size()), xr.data(), &cpu).ok());
  DeviceBuffer<__nv_bfloat16> dx(xb.size());
  ASSERT_EQ(dx.Upload(xb), cudaSuccess);
  ASSERT_EQ(cudaMemset(out.get(), 0, sizeof(double)), cudaSuccess);
  ASSERT_TRUE(SumSquaresCuda(AdamWParamType::kBf16, xb.size(), dx.get(), workspace.get(), out.get(), nullptr).ok());
  std::vector<double> h;
  ASSERT_EQ(out.Download(h), cudaSuccess);
  EXPECT_NEAR(h[0], cpu, 1e-12 * cpu);
}

TEST(AdamWGpu, AMasterIsRequiredExactlyFor16BitParameters) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  DeviceBuffer<float> x(8);
  EXPECT_NE(AdamWCuda(kStep, AdamWParamType::kF32, 8, x.get(), x.get(), x.get(), x.get(), x.get(), nullptr).message().find("master"),
            std::string::npos);
  EXPECT_NE(AdamWCuda(kStep, AdamWParamType::kBf16, 8, x.get(), x.get(), nullptr, x.get(), x.get(), nullptr).message().find("master"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::kernels

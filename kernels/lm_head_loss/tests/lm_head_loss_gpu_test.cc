// Chunked LM-head loss on the GPU against the CPU oracle on the same
// bf16-rounded inputs: log-probs, entropy, grad_hidden, grad_weight; chunk
// sizes that do and do not divide the rows, vocabularies off 4, forks (rows
// in several pairs), temperature. Outputs poisoned before each launch.
#include <gtest/gtest.h>

#include "kernels/lm_head_loss/lm_head_loss_cuda.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using testing::DeviceBuffer;

testing::Tolerance Tol(const std::vector<float>& ref) { return {5e-2 * testing::Rms(ref) + 1e-5, 2e-2}; }

TEST(LmHeadLossGpu, MatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  struct C { int64_t N; int32_t H, V; int64_t M; float t; int64_t chunk; };
  for (const C& c : {C{300, 64, 1000, 400, 1.f, 128}, C{257, 128, 2003, 300, 0.7f, 64}, C{64, 256, 4096, 64, 1.f, 64},
                     C{5, 64, 999, 9, 1.2f, 1000}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " chunk=" + std::to_string(c.chunk));
    const LmHeadLossShape s{c.N, c.H, c.V, c.M, c.t};
    auto hidden = testing::RandomVector(rng, c.N * c.H, -1, 1), weight = testing::RandomVector(rng, int64_t(c.V) * c.H, -0.3f, 0.3f);
    testing::RoundToBf16(hidden);
    testing::RoundToBf16(weight);
    std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(c.N) - 1), lab(0, c.V - 1);
    std::vector<int32_t> rows, labels;
    for (int64_t i = 0; i < c.M; ++i) {
      rows.push_back(i < 6 ? static_cast<int32_t>(i / 3) : row(rng));
      labels.push_back(lab(rng));
    }
    auto g_lp = testing::RandomVector(rng, c.M), g_ent = testing::RandomVector(rng, c.N);
    std::vector<float> lp_r(c.M), ent_r(c.N), lse_r(c.N), gh_r(hidden.size()), gw_r(weight.size());
    LmHeadLossForwardRef(s, hidden.data(), weight.data(), rows.data(), labels.data(), lp_r.data(), ent_r.data(), lse_r.data());
    LmHeadLossBackwardRef(s, hidden.data(), weight.data(), rows.data(), labels.data(), g_lp.data(), g_ent.data(),
                          gh_r.data(), gw_r.data());

    DeviceBuffer<__nv_bfloat16> d_h(hidden.size()), d_w(weight.size());
    DeviceBuffer<int32_t> d_rows(c.M), d_labels(c.M);
    DeviceBuffer<float> d_lp(c.M), d_ent(c.N), d_lse(c.N), d_glp(c.M), d_gent(c.N), d_gh(hidden.size()), d_gw(weight.size());
    DeviceBuffer<char> ws(LmHeadLossWorkspaceBytes(s, c.chunk));
    TANDEM_CUDA_OK(d_h.Upload(testing::ToBf16(hidden)));
    TANDEM_CUDA_OK(d_w.Upload(testing::ToBf16(weight)));
    TANDEM_CUDA_OK(d_rows.Upload(rows));
    TANDEM_CUDA_OK(d_labels.Upload(labels));
    TANDEM_CUDA_OK(d_glp.Upload(g_lp));
    TANDEM_CUDA_OK(d_gent.Upload(g_ent));
    for (auto* b : {&d_lp, &d_ent, &d_lse, &d_gh, &d_gw}) TANDEM_CUDA_OK(b->Poison());
    TANDEM_CUDA_OK(ws.Poison());
    Status st = LmHeadLossForwardCuda(handle, s, d_h.get(), d_w.get(), d_rows.get(), d_labels.get(), d_lp.get(),
                                      d_ent.get(), d_lse.get(), ws.get(), ws.size(), c.chunk, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = LmHeadLossBackwardCuda(handle, s, d_h.get(), d_w.get(), d_rows.get(), d_labels.get(), d_lse.get(), d_ent.get(),
                                d_glp.get(), d_gent.get(), d_gh.get(), d_gw.get(), ws.get(), ws.size(), c.chunk, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    TANDEM_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> out;
    TANDEM_CUDA_OK(d_lp.Download(out));
    EXPECT_EQ(testing::CheckClose(out, lp_r, {2e-3, 1e-3}), "") << "logprob";
    TANDEM_CUDA_OK(d_ent.Download(out));
    EXPECT_EQ(testing::CheckClose(out, ent_r, {2e-3, 1e-3}), "") << "entropy";
    TANDEM_CUDA_OK(d_gh.Download(out));
    EXPECT_EQ(testing::CheckClose(out, gh_r, Tol(gh_r)), "") << "grad_hidden";
    EXPECT_LT(testing::RelativeL2(out, gh_r), 1e-2);
    TANDEM_CUDA_OK(d_gw.Download(out));
    EXPECT_EQ(testing::CheckClose(out, gw_r, Tol(gw_r)), "") << "grad_weight";
    EXPECT_LT(testing::RelativeL2(out, gw_r), 1e-2);
  }
  cublasDestroy(handle);
}

TEST(LmHeadLossGpu, RejectsSmallWorkspaceAndMarksBadPairs) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const LmHeadLossShape s{4, 8, 16, 1, 1.f};
  DeviceBuffer<__nv_bfloat16> h(32), w(128);
  TANDEM_CUDA_OK(h.Upload(testing::ToBf16(std::vector<float>(32, 0.5f))));
  TANDEM_CUDA_OK(w.Upload(testing::ToBf16(std::vector<float>(128, 0.25f))));
  DeviceBuffer<int32_t> rows(1), labels(1);
  TANDEM_CUDA_OK(rows.Upload({2}));
  TANDEM_CUDA_OK(labels.Upload({99}));  // out of range
  DeviceBuffer<float> lp(1), lse(4);
  DeviceBuffer<char> ws(LmHeadLossWorkspaceBytes(s, 2));
  EXPECT_FALSE(LmHeadLossForwardCuda(handle, s, h.get(), w.get(), rows.get(), labels.get(), lp.get(), nullptr,
                                     lse.get(), ws.get(), ws.size() - 1, 2, nullptr)
                   .ok());
  ASSERT_TRUE(LmHeadLossForwardCuda(handle, s, h.get(), w.get(), rows.get(), labels.get(), lp.get(), nullptr, lse.get(),
                                    ws.get(), ws.size(), 2, nullptr)
                  .ok());
  std::vector<float> out;
  TANDEM_CUDA_OK(lp.Download(out));
  EXPECT_TRUE(std::isnan(out[0]));
  cublasDestroy(handle);
}

}  // namespace
}  // namespace tandem::kernels

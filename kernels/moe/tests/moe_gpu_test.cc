// MoE on the GPU against the CPU oracle on the same bf16-rounded inputs:
// router (scores, top-k where the choice is not a near-tie, weights, stats)
// and its backward; the permutation (identical to the oracle's); the whole
// expert layer forward and backward through permute, both GEMM modes, with
// balanced routing, heavy imbalance and empty experts. Outputs poisoned.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/moe/moe_cuda.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using testing::DeviceBuffer;

// gu, act and dyp are stored in bf16 (as in any bf16 MoE), so an element of a
// weight gradient, a sum over the expert's rows, carries their roundings: its
// error has a standard deviation near 1% of the tensor's RMS (seen on the
// H200: one element in 1e5 at 5 sigma). Elements are bounded at 10 sigma and
// the whole tensor by the relative L2 error, which catches wrong results.
testing::Tolerance Tol(const std::vector<float>& ref) { return {1e-1 * testing::Rms(ref) + 1e-5, 3e-2}; }

void ExpectClose(const std::vector<float>& out, const std::vector<float>& ref, const char* what) {
  EXPECT_EQ(testing::CheckClose(out, ref, Tol(ref)), "") << what;
  EXPECT_LT(testing::RelativeL2(out, ref), 1.5e-2) << what;
}

TEST(MoeGpu, RouterMatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    for (bool renorm : {true, false}) {
      const MoeShape s{333, 8, 8, 64, 6, score, renorm};
      auto logits = testing::RandomVector(rng, 333 * 64, -4, 4);
      const RouterOutput ref = MoeRouterRef(s, logits.data());
      DeviceBuffer<float> d_l(logits.size()), d_sc(logits.size()), d_w(333 * 6), d_sum(64), d_gw(333 * 6), d_gl(logits.size());
      DeviceBuffer<int32_t> d_idx(333 * 6), d_cnt(64);
      TANDEM_CUDA_OK(d_l.Upload(logits));
      for (auto* b : {&d_sc, &d_w, &d_sum, &d_gl}) TANDEM_CUDA_OK(b->Poison());
      TANDEM_CUDA_OK(d_idx.Poison());
      ASSERT_TRUE(MoeRouterCuda(s, d_l.get(), d_sc.get(), d_idx.get(), d_w.get(), d_cnt.get(), d_sum.get(), nullptr).ok());
      std::vector<float> sc, w, sum;
      std::vector<int32_t> idx, cnt;
      TANDEM_CUDA_OK(d_sc.Download(sc));
      TANDEM_CUDA_OK(d_w.Download(w));
      TANDEM_CUDA_OK(d_sum.Download(sum));
      TANDEM_CUDA_OK(d_idx.Download(idx));
      TANDEM_CUDA_OK(d_cnt.Download(cnt));
      EXPECT_EQ(testing::CheckClose(sc, ref.scores, {1e-5, 1e-4}), "");
      EXPECT_EQ(testing::CheckClose(sum, ref.score_sum, {1e-3, 1e-4}), "");
      int64_t compared = 0;
      for (int t = 0; t < 333; ++t) {
        std::vector<float> row(ref.scores.begin() + t * 64, ref.scores.begin() + (t + 1) * 64);
        std::sort(row.begin(), row.end(), std::greater<float>());
        if (row[5] - row[6] < 1e-4f) continue;  // near-tie at the boundary: either choice is right
        ++compared;
        // The chosen set and its weights; the order inside the set may differ
        // where two chosen scores nearly tie.
        std::vector<std::pair<int32_t, float>> mine_set, ref_set;
        for (int j = 0; j < 6; ++j) {
          mine_set.emplace_back(idx[t * 6 + j], w[t * 6 + j]);
          ref_set.emplace_back(ref.topk_idx[t * 6 + j], ref.topk_weight[t * 6 + j]);
        }
        std::sort(mine_set.begin(), mine_set.end());
        std::sort(ref_set.begin(), ref_set.end());
        for (int j = 0; j < 6; ++j) {
          EXPECT_EQ(mine_set[j].first, ref_set[j].first) << t;
          EXPECT_NEAR(mine_set[j].second, ref_set[j].second, 1e-5) << t;
        }
      }
      EXPECT_GT(compared, 300);
      int64_t total = 0;
      for (int c : cnt) total += c;
      EXPECT_EQ(total, 333 * 6);
      // Backward with the GPU's own selection, against the oracle's formula on it.
      RouterOutput mine{sc, idx, w, cnt, sum};
      auto gw = testing::RandomVector(rng, 333 * 6), gs = testing::RandomVector(rng, 64);
      std::vector<float> gl_ref(logits.size());
      MoeRouterBackwardRef(s, mine, gw.data(), gs.data(), gl_ref.data());
      TANDEM_CUDA_OK(d_gw.Upload(gw));
      TANDEM_CUDA_OK(d_sum.Upload(gs));
      ASSERT_TRUE(MoeRouterBackwardCuda(s, d_sc.get(), d_idx.get(), d_w.get(), d_gw.get(), d_sum.get(), d_gl.get(), nullptr).ok());
      std::vector<float> gl;
      TANDEM_CUDA_OK(d_gl.Download(gl));
      EXPECT_EQ(testing::CheckClose(gl, gl_ref, {1e-5, 1e-3}), "") << "grad_logits";
    }
  }
}

void RunLayer(std::mt19937_64& rng, const MoeShape& s, const std::vector<int32_t>& topk, MoeGemm mode) {
  const int64_t T = s.tokens, H = s.hidden, I = s.inter, E = s.experts, K = s.top_k;
  auto x = testing::RandomVector(rng, T * H), wgu = testing::RandomVector(rng, E * H * 2 * I, -0.2f, 0.2f),
       wd = testing::RandomVector(rng, E * I * H, -0.2f, 0.2f), tw = testing::RandomVector(rng, T * K, 0.1f, 1.f),
       dout = testing::RandomVector(rng, T * H);
  for (auto* v : {&x, &wgu, &wd, &dout}) testing::RoundToBf16(*v);
  const PermutePlan p = MoePermutePlanRef(s, topk.data());
  std::vector<float> out_r(T * H), dx_r(T * H), dgu_r(wgu.size()), dd_r(wd.size()), dw_r(T * K);
  MoeExpertsForwardRef(s, p, x.data(), wgu.data(), wd.data(), tw.data(), out_r.data());
  MoeExpertsBackwardRef(s, p, x.data(), wgu.data(), wd.data(), tw.data(), dout.data(), dx_r.data(), dgu_r.data(),
                        dd_r.data(), dw_r.data());

  const int64_t R = T * K;
  DeviceBuffer<int32_t> d_topk(R), d_off(E + 1), d_pos(R), d_src(R);
  DeviceBuffer<char> ws(MoePermuteWorkspaceBytes(s));
  DeviceBuffer<bf16> d_x(T * H), d_wgu(wgu.size()), d_wd(wd.size()), d_xp(R * H), d_gu(R * 2 * I), d_act(R * I),
      d_yp(R * H), d_out(T * H), d_dout(T * H), d_dyp(R * H), d_dxp(R * H), d_dgu(R * 2 * I), d_dact(R * I), d_dx(T * H);
  DeviceBuffer<float> d_tw(R), d_dtw(R), d_dwgu(wgu.size()), d_dwd(wd.size());
  TANDEM_CUDA_OK(d_topk.Upload(topk));
  TANDEM_CUDA_OK(d_x.Upload(testing::ToBf16(x)));
  TANDEM_CUDA_OK(d_wgu.Upload(testing::ToBf16(wgu)));
  TANDEM_CUDA_OK(d_wd.Upload(testing::ToBf16(wd)));
  TANDEM_CUDA_OK(d_dout.Upload(testing::ToBf16(dout)));
  TANDEM_CUDA_OK(d_tw.Upload(tw));
  for (auto* b : {&d_off, &d_pos, &d_src}) TANDEM_CUDA_OK(b->Poison());
  for (auto* b : {&d_xp, &d_gu, &d_act, &d_yp, &d_out, &d_dyp, &d_dxp, &d_dgu, &d_dact, &d_dx}) TANDEM_CUDA_OK(b->Poison());
  for (auto* b : {&d_dtw, &d_dwgu, &d_dwd}) TANDEM_CUDA_OK(b->Poison());

  ASSERT_TRUE(MoePermutePlanCuda(s, d_topk.get(), d_off.get(), d_pos.get(), d_src.get(), ws.get(), ws.size(), nullptr).ok());
  std::vector<int32_t> off, pos, src;
  TANDEM_CUDA_OK(d_off.Download(off));
  TANDEM_CUDA_OK(d_pos.Download(pos));
  TANDEM_CUDA_OK(d_src.Download(src));
  EXPECT_EQ(off, p.offsets);
  EXPECT_EQ(pos, p.perm_pos);
  EXPECT_EQ(src, p.perm_src);
  auto host_off = MoeOffsetsToHost(s, d_off.get(), nullptr);
  ASSERT_TRUE(host_off.ok());
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  Status st = MoePermuteRowsCuda(s, d_x.get(), d_src.get(), d_xp.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = MoeExpertsForwardCuda(h, s, *host_off, d_xp.get(), d_wgu.get(), d_wd.get(), d_gu.get(), d_act.get(), d_yp.get(),
                             nullptr, mode);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(MoeUnpermuteCuda(s, d_yp.get(), d_tw.get(), d_pos.get(), d_out.get(), nullptr).ok());
  ASSERT_TRUE(MoeUnpermuteBackwardCuda(s, d_dout.get(), d_yp.get(), d_tw.get(), d_pos.get(), d_dyp.get(), d_dtw.get(), nullptr).ok());
  st = MoeExpertsBackwardCuda(h, s, *host_off, d_xp.get(), d_wgu.get(), d_wd.get(), d_gu.get(), d_act.get(), d_dyp.get(),
                              d_dxp.get(), d_dwgu.get(), d_dwd.get(), d_dgu.get(), d_dact.get(), nullptr, mode);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(MoePermuteRowsBackwardCuda(s, d_dxp.get(), d_pos.get(), d_dx.get(), nullptr).ok());
  TANDEM_CUDA_OK(cudaDeviceSynchronize());
  cublasDestroy(h);
  std::vector<bf16> hb;
  std::vector<float> f;
  TANDEM_CUDA_OK(d_out.Download(hb));
  ExpectClose(testing::ToFloat(hb), out_r, "out");
  TANDEM_CUDA_OK(d_dx.Download(hb));
  ExpectClose(testing::ToFloat(hb), dx_r, "dx");
  TANDEM_CUDA_OK(d_dwgu.Download(f));
  ExpectClose(f, dgu_r, "dw_gate_up");
  TANDEM_CUDA_OK(d_dwd.Download(f));
  ExpectClose(f, dd_r, "dw_down");
  TANDEM_CUDA_OK(d_dtw.Download(f));
  ExpectClose(f, dw_r, "dtopk_weight");
}

TEST(MoeGpu, ExpertLayerMatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (MoeGemm mode : {MoeGemm::kPerExpertLoop, MoeGemm::kGrouped, MoeGemm::kAuto}) {
    SCOPED_TRACE(mode == MoeGemm::kGrouped ? "grouped" : mode == MoeGemm::kAuto ? "auto" : "loop");
    {
      const MoeShape s{300, 64, 32, 8, 2};
      std::vector<int32_t> topk(600);
      std::uniform_int_distribution<int32_t> pick(0, 7);
      for (int t = 0; t < 300; ++t) {
        topk[2 * t] = pick(rng);
        do topk[2 * t + 1] = pick(rng); while (topk[2 * t + 1] == topk[2 * t]);
      }
      RunLayer(rng, s, topk, mode);
    }
    {
      // Heavy imbalance: every token on experts 3 and 9, the other 14 empty.
      const MoeShape s{129, 128, 64, 16, 2};
      std::vector<int32_t> topk(258);
      for (int t = 0; t < 129; ++t) topk[2 * t] = 9, topk[2 * t + 1] = 3;
      RunLayer(rng, s, topk, mode);
    }
    {
      // top-10 (more than the unpermute kernel keeps in registers).
      const MoeShape s{40, 64, 32, 16, 10};
      std::vector<int32_t> topk(400);
      for (int t = 0; t < 40; ++t) {
        for (int j = 0; j < 10; ++j) topk[t * 10 + j] = (t + j) % 16;
      }
      RunLayer(rng, s, topk, mode);
    }
  }
}

}  // namespace
}  // namespace tandem::kernels

// MoE on CUDA: argument checks, workspace layout and the expert GEMMs through
// cuBLAS, per expert or grouped (moe_cuda.h). Row-major tensors are handed to
// column-major cuBLAS as their transposes; moe_cuda.h lists the shapes.
#include "kernels/moe/moe_cuda.h"

#include <algorithm>
#include <string>

#include "kernels/common/cuda_status.h"
#include "kernels/moe/moe_launch.h"

namespace tandem::kernels {
namespace {

Status NotNull(std::initializer_list<const void*> ptrs, const char* what) {
  for (const void* p : ptrs) {
    if (p == nullptr) return InvalidArgument(std::string(what) + ": null tensor");
  }
  return Status::Ok();
}
Status CheckRows(const MoeShape& s, const char* what) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), what);
  if (s.hidden % 8 != 0 || s.inter % 8 != 0) {
    return InvalidArgument(std::string(what) + ": hidden and inter must be multiples of 8 (16-byte rows)");
  }
  return Status::Ok();
}

// One GEMM per expert: C_e = op(A_e) op(B_e), column-major, bf16 in, fp32 accumulate.
struct GemmBatch {
  cublasOperation_t ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc;
  std::vector<const void*> a, b;
  std::vector<void*> c;
  void Add(int mm, int nn, int kk, const void* aa, int la, const void* bb, int lb, void* cc, int lc) {
    m.push_back(mm), n.push_back(nn), k.push_back(kk), lda.push_back(la), ldb.push_back(lb), ldc.push_back(lc);
    a.push_back(aa), b.push_back(bb), c.push_back(cc);
  }
};

Status RunBatch(cublasHandle_t h, const GemmBatch& g, cudaDataType_t ctype, MoeGemm mode, cudaStream_t stream,
                const char* what) {
  const float one = 1.f, zero = 0.f;
  const size_t count = g.m.size();
  if (count == 0) return Status::Ok();
  if (mode == MoeGemm::kGrouped) {
    // Sizes, leading dimensions and scalars are host arrays; the pointer
    // arrays must live in device memory (stream-ordered allocation).
    std::vector<cublasOperation_t> ta(count, g.ta), tb(count, g.tb);
    std::vector<float> alpha(count, 1.f), beta(count, 0.f);
    std::vector<int> sizes(count, 1);
    std::vector<const void*> ptrs;
    ptrs.reserve(3 * count);
    ptrs.insert(ptrs.end(), g.a.begin(), g.a.end());
    ptrs.insert(ptrs.end(), g.b.begin(), g.b.end());
    ptrs.insert(ptrs.end(), g.c.begin(), g.c.end());
    void* dptrs = nullptr;
    TANDEM_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&dptrs, sizeof(void*) * ptrs.size(), stream), "pointer array"));
    Status st = Cuda(cudaMemcpyAsync(dptrs, ptrs.data(), sizeof(void*) * ptrs.size(), cudaMemcpyHostToDevice, stream),
                     "pointer array");
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if (st.ok()) {
      auto** dp = static_cast<const void**>(dptrs);
      bs = cublasGemmGroupedBatchedEx(h, ta.data(), tb.data(), g.m.data(), g.n.data(), g.k.data(), alpha.data(), dp,
                                      CUDA_R_16BF, g.lda.data(), dp + count, CUDA_R_16BF, g.ldb.data(), beta.data(),
                                      const_cast<void* const*>(dp + 2 * count), ctype, g.ldc.data(),
                                      static_cast<int>(count), sizes.data(), CUBLAS_COMPUTE_32F);
    }
    const Status freed = Cuda(cudaFreeAsync(dptrs, stream), "pointer array");
    TANDEM_RETURN_IF_ERROR(st);
    TANDEM_RETURN_IF_ERROR(freed);
    // Types the grouped API does not take here fall back to the loop below.
    if (bs != CUBLAS_STATUS_NOT_SUPPORTED) return Blas(bs, what);
  }
  for (size_t i = 0; i < count; ++i) {
    TANDEM_RETURN_IF_ERROR(Blas(cublasGemmEx(h, g.ta, g.tb, g.m[i], g.n[i], g.k[i], &one, g.a[i], CUDA_R_16BF, g.lda[i],
                                             g.b[i], CUDA_R_16BF, g.ldb[i], &zero, g.c[i], ctype, g.ldc[i],
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                what));
  }
  return Status::Ok();
}

MoeGemm Resolve(MoeGemm mode, const MoeShape& s, const std::vector<int32_t>& off) {
  if (mode != MoeGemm::kAuto) return mode;
  int32_t nonempty = 0;
  for (int32_t e = 0; e < s.experts; ++e) nonempty += off[e + 1] > off[e] ? 1 : 0;
  if (nonempty == 0) return MoeGemm::kPerExpertLoop;
  const double avg_rows = static_cast<double>(off.back()) / nonempty;
  const double flops = 2.0 * avg_rows * s.hidden * 2.0 * s.inter;  // the gate/up GEMM of one expert
  return flops >= 4e9 ? MoeGemm::kPerExpertLoop : MoeGemm::kGrouped;
}

Status CheckOffsets(const MoeShape& s, const std::vector<int32_t>& off) {
  if (off.size() != static_cast<size_t>(s.experts) + 1 || off.front() != 0 || off.back() > s.tokens * s.top_k) {
    return InvalidArgument("moe experts: host_offsets must have E+1 entries from 0 to at most T*k");
  }
  for (int32_t e = 0; e < s.experts; ++e) {
    if (off[e + 1] < off[e]) return InvalidArgument("moe experts: host_offsets must be non-decreasing");
  }
  return Status::Ok();
}

}  // namespace

Status MoeRouterCuda(const MoeShape& s, const float* logits, float* scores, int32_t* topk_idx, float* topk_weight,
                     int32_t* counts, float* score_sum, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe router (cuda)");
  TANDEM_RETURN_IF_ERROR(NotNull({logits, scores, topk_idx, topk_weight, counts, score_sum}, "moe router (cuda)"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(counts, 0, sizeof(int32_t) * s.experts, stream), "zero counts"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(score_sum, 0, sizeof(float) * s.experts, stream), "zero score_sum"));
  return Cuda(detail::LaunchRouter(s.tokens, s.experts, s.top_k, s.score == RouterScore::kSigmoid, s.renormalize,
                                   logits, scores, topk_idx, topk_weight, counts, score_sum, stream),
              "moe router launch");
}

Status MoeRouterBackwardCuda(const MoeShape& s, const float* scores, const int32_t* topk_idx,
                             const float* topk_weight, const float* grad_topk_weight, const float* grad_score_sum,
                             float* grad_logits, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe router backward (cuda)");
  TANDEM_RETURN_IF_ERROR(NotNull({scores, topk_idx, topk_weight, grad_topk_weight, grad_logits}, "moe router backward"));
  return Cuda(detail::LaunchRouterBackward(s.tokens, s.experts, s.top_k, s.score == RouterScore::kSigmoid,
                                           s.renormalize, scores, topk_idx, topk_weight, grad_topk_weight,
                                           grad_score_sum, grad_logits, stream),
              "moe router backward launch");
}

size_t MoePermuteWorkspaceBytes(const MoeShape& s) {
  return sizeof(int32_t) * static_cast<size_t>(std::max<int64_t>(1, detail::PermuteChunks(s.tokens * s.top_k))) *
         static_cast<size_t>(std::max(1, s.experts));
}

Status MoePermutePlanCuda(const MoeShape& s, const int32_t* topk_idx, int32_t* offsets, int32_t* perm_pos,
                          int32_t* perm_src, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe permute plan (cuda)");
  TANDEM_RETURN_IF_ERROR(NotNull({offsets, workspace}, "moe permute plan (cuda)"));
  if (s.tokens > 0) TANDEM_RETURN_IF_ERROR(NotNull({topk_idx, perm_pos, perm_src}, "moe permute plan (cuda)"));
  if (workspace_bytes < MoePermuteWorkspaceBytes(s)) return InvalidArgument("moe permute plan: workspace too small");
  return Cuda(detail::LaunchPermutePlan(s.tokens * s.top_k, s.experts, topk_idx, offsets, perm_pos, perm_src,
                                        static_cast<int32_t*>(workspace), stream),
              "moe permute plan launch");
}

StatusOr<std::vector<int32_t>> MoeOffsetsToHost(const MoeShape& s, const int32_t* offsets, cudaStream_t stream) {
  std::vector<int32_t> host(s.experts + 1);
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host.data(), offsets, sizeof(int32_t) * host.size(),
                                              cudaMemcpyDeviceToHost, stream),
                              "copy offsets"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream), "copy offsets"));
  return host;
}

Status MoePermuteRowsCuda(const MoeShape& s, const bf16* x, const int32_t* perm_src, bf16* xp, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe permute rows (cuda)"));
  TANDEM_RETURN_IF_ERROR(NotNull({x, perm_src, xp}, "moe permute rows (cuda)"));
  return Cuda(detail::LaunchGatherRows(s.tokens * s.top_k, s.hidden, s.top_k, x, perm_src, xp, stream), "gather rows");
}

Status MoePermuteRowsBackwardCuda(const MoeShape& s, const bf16* dxp, const int32_t* perm_pos, bf16* dx,
                                  cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe permute rows backward (cuda)"));
  TANDEM_RETURN_IF_ERROR(NotNull({dxp, perm_pos, dx}, "moe permute rows backward (cuda)"));
  return Cuda(detail::LaunchSumRows(s.tokens, s.hidden, s.top_k, dxp, nullptr, perm_pos, dx, stream), "sum rows");
}

Status MoeUnpermuteCuda(const MoeShape& s, const bf16* yp, const float* topk_weight, const int32_t* perm_pos, bf16* out,
                        cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe unpermute (cuda)"));
  TANDEM_RETURN_IF_ERROR(NotNull({yp, topk_weight, perm_pos, out}, "moe unpermute (cuda)"));
  return Cuda(detail::LaunchSumRows(s.tokens, s.hidden, s.top_k, yp, topk_weight, perm_pos, out, stream), "unpermute");
}

Status MoeUnpermuteBackwardCuda(const MoeShape& s, const bf16* dout, const bf16* yp, const float* topk_weight,
                                const int32_t* perm_pos, bf16* dyp, float* dtopk_weight, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe unpermute backward (cuda)"));
  TANDEM_RETURN_IF_ERROR(NotNull({dout, yp, topk_weight, perm_pos, dyp, dtopk_weight}, "moe unpermute backward"));
  return Cuda(detail::LaunchUnpermuteBackward(s.tokens, s.hidden, s.top_k, dout, yp, topk_weight, perm_pos, dyp,
                                              dtopk_weight, stream),
              "unpermute backward");
}

Status MoeExpertsForwardCuda(cublasHandle_t h, const MoeShape& s, const std::vector<int32_t>& off, const bf16* xp,
                             const bf16* wgu, const bf16* wd, bf16* gu, bf16* act, bf16* yp, cudaStream_t stream,
                             MoeGemm mode) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe experts forward (cuda)"));
  TANDEM_RETURN_IF_ERROR(CheckOffsets(s, off));
  TANDEM_RETURN_IF_ERROR(NotNull({xp, wgu, wd, gu, act, yp}, "moe experts forward (cuda)"));
  mode = Resolve(mode, s, off);
  TANDEM_RETURN_IF_ERROR(Blas(cublasSetStream(h, stream), "cublasSetStream"));
  const int64_t H = s.hidden, I = s.inter;
  GemmBatch up{CUBLAS_OP_N, CUBLAS_OP_N, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  GemmBatch down = up;
  for (int32_t e = 0; e < s.experts; ++e) {
    const int64_t r0 = off[e], n = off[e + 1] - off[e];
    if (n == 0) continue;
    up.Add(2 * I, n, H, wgu + e * H * 2 * I, 2 * I, xp + r0 * H, H, gu + r0 * 2 * I, 2 * I);
    down.Add(H, n, I, wd + e * I * H, H, act + r0 * I, I, yp + r0 * H, H);
  }
  TANDEM_RETURN_IF_ERROR(RunBatch(h, up, CUDA_R_16BF, mode, stream, "gate/up GEMMs"));
  TANDEM_RETURN_IF_ERROR(Cuda(detail::LaunchSwiglu(off.back(), s.inter, gu, act, stream), "swiglu"));
  return RunBatch(h, down, CUDA_R_16BF, mode, stream, "down GEMMs");
}

Status MoeExpertsBackwardCuda(cublasHandle_t h, const MoeShape& s, const std::vector<int32_t>& off, const bf16* xp,
                              const bf16* wgu, const bf16* wd, const bf16* gu, const bf16* act, const bf16* dyp,
                              bf16* dxp, float* dwgu, float* dwd, bf16* dgu, bf16* dact, cudaStream_t stream,
                              MoeGemm mode) {
  TANDEM_RETURN_IF_ERROR(CheckRows(s, "moe experts backward (cuda)"));
  TANDEM_RETURN_IF_ERROR(CheckOffsets(s, off));
  TANDEM_RETURN_IF_ERROR(NotNull({xp, wgu, wd, gu, act, dyp, dxp, dwgu, dwd, dgu, dact}, "moe experts backward"));
  mode = Resolve(mode, s, off);
  TANDEM_RETURN_IF_ERROR(Blas(cublasSetStream(h, stream), "cublasSetStream"));
  const int64_t H = s.hidden, I = s.inter;
  // Empty experts get zero weight gradients; the others are overwritten.
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(dwgu, 0, sizeof(float) * s.experts * H * 2 * I, stream), "zero dw"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(dwd, 0, sizeof(float) * s.experts * I * H, stream), "zero dw"));
  GemmBatch dact_g{CUBLAS_OP_T, CUBLAS_OP_N, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  GemmBatch dwd_g{CUBLAS_OP_N, CUBLAS_OP_T, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  GemmBatch dxp_g = dact_g, dwgu_g = dwd_g;
  for (int32_t e = 0; e < s.experts; ++e) {
    const int64_t r0 = off[e], n = off[e + 1] - off[e];
    if (n == 0) continue;
    dact_g.Add(I, n, H, wd + e * I * H, H, dyp + r0 * H, H, dact + r0 * I, I);
    dwd_g.Add(H, I, n, dyp + r0 * H, H, act + r0 * I, I, dwd + e * I * H, H);
    dxp_g.Add(H, n, 2 * I, wgu + e * H * 2 * I, 2 * I, dgu + r0 * 2 * I, 2 * I, dxp + r0 * H, H);
    dwgu_g.Add(2 * I, H, n, dgu + r0 * 2 * I, 2 * I, xp + r0 * H, H, dwgu + e * H * 2 * I, 2 * I);
  }
  TANDEM_RETURN_IF_ERROR(RunBatch(h, dact_g, CUDA_R_16BF, mode, stream, "dact GEMMs"));
  TANDEM_RETURN_IF_ERROR(RunBatch(h, dwd_g, CUDA_R_32F, mode, stream, "dw_down GEMMs"));
  TANDEM_RETURN_IF_ERROR(Cuda(detail::LaunchSwigluBackward(off.back(), s.inter, gu, dact, dgu, stream), "swiglu bwd"));
  TANDEM_RETURN_IF_ERROR(RunBatch(h, dxp_g, CUDA_R_16BF, mode, stream, "dxp GEMMs"));
  return RunBatch(h, dwgu_g, CUDA_R_32F, mode, stream, "dw_gate_up GEMMs");
}

}  // namespace tandem::kernels

// C ABI over the CUDA kernels (kernels_capi.h): converts Status to -1 plus a
// thread-local message. No logic of its own.
#include "kernels/capi/kernels_capi.h"

#include <string>

#include "kernels/lm_head_loss/lm_head_loss_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/tree_attention/tree_attention_cuda.h"

namespace {
thread_local std::string g_last_error;

int Report(const tandem::Status& st) {
  if (st.ok()) return 0;
  g_last_error = st.ToString();
  return -1;
}

struct PlanHandle {
  tandem::kernels::TreeAttentionPlan host;
  tandem::kernels::TreeAttentionPlanBuffer device;
  int64_t tree_pairs = 0;
};

tandem::kernels::TreeAttentionKernel Variant(int v) {
  return v == 0   ? tandem::kernels::TreeAttentionKernel::kSimple
         : v == 1 ? tandem::kernels::TreeAttentionKernel::kTensorCore
         : v == 3 ? tandem::kernels::TreeAttentionKernel::kTensorCoreWide
         : v == 4 ? tandem::kernels::TreeAttentionKernel::kTensorCoreWideLazy
         : v == 5 ? tandem::kernels::TreeAttentionKernel::kTensorCoreFusedBwd
         : v == 6 ? tandem::kernels::TreeAttentionKernel::kTensorCoreFusedBwdOrdered
         : v == 7 ? tandem::kernels::TreeAttentionKernel::kTensorCoreFusedBwdWide
                  : tandem::kernels::TreeAttentionKernel::kTensorCoreOverlapV;
}

tandem::kernels::TreeAttentionShape Shape(int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale) {
  return tandem::kernels::TreeAttentionShape{T, hq, hkv, d, scale};
}
// One cuBLAS handle per thread, created on first use, kept for the process.
cublasHandle_t Blas() {
  thread_local cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    if (cublasCreate(&x) != CUBLAS_STATUS_SUCCESS) x = nullptr;
    return x;
  }();
  return h;
}

tandem::kernels::LmHeadLossShape LossShape(int64_t n, int32_t h, int32_t v, int64_t m, float t) {
  return tandem::kernels::LmHeadLossShape{n, h, v, m, t};
}
tandem::kernels::MoeShape Moe(int64_t t, int32_t h, int32_t i, int32_t e, int32_t k) {
  return tandem::kernels::MoeShape{t, h, i, e, k};
}
cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
using Bf = __nv_bfloat16;
const Bf* CB(const void* p) { return static_cast<const Bf*>(p); }
Bf* MB(void* p) { return static_cast<Bf*>(p); }
tandem::kernels::MoeGemm Mode(int m) {
  return m == 0 ? tandem::kernels::MoeGemm::kPerExpertLoop
                : m == 1 ? tandem::kernels::MoeGemm::kGrouped : tandem::kernels::MoeGemm::kAuto;
}
}  // namespace

extern "C" {

const char* tandem_kernels_last_error(void) { return g_last_error.c_str(); }

void* tandem_tree_plan_create(int32_t num_tokens, int32_t num_segments, const int32_t* seg_start,
                              const int32_t* seg_length, const int32_t* seg_parent) {
  tandem::kernels::Forest f;
  f.num_tokens = num_tokens;
  for (int32_t i = 0; i < num_segments; ++i) f.segments.push_back({seg_start[i], seg_length[i], seg_parent[i]});
  auto plan = tandem::kernels::BuildTreeAttentionPlan(f);
  if (!plan.ok()) {
    Report(plan.status());
    return nullptr;
  }
  auto dev = tandem::kernels::TreeAttentionPlanBuffer::Upload(*plan, nullptr);
  if (!dev.ok()) {
    Report(dev.status());
    return nullptr;
  }
  auto* h = new PlanHandle{std::move(*plan), std::move(*dev), tandem::kernels::TreePairs(f)};
  return h;
}

int tandem_tree_plan_stats(const void* plan, int64_t* stats3) {
  const auto* h = static_cast<const PlanHandle*>(plan);
  stats3[0] = h->host.tile_pairs;
  stats3[1] = h->tree_pairs;
  stats3[2] = h->host.num_tiles;
  return 0;
}

void tandem_tree_plan_destroy(void* plan) { delete static_cast<PlanHandle*>(plan); }

int tandem_tree_attention_fwd(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                              const void* q, const void* k, const void* v, void* out, float* lse, void* stream,
                              int variant) {
  const auto* h = static_cast<const PlanHandle*>(plan);
  using B = __nv_bfloat16;
  return Report(tandem::kernels::TreeAttentionForwardCuda(
      h->device.view(), Shape(T, hq, hkv, d, scale), static_cast<const B*>(q), static_cast<const B*>(k),
      static_cast<const B*>(v), static_cast<B*>(out), lse, static_cast<cudaStream_t>(stream), Variant(variant)));
}

int tandem_tree_attention_bwd(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                              const void* q, const void* k, const void* v, const void* out, const void* dout,
                              const float* lse, float* delta, void* dq, void* dk, void* dv, void* stream,
                              int variant) {
  return tandem_tree_attention_bwd_ws(plan, T, hq, hkv, d, scale, q, k, v, out, dout, lse, delta, dq, dk, dv, stream,
                                      variant, nullptr);
}

int tandem_tree_attention_bwd_ws(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                                 const void* q, const void* k, const void* v, const void* out, const void* dout,
                                 const float* lse, float* delta, void* dq, void* dk, void* dv, void* stream,
                                 int variant, float* dq_accum) {
  const auto* h = static_cast<const PlanHandle*>(plan);
  using B = __nv_bfloat16;
  return Report(tandem::kernels::TreeAttentionBackwardCuda(
      h->device.view(), Shape(T, hq, hkv, d, scale), static_cast<const B*>(q), static_cast<const B*>(k),
      static_cast<const B*>(v), static_cast<const B*>(out), static_cast<const B*>(dout), lse, delta,
      static_cast<B*>(dq), static_cast<B*>(dk), static_cast<B*>(dv), static_cast<cudaStream_t>(stream),
      Variant(variant), dq_accum));
}

int tandem_lm_head_loss_workspace_bytes(int64_t n, int32_t h, int32_t v, int64_t m, int64_t chunk_rows,
                                        int64_t* bytes) {
  *bytes = static_cast<int64_t>(tandem::kernels::LmHeadLossWorkspaceBytes(LossShape(n, h, v, m, 1.f), chunk_rows));
  return 0;
}

int tandem_lm_head_loss_fwd(int64_t n, int32_t h, int32_t v, int64_t m, float temperature, const void* hidden,
                            const void* weight, const int32_t* rows, const int32_t* labels, float* logprob,
                            float* entropy, float* lse, void* workspace, int64_t workspace_bytes, int64_t chunk_rows,
                            void* stream) {
  if (Blas() == nullptr) return Report(tandem::Internal("cublasCreate failed"));
  using B = __nv_bfloat16;
  return Report(tandem::kernels::LmHeadLossForwardCuda(
      Blas(), LossShape(n, h, v, m, temperature), static_cast<const B*>(hidden), static_cast<const B*>(weight), rows,
      labels, logprob, entropy, lse, workspace, static_cast<size_t>(workspace_bytes), chunk_rows,
      static_cast<cudaStream_t>(stream)));
}

int tandem_lm_head_loss_bwd(int64_t n, int32_t h, int32_t v, int64_t m, float temperature, const void* hidden,
                            const void* weight, const int32_t* rows, const int32_t* labels, const float* lse,
                            const float* entropy, const float* grad_logprob, const float* grad_entropy,
                            float* grad_hidden, float* grad_weight, void* workspace, int64_t workspace_bytes,
                            int64_t chunk_rows, void* stream) {
  if (Blas() == nullptr) return Report(tandem::Internal("cublasCreate failed"));
  using B = __nv_bfloat16;
  return Report(tandem::kernels::LmHeadLossBackwardCuda(
      Blas(), LossShape(n, h, v, m, temperature), static_cast<const B*>(hidden), static_cast<const B*>(weight), rows,
      labels, lse, entropy, grad_logprob, grad_entropy, grad_hidden, grad_weight, workspace,
      static_cast<size_t>(workspace_bytes), chunk_rows, static_cast<cudaStream_t>(stream)));
}

int tandem_moe_router(int64_t t, int32_t e, int32_t k, int softmax, int renorm, const float* logits, float* scores,
                      int32_t* topk_idx, float* topk_weight, int32_t* counts, float* score_sum, void* stream) {
  tandem::kernels::MoeShape s = Moe(t, 8, 8, e, k);
  s.score = softmax ? tandem::kernels::RouterScore::kSoftmax : tandem::kernels::RouterScore::kSigmoid;
  s.renormalize = renorm != 0;
  return Report(tandem::kernels::MoeRouterCuda(s, logits, scores, topk_idx, topk_weight, counts, score_sum, S(stream)));
}

int tandem_moe_permute_ws_bytes(int64_t t, int32_t e, int32_t k, int64_t* bytes) {
  *bytes = static_cast<int64_t>(tandem::kernels::MoePermuteWorkspaceBytes(Moe(t, 8, 8, e, k)));
  return 0;
}

int tandem_moe_permute_plan(int64_t t, int32_t e, int32_t k, const int32_t* topk_idx, int32_t* offsets,
                            int32_t* perm_pos, int32_t* perm_src, void* ws, int64_t ws_bytes, void* stream) {
  return Report(tandem::kernels::MoePermutePlanCuda(Moe(t, 8, 8, e, k), topk_idx, offsets, perm_pos, perm_src, ws,
                                                    static_cast<size_t>(ws_bytes), S(stream)));
}

int tandem_moe_gather(int64_t t, int32_t h, int32_t k, const void* x, const int32_t* perm_src, void* xp, void* stream) {
  return Report(tandem::kernels::MoePermuteRowsCuda(Moe(t, h, 8, k, k), CB(x), perm_src, MB(xp), S(stream)));
}

int tandem_moe_unpermute(int64_t t, int32_t h, int32_t k, const void* yp, const float* topk_weight,
                         const int32_t* perm_pos, void* out, void* stream) {
  return Report(tandem::kernels::MoeUnpermuteCuda(Moe(t, h, 8, k, k), CB(yp), topk_weight, perm_pos, MB(out), S(stream)));
}

int tandem_moe_experts_fwd(int64_t t, int32_t h, int32_t i, int32_t e, int32_t k, const int32_t* host_offsets,
                           const void* xp, const void* w_gate_up, const void* w_down, void* gu, void* act, void* yp,
                           void* stream, int gemm_mode) {
  const std::vector<int32_t> off(host_offsets, host_offsets + e + 1);
  return Report(tandem::kernels::MoeExpertsForwardCuda(Blas(), Moe(t, h, i, e, k), off, CB(xp), CB(w_gate_up),
                                                       CB(w_down), MB(gu), MB(act), MB(yp), S(stream), Mode(gemm_mode)));
}

int tandem_moe_experts_bwd(int64_t t, int32_t h, int32_t i, int32_t e, int32_t k, const int32_t* host_offsets,
                           const void* xp, const void* w_gate_up, const void* w_down, const void* gu, const void* act,
                           const void* dyp, void* dxp, float* dw_gate_up, float* dw_down, void* dgu, void* dact,
                           void* stream, int gemm_mode) {
  const std::vector<int32_t> off(host_offsets, host_offsets + e + 1);
  return Report(tandem::kernels::MoeExpertsBackwardCuda(Blas(), Moe(t, h, i, e, k), off, CB(xp), CB(w_gate_up),
                                                        CB(w_down), CB(gu), CB(act), CB(dyp), MB(dxp), dw_gate_up,
                                                        dw_down, MB(dgu), MB(dact), S(stream), Mode(gemm_mode)));
}

}  // extern "C"

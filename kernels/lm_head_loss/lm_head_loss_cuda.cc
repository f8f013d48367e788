// Chunked LM-head loss on CUDA: argument checks, workspace layout and the
// chunk loop with its cuBLAS GEMMs (lm_head_loss_cuda.h). Row-major tensors
// are handed to column-major cuBLAS as their transposes.
#include "kernels/lm_head_loss/lm_head_loss_cuda.h"

#include <algorithm>
#include <string>

#include "kernels/common/cuda_status.h"
#include "kernels/lm_head_loss/lm_head_loss_launch.h"

namespace tandem::kernels {
namespace {


size_t Align256(size_t n) { return (n + 255) & ~size_t{255}; }

struct Workspace {
  float* logits;       // [chunk, V] fp32
  __nv_bfloat16* dz;   // [chunk, V] bf16
  float* gsum;         // [N] fp32
};

Status Layout(const LmHeadLossShape& s, int64_t chunk, void* ws, size_t bytes, Workspace& out) {
  if (chunk <= 0) return InvalidArgument("lm head loss (cuda): chunk_rows must be > 0");
  const size_t need = LmHeadLossWorkspaceBytes(s, chunk);
  if (ws == nullptr || bytes < need) {
    return InvalidArgument("lm head loss (cuda): workspace of " + std::to_string(bytes) + " bytes, needs " +
                           std::to_string(need));
  }
  char* p = static_cast<char*>(ws);
  const int64_t c = std::min<int64_t>(chunk, std::max<int64_t>(s.num_rows, 1));
  out.logits = reinterpret_cast<float*>(p);
  p += Align256(sizeof(float) * c * s.vocab);
  out.dz = reinterpret_cast<__nv_bfloat16*>(p);
  p += Align256(sizeof(__nv_bfloat16) * c * s.vocab);
  out.gsum = reinterpret_cast<float*>(p);
  return Status::Ok();
}

Status CheckPointers(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (p == nullptr) return InvalidArgument("lm head loss (cuda): null tensor");
  }
  return Status::Ok();
}

// logits chunk [rows, V] (fp32) = hidden[r0 : r0+rows] . weight^T
Status LogitsGemm(cublasHandle_t h, const LmHeadLossShape& s, const __nv_bfloat16* hidden,
                  const __nv_bfloat16* weight, int64_t r0, int64_t rows, float* logits) {
  const float one = 1.f, zero = 0.f;
  return Blas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.vocab, static_cast<int>(rows), s.hidden, &one, weight,
                           CUDA_R_16BF, s.hidden, hidden + r0 * s.hidden, CUDA_R_16BF, s.hidden, &zero, logits,
                           CUDA_R_32F, s.vocab, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "logits GEMM");
}

}  // namespace

size_t LmHeadLossWorkspaceBytes(const LmHeadLossShape& s, int64_t chunk_rows) {
  const int64_t c = std::min<int64_t>(std::max<int64_t>(chunk_rows, 1), std::max<int64_t>(s.num_rows, 1));
  return Align256(sizeof(float) * c * s.vocab) + Align256(sizeof(__nv_bfloat16) * c * s.vocab) +
         Align256(sizeof(float) * std::max<int64_t>(s.num_rows, 1));
}

Status LmHeadLossForwardCuda(cublasHandle_t handle, const LmHeadLossShape& s, const __nv_bfloat16* hidden,
                             const __nv_bfloat16* weight, const int32_t* rows, const int32_t* labels, float* logprob,
                             float* entropy, float* lse, void* workspace, size_t workspace_bytes, int64_t chunk_rows,
                             cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossShape(s), "lm head loss forward (cuda)");
  TANDEM_RETURN_IF_ERROR(CheckPointers({hidden, weight, lse}), "lm head loss forward (cuda)");
  if (s.num_pairs > 0) TANDEM_RETURN_IF_ERROR(CheckPointers({rows, labels, logprob}), "lm head loss forward (cuda)");
  Workspace ws;
  TANDEM_RETURN_IF_ERROR(Layout(s, chunk_rows, workspace, workspace_bytes, ws), "lm head loss forward");
  TANDEM_RETURN_IF_ERROR(Blas(cublasSetStream(handle, stream), "cublasSetStream"));
  const float inv_t = 1.f / s.temperature;
  for (int64_t r0 = 0; r0 < s.num_rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, s.num_rows - r0);
    TANDEM_RETURN_IF_ERROR(LogitsGemm(handle, s, hidden, weight, r0, n, ws.logits), "lm head loss forward");
    TANDEM_RETURN_IF_ERROR(Cuda(detail::LaunchRowStats(ws.logits, n, s.vocab, inv_t, lse + r0,
                                                       entropy != nullptr ? entropy + r0 : nullptr, stream),
                                "row stats"));
  }
  return Cuda(detail::LaunchPairLogprob(hidden, weight, rows, labels, s.num_pairs, s.num_rows, s.hidden, s.vocab,
                                        inv_t, lse, logprob, stream),
              "pair logprob");
}

Status LmHeadLossBackwardCuda(cublasHandle_t handle, const LmHeadLossShape& s, const __nv_bfloat16* hidden,
                              const __nv_bfloat16* weight, const int32_t* rows, const int32_t* labels,
                              const float* lse, const float* entropy, const float* grad_logprob,
                              const float* grad_entropy, float* grad_hidden, float* grad_weight, void* workspace,
                              size_t workspace_bytes, int64_t chunk_rows, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossShape(s), "lm head loss backward (cuda)");
  TANDEM_RETURN_IF_ERROR(CheckPointers({hidden, weight, lse, entropy, grad_hidden, grad_weight}),
                         "lm head loss backward (cuda)");
  if (s.num_pairs > 0 && grad_logprob != nullptr) {
    TANDEM_RETURN_IF_ERROR(CheckPointers({rows, labels}), "lm head loss backward (cuda)");
  }
  Workspace ws;
  TANDEM_RETURN_IF_ERROR(Layout(s, chunk_rows, workspace, workspace_bytes, ws), "lm head loss backward");
  TANDEM_RETURN_IF_ERROR(Blas(cublasSetStream(handle, stream), "cublasSetStream"));
  const float inv_t = 1.f / s.temperature;
  const int64_t M = grad_logprob != nullptr ? s.num_pairs : 0;
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(ws.gsum, 0, sizeof(float) * s.num_rows, stream), "zero gsum"));
  TANDEM_RETURN_IF_ERROR(Cuda(detail::LaunchGradSum(rows, grad_logprob, M, s.num_rows, ws.gsum, stream), "grad sum"));
  if (s.num_rows == 0) {
    return Cuda(cudaMemsetAsync(grad_weight, 0, sizeof(float) * s.vocab * s.hidden, stream), "zero grad_weight");
  }
  const float one = 1.f, zero = 0.f;
  for (int64_t r0 = 0; r0 < s.num_rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, s.num_rows - r0);
    TANDEM_RETURN_IF_ERROR(LogitsGemm(handle, s, hidden, weight, r0, n, ws.logits), "lm head loss backward");
    TANDEM_RETURN_IF_ERROR(Cuda(detail::LaunchLogitsGrad(ws.logits, r0, n, s.vocab, inv_t, lse, entropy, ws.gsum,
                                                         grad_entropy, rows, labels, grad_logprob, M, ws.dz, stream),
                                "logits grad"));
    // grad_hidden[r0:r0+n] (fp32) = dz . weight
    TANDEM_RETURN_IF_ERROR(Blas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.hidden, static_cast<int>(n), s.vocab,
                                             &one, weight, CUDA_R_16BF, s.hidden, ws.dz, CUDA_R_16BF, s.vocab, &zero,
                                             grad_hidden + r0 * s.hidden, CUDA_R_32F, s.hidden, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT),
                                "grad_hidden GEMM"));
    // grad_weight (fp32) (+)= dz^T . hidden[r0:r0+n]
    const float* beta = r0 == 0 ? &zero : &one;
    TANDEM_RETURN_IF_ERROR(Blas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.hidden, s.vocab, static_cast<int>(n),
                                             &one, hidden + r0 * s.hidden, CUDA_R_16BF, s.hidden, ws.dz, CUDA_R_16BF,
                                             s.vocab, beta, grad_weight, CUDA_R_32F, s.hidden, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT),
                                "grad_weight GEMM"));
  }
  return Status::Ok();
}

}  // namespace tandem::kernels

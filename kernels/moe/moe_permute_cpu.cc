// MoE permute and weighted unpermute on CPU (fp32), forward and backward: the
// row moves between token order and expert-grouped order (moe.h, "Permute",
// "Unpermute"), the CPU twins of moe_cuda.h's MoePermuteRows*/MoeUnpermute*.
// Used by the LibTorch glue's CPU path (workers/ops/moe_ops.cc).
#include <algorithm>
#include <cstring>

#include "kernels/moe/moe.h"

namespace tandem::kernels {

Status MoePermuteRowsCpu(const MoeShape& s, const float* x, const int32_t* perm_src, float* xp) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "permute");
  const int64_t rows = s.tokens * s.top_k, H = s.hidden;
  for (int64_t r = 0; r < rows; ++r) {
    if (perm_src[r] < 0 || perm_src[r] >= rows) return InvalidArgument("permute: perm_src out of range");
    std::memcpy(xp + r * H, x + static_cast<int64_t>(perm_src[r] / s.top_k) * H, H * sizeof(float));
  }
  return Status::Ok();
}

Status MoePermuteRowsBackwardCpu(const MoeShape& s, const float* dxp, const int32_t* perm_pos, float* dx) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "permute backward");
  const int64_t rows = s.tokens * s.top_k, H = s.hidden;
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* row = dx + t * H;
    std::fill(row, row + H, 0.f);
    for (int64_t j = 0; j < s.top_k; ++j) {
      const int64_t r = perm_pos[t * s.top_k + j];
      if (r < 0 || r >= rows) return InvalidArgument("permute backward: perm_pos out of range");
      const float* in = dxp + r * H;
      for (int64_t c = 0; c < H; ++c) row[c] += in[c];
    }
  }
  return Status::Ok();
}

Status MoeUnpermuteCpu(const MoeShape& s, const float* yp, const float* topk_weight, const int32_t* perm_pos,
                       float* out) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "unpermute");
  const int64_t rows = s.tokens * s.top_k, H = s.hidden, K = s.top_k;
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* row = out + t * H;
    std::fill(row, row + H, 0.f);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = perm_pos[t * K + j];
      if (r < 0 || r >= rows) return InvalidArgument("unpermute: perm_pos out of range");
      const float* in = yp + r * H;
      const float wj = topk_weight[t * K + j];
      for (int64_t c = 0; c < H; ++c) row[c] += wj * in[c];
    }
  }
  return Status::Ok();
}

Status MoeUnpermuteBackwardCpu(const MoeShape& s, const float* dout, const float* yp, const float* topk_weight,
                               const int32_t* perm_pos, float* dyp, float* dtopk_weight) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "unpermute backward");
  const int64_t rows = s.tokens * s.top_k, H = s.hidden, K = s.top_k;
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = perm_pos[t * K + j];
      if (r < 0 || r >= rows) return InvalidArgument("unpermute backward: perm_pos out of range");
      const float wj = topk_weight[t * K + j];
      double dot = 0;
      for (int64_t c = 0; c < H; ++c) {
        dyp[r * H + c] = wj * dout[t * H + c];
        dot += static_cast<double>(dout[t * H + c]) * yp[r * H + c];
      }
      dtopk_weight[t * K + j] = static_cast<float>(dot);
    }
  }
  return Status::Ok();
}

}  // namespace tandem::kernels

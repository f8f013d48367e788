// Fused decoder glue (issue #13, "Performance"; docs/model.md "Fused ops"):
// the elementwise and per-row work between the decoder's GEMMs and attention,
// each in one pass forward and one pass backward instead of the 5-15 ATen
// kernels of HF's formula. CPU oracle and CPU implementation here; CUDA (bf16)
// in fused_cuda.h. Row-major, contiguous tensors.
//
// RMSNorm (HF's Qwen3RMSNorm), rows [R, C], weight [C]:
//   h = x, or h = round(x + residual) (the residual add fused; h is an output)
//   rstd = 1 / sqrt(mean_c(h^2) + eps)          (fp32)
//   y = round(w * round(h * rstd))
// Backward, given grad_y and optionally grad_h (the gradient of the sum
// output h from its other consumers):
//   dxn = round(grad_y * w);  grad_w[c] = sum_r round(grad_y * round(h * rstd))
//   grad_h_total = round(rstd * dxn - h * rstd^3 * mean_c(dxn * h) + grad_h)
//   (the gradient of x and of residual alike).
// Per-head q/k RMSNorm + rotary ("default" rope), x [T, heads, D], weight [D],
// cos, sin [T, D] (HF's cat(freqs, freqs) tables in the model dtype):
//   n = round(w * round(x * rstd)) per (token, head) row of D;
//   rotate_half(n)_i = -n_{i+D/2} (i < D/2), n_{i-D/2} (i >= D/2);
//   y = round(round(n * cos) + round(rotate_half(n) * sin)).
// Backward: dn = round(g cos + rotate_half^T(g sin)), then RMSNorm's backward
//   with dn as grad_y (no residual). cos and sin get no gradient.
// SwiGLU, gate and up [n]: s = round(silu(gate)); y = round(s * up).
// Backward: ds = round(dy * up); grad_up = round(dy * s);
//   grad_gate = round(ds * sig * (1 + gate (1 - sig))), sig = sigmoid(gate).
//
// round() is the identity in fp32 (GlueRounding::kNone: the CPU model) and a
// round to bf16 at exactly the points where HF's bf16 model rounds
// (kBf16: what the CUDA kernels do; the oracle emulates it for their tests).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/status.h"

namespace tandem::kernels {

enum class GlueRounding { kNone, kBf16 };

// Round to the nearest bf16 (ties to even), as a float; NaN stays NaN.
inline float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return x;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

struct RmsNormShape {
  int64_t rows = 0;  // R
  int32_t cols = 0;  // C
  float eps = 1e-6f;
};
// rows >= 0, cols > 0 and even, eps finite and >= 0.
Status CheckRmsNormShape(const RmsNormShape& s);
// The widest row (cols, head_dim) the CUDA backward takes: its per-warp
// grad_weight sums live in 48 KiB of shared memory.
inline constexpr int32_t kFusedCudaMaxCols = 12288;

struct QkRotaryShape {
  int64_t tokens = 0;    // T
  int32_t heads = 0;     // rows per token
  int32_t head_dim = 0;  // D, a multiple of 4
  float eps = 1e-6f;
};
Status CheckQkRotaryShape(const QkRotaryShape& s);

// --- Oracles: HF's formula literally, fp64 between the rounding points.
// residual may be null (then sum_out is not written and may be null).
void RmsNormForwardRef(const RmsNormShape& s, GlueRounding r, const float* x, const float* residual,
                       const float* weight, float* sum_out, float* y);
// h: the normalised input (x, or the forward's sum_out). grad_h may be null.
void RmsNormBackwardRef(const RmsNormShape& s, GlueRounding r, const float* h, const float* weight,
                        const float* grad_y, const float* grad_h, float* grad_in, float* grad_weight);
void QkNormRotaryForwardRef(const QkRotaryShape& s, GlueRounding r, const float* x, const float* weight,
                            const float* cos, const float* sin, float* y);
void QkNormRotaryBackwardRef(const QkRotaryShape& s, GlueRounding r, const float* x, const float* weight,
                             const float* cos, const float* sin, const float* grad_y, float* grad_x,
                             float* grad_weight);
void SwigluForwardRef(int64_t n, GlueRounding r, const float* gate, const float* up, float* y);
void SwigluBackwardRef(int64_t n, GlueRounding r, const float* gate, const float* up, const float* grad_y,
                       float* grad_gate, float* grad_up);

// --- CPU implementation: fp32 (no rounding), rows in parallel; grad_weight
// summed over fixed row blocks in order (deterministic). threads <= 0: one
// per hardware thread.
Status RmsNormForwardCpu(const RmsNormShape& s, const float* x, const float* residual, const float* weight,
                         float* sum_out, float* y, int threads = 0);
Status RmsNormBackwardCpu(const RmsNormShape& s, const float* h, const float* weight, const float* grad_y,
                          const float* grad_h, float* grad_in, float* grad_weight, int threads = 0);
Status QkNormRotaryForwardCpu(const QkRotaryShape& s, const float* x, const float* weight, const float* cos,
                              const float* sin, float* y, int threads = 0);
Status QkNormRotaryBackwardCpu(const QkRotaryShape& s, const float* x, const float* weight, const float* cos,
                               const float* sin, const float* grad_y, float* grad_x, float* grad_weight,
                               int threads = 0);
Status SwigluForwardCpu(int64_t n, const float* gate, const float* up, float* y, int threads = 0);
Status SwigluBackwardCpu(int64_t n, const float* gate, const float* up, const float* grad_y, float* grad_gate,
                         float* grad_up, int threads = 0);

}  // namespace tandem::kernels

// Small-batch projections of the decode step (issue #14, "Performance";
// docs/inference.md "A decode step's kernels"). At batch 1-8 a decode step's
// GEMMs read their weights once and do almost no arithmetic, yet cuBLAS's
// small-M kernels reach 40-75% of the memory bandwidth on them, and the
// RMSNorm before each costs a launch of its own. One kernel here computes
//
//   h = x, or round(x + residual)          (sum_out = h, with a residual)
//   a = h, or RMSNorm(h) with norm_weight  (fused.h's formula and roundings)
//   z[m, n] = round(sum_k a[m, k] W[n, k]) (fp32 accumulation)
//   y = z, or with SwiGLU y[m, j] = round(round(silu(z[m, j])) * z[m, I + j])
//        for j < I = out / 2 (W's gate rows, then its up rows: fused.h's
//        SwiGLU of the packed gate/up projection)
//
// for x [rows, in], W [out, in] row-major (nn.Linear's weight), y [rows, out]
// or [rows, out / 2], all contiguous. round() is GlueRounding's: bf16 on
// CUDA. The CUDA kernel (decode_gemv_cuda.h) streams W once with 16-byte
// loads, a warp per output (or SwiGLU pair); each block first stages the
// input rows in shared memory (normalised, with a norm). With `dependent`
// it is a dependent launch (kernels/common/dependent_launch.cuh): it starts
// reading W before the kernels before it on the stream have ended, so W
// must not be written by kernels still running (a model's weights in a
// decode step are not).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/fused/fused.h"

namespace tandem::kernels {

// Rows (decode batch) the kernel takes; more go to a GEMM.
inline constexpr int32_t kDecodeGemvMaxRows = 8;
// The rows * in elements of the input are staged in shared memory (46 KiB,
// under the 48 KiB a block gets without opting in, beside the kernel's own).
inline constexpr int64_t kDecodeGemvMaxStagedElements = 23552;

struct DecodeGemvShape {
  int32_t rows = 0;  // 1..kDecodeGemvMaxRows
  int32_t in = 0;    // K, a positive multiple of 8
  int64_t out = 0;   // rows of W; even with swiglu
  bool norm = false;    // RMSNorm the input with norm_weight
  bool swiglu = false;  // y = SwiGLU of the output's halves
  float eps = 1e-6f;
  bool dependent = true;  // a dependent launch (see above), or an ordinary one
};
// The limits above; rows * in <= kDecodeGemvMaxStagedElements; eps finite
// and >= 0.
Status CheckDecodeGemvShape(const DecodeGemvShape& s);
// Where the kernel is used (docs/benchmarks.md "The decode GEMV" and
// "Weights in flight before the wait", H100): one row (a batch-1 step), of
// any length the check takes. It beat the norm, cuBLAS and SwiGLU it
// replaces by 1.3-2.7x on every projection of the benchmark models but the
// 3B down projection (11008 inputs), where it is level with cuBLAS's
// split-K (0.94-0.97x) and lets the next projection start early. With more
// rows its weight vectors' bf16 conversions repeat per row (0.25-0.75x
// cuBLAS at 8).
inline bool DecodeGemvPays(const DecodeGemvShape& s) { return s.rows == 1; }

// Columns of y: out, or out / 2 with SwiGLU.
inline int64_t DecodeGemvOutCols(const DecodeGemvShape& s) { return s.swiglu ? s.out / 2 : s.out; }

// Oracle: fused.h's RMSNorm and SwiGLU oracles around fp64 dot products
// rounded at the points above. residual (with sum_out) only with a norm and
// may be null; norm_weight only with a norm.
void DecodeGemvRef(const DecodeGemvShape& s, GlueRounding r, const float* x, const float* residual,
                   const float* norm_weight, const float* weight, float* sum_out, float* y);

}  // namespace tandem::kernels

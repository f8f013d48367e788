// The decode GEMV's kernel (decode_gemv.h): a warp per output column (a row
// of W; two adjacent ones for short rows; a SwiGLU pair of rows), its lanes
// streaming the rows with 16-byte loads, kLoads of them in flight per lane,
// the input rows read beside them from shared memory, fp32 sums reduced
// across the warp. Blocks loop over the columns, two a multiprocessor, or
// three where that makes one wave. Each block first stages
// the input rows in shared memory: as they are, or normalised (the residual
// add, then RMSNorm as fused.cu's row kernel computes it; block 0 also
// writes the sum; kernels/fused/rms_norm_row.cuh), so the norm costs no
// launch of its own. Launched as a dependent launch: a warp's first weight
// loads are in flight before the kernel before it has ended.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/device_math.cuh"
#include "kernels/decode_gemv/decode_gemv.h"
#include "kernels/decode_gemv/decode_gemv_launch.h"
#include "kernels/fused/rms_norm_row.cuh"

namespace tandem::kernels::detail {
namespace {

using bf16 = __nv_bfloat16;
using bf162 = __nv_bfloat162;

constexpr int kWarps = 8;
// The grid's blocks a multiprocessor: kBlocksPerSm, or kOneWaveBlocksPerSm
// where that many cover every task at once (the kernel's registers fit 3
// at M <= 2). On an H100 a 3.1B model's q/k/v projection (2560 columns)
// took 7.1 us in one wave at 3; its gate/up projection (many waves) 39.6 us
// at 3 and 35.7 at 2 (docs/benchmarks.md "Weights in flight before the
// wait").
constexpr int kBlocksPerSm = 2;
constexpr int kOneWaveBlocksPerSm = 3;
// 16-byte weight loads in flight per lane (over the rows a warp reads).
constexpr int kLoads = 8;

// What a warp computes per task: one output column (a row of W), two
// adjacent ones (inputs of at most kPairMaxIn, whose rows are too short to
// keep kLoads in flight alone), or a SwiGLU pair (gate row j, up row
// cols + j).
enum class Task { kColumn, kTwoColumns, kSwiglu };
constexpr int kPairMaxIn = 32 * 8 * (kLoads / 2);

// acc += <w, x> over 8 bf16 pairs.
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x, float acc) {
  const bf162* wp = reinterpret_cast<const bf162*>(&w);
  const bf162* xp = reinterpret_cast<const bf162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// The input rows into xs [rows, in] (shared memory): RMSNorm of x (+
// residual) as fused.cu's few-rows kernel computes it, block 0 also writing
// the sum; or x as it is.
template <bool kNorm>
__device__ void StageRows(int rows, int in, float eps, const bf16* x, const bf16* res, const bf16* nw,
                          bf16* sum_out, bf16* xs) {
  if constexpr (kNorm) {
    __shared__ float warp_sums[kWarps];
    for (int m = 0; m < rows; ++m) {
      const int64_t o = static_cast<int64_t>(m) * in;
      RmsNormRow(in, eps, x + o, res != nullptr ? res + o : nullptr, nw, xs + o,
                 res != nullptr && blockIdx.x == 0 ? sum_out + o : nullptr, xs + o, warp_sums);
    }
  } else {
    const int vecs = rows * in / 8;
#pragma unroll 1
    for (int v = threadIdx.x; v < vecs; v += kWarps * 32)
      reinterpret_cast<uint4*>(xs)[v] = __ldg(reinterpret_cast<const uint4*>(x) + v);
    __syncthreads();
  }
}

// M: rows rounded up to the instance; R: W rows a warp reads per task.
// cols: y's columns (W's rows, or half of them with SwiGLU). Each warp
// loads its first task's first weights, then waits for the kernels before
// it (at once, unless a dependent launch), then stages the input.
template <int M, bool kNorm, Task kTask>
__global__ void __launch_bounds__(kWarps * 32, 2)
    DecodeGemvKernel(int rows, int in, int64_t cols, float eps, const bf16* __restrict__ x,
                     const bf16* __restrict__ res, const bf16* __restrict__ nw, const bf16* __restrict__ w,
                     bf16* sum_out, bf16* __restrict__ y) {
  constexpr int R = kTask == Task::kColumn ? 1 : 2;
  constexpr int U = kLoads / R;  // 16-byte vectors in flight per row and lane
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const xs = reinterpret_cast<bf16*>(smem);
  const int lane = threadIdx.x & 31;
  const int vecs = in / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t tasks = kTask == Task::kTwoColumns ? (cols + 1) / 2 : cols;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  // W's rows a task reads; the second column of a kTwoColumns task, if any.
  const auto rows_of = [&](int64_t task, const uint4* (&wr)[R]) {
    const int64_t col = kTask == Task::kTwoColumns ? 2 * task : task;
    wr[0] = reinterpret_cast<const uint4*>(w + col * in);
    if constexpr (kTask == Task::kSwiglu) wr[1] = reinterpret_cast<const uint4*>(w + (cols + col) * in);
    if constexpr (kTask == Task::kTwoColumns) wr[1] = col + 1 < cols ? wr[0] + in / 8 : wr[0];
  };
  const auto load = [&](const uint4* (&wr)[R], int v0, uint4 (&wv)[R][U]) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = v0 + 32 * u < vecs ? __ldg(wr[r] + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
  };
  uint4 wv[R][U];
  if (first < tasks) {
    const uint4* wr[R];
    rows_of(first, wr);
    load(wr, lane, wv);
  }
  LetDependentsLaunch();
  WaitForPriorKernels();
  StageRows<kNorm>(rows, in, eps, x, res, nw, sum_out, xs);
  for (int64_t task = first; task < tasks; task += stride) {
    const int64_t col = kTask == Task::kTwoColumns ? 2 * task : task;
    const bool second = kTask == Task::kTwoColumns && col + 1 < cols;  // a second column to write
    const uint4* wr[R];
    rows_of(task, wr);
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
    for (int v0 = lane; v0 < vecs; v0 += 32 * U) {
      if (task != first || v0 != lane) load(wr, v0, wv);  // the first were loaded before the wait
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int v = v0 + 32 * u;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (v < vecs && m < rows) {
            const uint4 xv = *reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(m) * in + 8 * v);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][m] = Dot8(wv[r][u], xv, acc[r][m]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = WarpSum(acc[r][m]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (lane != m || m >= rows) continue;
      float out = acc[0][m];
      if constexpr (kTask == Task::kSwiglu) {
        const float g = Rb(acc[0][m]);
        out = Rb(g * Sigmoid(g)) * Rb(acc[R - 1][m]);
      }
      y[m * cols + col] = __float2bfloat16_rn(out);
      if constexpr (kTask == Task::kTwoColumns)
        if (second) y[m * cols + col + 1] = __float2bfloat16_rn(acc[R - 1][m]);
    }
  }
}

template <int M, bool kNorm, Task kTask>
cudaError_t Launch(int rows, int in, int64_t cols, float eps, bool dependent, const bf16* x, const bf16* res,
                   const bf16* nw, const bf16* w, bf16* sum_out, bf16* y, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  const int64_t tasks = kTask == Task::kTwoColumns ? (cols + 1) / 2 : cols;
  const int64_t wanted = (tasks + kWarps - 1) / kWarps;
  const bool one_wave = wanted <= static_cast<int64_t>(sms) * kOneWaveBlocksPerSm;
  const int64_t cap = static_cast<int64_t>(sms) * kBlocksPerSm;
  const int blocks = static_cast<int>(one_wave ? wanted : std::min(wanted, cap));
  const size_t smem = sizeof(bf16) * static_cast<size_t>(rows) * static_cast<size_t>(in);
  const auto kernel = &DecodeGemvKernel<M, kNorm, kTask>;
  if (dependent)
    return LaunchDependent(kernel, dim3(blocks), dim3(kWarps * 32), smem, stream, rows, in, cols, eps, x, res, nw, w,
                           sum_out, y);
  kernel<<<blocks, kWarps * 32, smem, stream>>>(rows, in, cols, eps, x, res, nw, w, sum_out, y);
  return cudaGetLastError();
}

using LaunchFn = cudaError_t (*)(int, int, int64_t, float, bool, const bf16*, const bf16*, const bf16*,
                                 const bf16*, bf16*, bf16*, cudaStream_t);

template <int M, bool kNorm>
LaunchFn PickTask(Task task) {
  if (task == Task::kSwiglu) return &Launch<M, kNorm, Task::kSwiglu>;
  return task == Task::kTwoColumns ? &Launch<M, kNorm, Task::kTwoColumns> : &Launch<M, kNorm, Task::kColumn>;
}

template <int M>
LaunchFn Pick(bool norm, Task task) {
  return norm ? PickTask<M, true>(task) : PickTask<M, false>(task);
}

}  // namespace

cudaError_t LaunchDecodeGemv(int rows, int in, int64_t out, bool norm, bool swiglu, float eps, bool dependent,
                             const bf16* x, const bf16* residual, const bf16* norm_weight, const bf16* weight,
                             bf16* sum_out, bf16* y, cudaStream_t stream) {
  static_assert(kDecodeGemvMaxRows == 8, "an instance for each power of two up to the most rows");
  const Task task = swiglu ? Task::kSwiglu : in <= kPairMaxIn ? Task::kTwoColumns : Task::kColumn;
  const LaunchFn fn = rows <= 1   ? Pick<1>(norm, task)
                      : rows <= 2 ? Pick<2>(norm, task)
                      : rows <= 4 ? Pick<4>(norm, task)
                                  : Pick<8>(norm, task);
  return fn(rows, in, swiglu ? out / 2 : out, eps, dependent, x, residual, norm_weight, weight, sum_out, y, stream);
}

}  // namespace tandem::kernels::detail

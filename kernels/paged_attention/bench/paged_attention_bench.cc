// Paged decode attention against the memory-bandwidth limit (issue #14,
// "Performance"): for each (heads, batch, context, new tokens) the kernel's
// time per step and the bytes it must read and write (K and V of every
// context, q, out, block tables), against the device copy bandwidth measured
// in the same run (cudaMemcpyAsync device to device of 1 GiB: 2 bytes moved
// per byte copied). "limit" = bytes / copy bandwidth; "of limit" = limit /
// measured time, for the kernel PagedKernel::kAuto runs. Each case times
// the tiles kernel, the mma kernel and, where the shape allows it (at most
// 4 rows per kv head), the warps kernel, in the same run, with the
// device plan (splits of at least 128 keys), and kAuto's kernel under the
// plan with splits of at least 64 keys. The block tables
// have room for 4096 keys whatever the context (as an engine's do: the
// split plan follows the capacity, each sequence's splits its context).
// The pools are cycled over enough copies (>= 256 MiB in all) that every
// step reads cold data rather than L2.
// Usage: paged_attention_bench [--quick]    (prints a Markdown table; --quick:
// the first heads only)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace {

using tandem::kernels::PagedAttentionCuda;
using tandem::kernels::PagedAttentionPlan;
using tandem::kernels::PagedAttentionShape;
using tandem::kernels::PagedKernel;
using tandem::kernels::testing::CopyBandwidth;

struct Heads {
  const char* name;
  int32_t hq, hkv, d;
};

// One case; prints its table row.
int RunCase(const Heads& h, int32_t batch, int32_t ctx, int32_t q_len, int sms, double copy_bw, std::mt19937_64& rng) {
  const int32_t bs = 16, blocks_per_seq = (ctx + bs - 1) / bs, table_width = std::max(blocks_per_seq, 4096 / bs);
  PagedAttentionShape s;
  s.num_seqs = batch;
  s.num_tokens = batch * q_len;
  s.num_heads = h.hq;
  s.num_kv_heads = h.hkv;
  s.head_dim = h.d;
  s.num_blocks = batch * blocks_per_seq;
  s.block_size = bs;
  s.max_blocks_per_seq = table_width;
  s.scale = 1.f / std::sqrt(static_cast<float>(h.d));
  const PagedAttentionPlan plan = tandem::kernels::PlanPagedAttention(s, sms);
  const PagedAttentionPlan fine_plan = tandem::kernels::PlanPagedAttention(s, sms, tandem::kernels::kPagedTileTokens);
  const size_t pool_bytes = static_cast<size_t>(s.num_blocks) * bs * h.hkv * h.d * sizeof(__nv_bfloat16);
  const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / pool_bytes + 1, 1, 64));

  std::vector<int32_t> perm(static_cast<size_t>(s.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> ids(static_cast<size_t>(batch) * table_width, 0);  // unused entries: block 0
  for (int32_t b = 0; b < batch; ++b) {
    std::copy_n(perm.begin() + static_cast<ptrdiff_t>(b) * blocks_per_seq, blocks_per_seq,
                ids.begin() + static_cast<ptrdiff_t>(b) * table_width);
  }
  std::vector<int32_t> ctx_lens(static_cast<size_t>(batch), ctx), starts(static_cast<size_t>(batch) + 1);
  for (int32_t b = 0; b <= batch; ++b) starts[static_cast<size_t>(b)] = b * q_len;

  std::vector<void*> kb(static_cast<size_t>(copies)), vb(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    TANDEM_BENCH_CUDA(cudaMalloc(&kb[static_cast<size_t>(c)], pool_bytes));
    TANDEM_BENCH_CUDA(cudaMalloc(&vb[static_cast<size_t>(c)], pool_bytes));
    TANDEM_BENCH_CUDA(cudaMemset(kb[static_cast<size_t>(c)], 0x3c, pool_bytes));  // bf16 0x3c3c ~ 0.0115
    TANDEM_BENCH_CUDA(cudaMemset(vb[static_cast<size_t>(c)], 0x3c, pool_bytes));
  }
  const size_t qo_bytes = static_cast<size_t>(s.num_tokens) * h.hq * h.d * sizeof(__nv_bfloat16);
  void *q = nullptr, *out = nullptr, *table = nullptr, *lens = nullptr, *qs = nullptr, *ws = nullptr;
  const size_t ws_bytes = std::max(tandem::kernels::PagedAttentionWorkspaceBytes(s, plan),
                                   tandem::kernels::PagedAttentionWorkspaceBytes(s, fine_plan));
  TANDEM_BENCH_CUDA(cudaMalloc(&q, qo_bytes));
  TANDEM_BENCH_CUDA(cudaMalloc(&out, qo_bytes));
  TANDEM_BENCH_CUDA(cudaMemset(q, 0x3c, qo_bytes));
  TANDEM_BENCH_CUDA(cudaMalloc(&table, ids.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&lens, ctx_lens.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&qs, starts.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)));
  TANDEM_BENCH_CUDA(cudaMemcpy(table, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  TANDEM_BENCH_CUDA(cudaMemcpy(lens, ctx_lens.data(), ctx_lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  TANDEM_BENCH_CUDA(cudaMemcpy(qs, starts.data(), starts.size() * sizeof(int32_t), cudaMemcpyHostToDevice));

  // Seconds per call of `kernel`, or a negative value on failure.
  auto time = [&](PagedKernel kernel, const PagedAttentionPlan& run_plan) -> double {
    auto step = [&](int i) {
      const size_t c = static_cast<size_t>(i % copies);
      return PagedAttentionCuda(s, run_plan, static_cast<const __nv_bfloat16*>(q),
                                static_cast<const __nv_bfloat16*>(kb[c]), static_cast<const __nv_bfloat16*>(vb[c]),
                                static_cast<const int32_t*>(table), static_cast<const int32_t*>(lens),
                                static_cast<const int32_t*>(qs), static_cast<__nv_bfloat16*>(out), ws, ws_bytes,
                                nullptr, kernel);
    };
    for (int i = 0; i < 3; ++i) {
      const tandem::Status st = step(i);
      if (!st.ok()) {
        std::fprintf(stderr, "paged attention: %s\n", st.ToString().c_str());
        return -1;
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    const int iters = std::max(20, copies);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < iters; ++i) (void)step(i);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    const bool ok = cudaGetLastError() == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ok ? ms * 1e-3 / iters : -1;
  };
  const bool warps_fit = tandem::kernels::PagedWarpsFit(s);
  const double tiles = time(PagedKernel::kTiles, plan);
  const double mma = time(PagedKernel::kMma, plan);
  const double warps = warps_fit ? time(PagedKernel::kWarps, plan) : 0;
  const double fine = time(PagedKernel::kAuto, fine_plan);
  if (tiles < 0 || mma < 0 || warps < 0 || fine < 0) return 1;
  const double t = warps_fit ? warps : mma;  // what kAuto runs
  const double kv = 2.0 * batch * static_cast<double>(ctx) * h.hkv * h.d * sizeof(__nv_bfloat16);
  const double table_bytes = static_cast<double>(batch) * blocks_per_seq * 4;  // the entries read
  const double bytes = kv + 2.0 * static_cast<double>(qo_bytes) + table_bytes;
  const double limit = bytes / copy_bw;
  char warps_col[32] = "—";
  if (warps_fit) std::snprintf(warps_col, sizeof(warps_col), "%.1f", warps * 1e6);
  std::printf("| %s | %d | %d | %d | %d | %.1f | %s | %.1f | %.2fx | %d | %.1f | %.2fx | %.2f | %.1f | %.1f | %.0f%% |\n",
              h.name, batch, ctx, q_len, plan.num_splits, tiles * 1e6, warps_col, mma * 1e6, tiles / t,
              fine_plan.num_splits, fine * 1e6, t / fine, bytes / 1e6, bytes / t / 1e9, limit * 1e6, 100.0 * limit / t);
  std::fflush(stdout);
  for (int c = 0; c < copies; ++c) {
    cudaFree(kb[static_cast<size_t>(c)]);
    cudaFree(vb[static_cast<size_t>(c)]);
  }
  for (void* p : {q, out, table, lens, qs, ws}) cudaFree(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  cudaDeviceProp prop{};
  TANDEM_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  double copy_bw = 0;
  if (CopyBandwidth(&copy_bw) != 0) return 1;
  std::printf("device: %s, %d SMs; device copy bandwidth %.0f GB/s (read + write, 1 GiB cudaMemcpyAsync)\n\n",
              prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  std::printf("| heads (Hq/Hkv x D) | batch | context | new tokens | splits | tiles µs | warps µs | mma µs "
              "| auto / tiles | splits (64-key min) | auto µs (64-key min) | speed-up | MB moved | GB/s | limit µs "
              "| of limit |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(1);
  const Heads heads[] = {{"16/2 x 128", 16, 2, 128},
                         {"16/8 x 128", 16, 8, 128},
                         {"32/4 x 128", 32, 4, 128},
                         {"16/8 x 64", 16, 8, 64}};
  for (const Heads& h : heads) {
    for (int32_t batch : {1, 16, 64, 256}) {
      for (int32_t ctx : {512, 1024, 2048, 4096}) {
        if (RunCase(h, batch, ctx, 1, prop.multiProcessorCount, copy_bw, rng) != 0) return 1;
      }
      if (RunCase(h, batch, 2048, 4, prop.multiProcessorCount, copy_bw, rng) != 0) return 1;
    }
    if (quick) break;
  }
  return 0;
}

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
// --chain: the latency a decode step sees instead. A CUDA graph of 36
// launches, each one's q the output of the one before (as attention
// follows attention through a model's layers) and each over its own pools
// (a layer's cache), replayed; µs per launch for the device plan merged by
// the combine kernel (splits of >= 128 keys, the default before clusters)
// and by a cluster (splits of >= 128 and of >= 64 keys).
// Usage: paged_attention_bench [--quick] [--chain]   (prints a Markdown
// table; --quick: the first heads only)
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

// One case's device data: pools cycled over `copies` copies, q and out
// (two q buffers, for the chain), metadata and the workspace for any plan.
struct Problem {
  PagedAttentionShape s;
  int copies = 1;
  std::vector<void*> kb, vb;
  void *q[2] = {nullptr, nullptr}, *table = nullptr, *lens = nullptr, *qs = nullptr, *ws = nullptr;
  size_t ws_bytes = 0, qo_bytes = 0;
  int32_t blocks_per_seq = 0;

  Problem() = default;
  Problem(const Problem&) = delete;  // it owns the device buffers
  Problem& operator=(const Problem&) = delete;
  ~Problem() {
    for (void* p : kb) cudaFree(p);
    for (void* p : vb) cudaFree(p);
    for (void* p : {q[0], q[1], table, lens, qs, ws}) cudaFree(p);
  }

  // Launches attention over pool copy `c`, q[from] -> q[1 - from].
  tandem::Status Launch(const PagedAttentionPlan& plan, PagedKernel kernel, int c, int from,
                        cudaStream_t stream) const {
    const size_t i = static_cast<size_t>(c % copies);
    return PagedAttentionCuda(s, plan, static_cast<const __nv_bfloat16*>(q[from]),
                              static_cast<const __nv_bfloat16*>(kb[i]), static_cast<const __nv_bfloat16*>(vb[i]),
                              static_cast<const int32_t*>(table), static_cast<const int32_t*>(lens),
                              static_cast<const int32_t*>(qs), static_cast<__nv_bfloat16*>(q[1 - from]), ws, ws_bytes,
                              stream, kernel);
  }
};

// Fills `p` for (heads, batch, context, new tokens); 0 on success.
int MakeProblem(const Heads& h, int32_t batch, int32_t ctx, int32_t q_len, int min_copies, std::mt19937_64& rng,
                Problem& p) {
  const int32_t bs = 16, blocks_per_seq = (ctx + bs - 1) / bs, table_width = std::max(blocks_per_seq, 4096 / bs);
  PagedAttentionShape& s = p.s;
  s.num_seqs = batch;
  s.num_tokens = batch * q_len;
  s.num_heads = h.hq;
  s.num_kv_heads = h.hkv;
  s.head_dim = h.d;
  s.num_blocks = batch * blocks_per_seq;
  s.block_size = bs;
  s.max_blocks_per_seq = table_width;
  s.scale = 1.f / std::sqrt(static_cast<float>(h.d));
  p.blocks_per_seq = blocks_per_seq;
  const size_t pool_bytes = static_cast<size_t>(s.num_blocks) * bs * h.hkv * h.d * sizeof(__nv_bfloat16);
  p.copies = std::max(min_copies, static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / pool_bytes + 1, 1, 64)));

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

  p.kb.assign(static_cast<size_t>(p.copies), nullptr);
  p.vb.assign(static_cast<size_t>(p.copies), nullptr);
  for (size_t c = 0; c < p.kb.size(); ++c) {
    TANDEM_BENCH_CUDA(cudaMalloc(&p.kb[c], pool_bytes));
    TANDEM_BENCH_CUDA(cudaMalloc(&p.vb[c], pool_bytes));
    TANDEM_BENCH_CUDA(cudaMemset(p.kb[c], 0x3c, pool_bytes));  // bf16 0x3c3c ~ 0.0115
    TANDEM_BENCH_CUDA(cudaMemset(p.vb[c], 0x3c, pool_bytes));
  }
  p.qo_bytes = static_cast<size_t>(s.num_tokens) * h.hq * h.d * sizeof(__nv_bfloat16);
  p.ws_bytes = tandem::kernels::PagedAttentionWorkspaceBytes(s, PagedAttentionPlan{tandem::kernels::kPagedMaxSplits});
  for (void*& q : p.q) {
    TANDEM_BENCH_CUDA(cudaMalloc(&q, p.qo_bytes));
    TANDEM_BENCH_CUDA(cudaMemset(q, 0x3c, p.qo_bytes));
  }
  TANDEM_BENCH_CUDA(cudaMalloc(&p.table, ids.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&p.lens, ctx_lens.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&p.qs, starts.size() * sizeof(int32_t)));
  TANDEM_BENCH_CUDA(cudaMalloc(&p.ws, std::max<size_t>(p.ws_bytes, 1)));
  TANDEM_BENCH_CUDA(cudaMemcpy(p.table, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  TANDEM_BENCH_CUDA(cudaMemcpy(p.lens, ctx_lens.data(), ctx_lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  TANDEM_BENCH_CUDA(cudaMemcpy(p.qs, starts.data(), starts.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return 0;
}

// One case; prints its table row.
int RunCase(const Heads& h, int32_t batch, int32_t ctx, int32_t q_len, int sms, double copy_bw, std::mt19937_64& rng) {
  Problem p;
  if (MakeProblem(h, batch, ctx, q_len, 1, rng, p) != 0) return 1;
  const PagedAttentionShape& s = p.s;
  const PagedAttentionPlan plan = tandem::kernels::PlanPagedAttention(s, sms);
  const PagedAttentionPlan fine_plan = tandem::kernels::PlanPagedAttention(s, sms, tandem::kernels::kPagedTileTokens);

  // Seconds per call of `kernel`, or a negative value on failure.
  auto time = [&](PagedKernel kernel, const PagedAttentionPlan& run_plan) -> double {
    for (int i = 0; i < 3; ++i) {
      const tandem::Status st = p.Launch(run_plan, kernel, i, 0, nullptr);
      if (!st.ok()) {
        std::fprintf(stderr, "paged attention: %s\n", st.ToString().c_str());
        return -1;
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    const int iters = std::max(20, p.copies);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < iters; ++i) (void)p.Launch(run_plan, kernel, i, 0, nullptr);
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
  const double table_bytes = static_cast<double>(batch) * p.blocks_per_seq * 4;  // the entries read
  const double bytes = kv + 2.0 * static_cast<double>(p.qo_bytes) + table_bytes;
  const double limit = bytes / copy_bw;
  char warps_col[32] = "—";
  if (warps_fit) std::snprintf(warps_col, sizeof(warps_col), "%.1f", warps * 1e6);
  std::printf("| %s | %d | %d | %d | %d | %.1f | %s | %.1f | %.2fx | %d | %.1f | %.2fx | %.2f | %.1f | %.1f | %.0f%% |\n",
              h.name, batch, ctx, q_len, plan.num_splits, tiles * 1e6, warps_col, mma * 1e6, tiles / t,
              fine_plan.num_splits, fine * 1e6, t / fine, bytes / 1e6, bytes / t / 1e9, limit * 1e6, 100.0 * limit / t);
  std::fflush(stdout);
  return 0;
}

// One --chain case; prints its table row.
int RunChain(const Heads& h, int32_t batch, int32_t ctx, int sms, std::mt19937_64& rng) {
  constexpr int kLayers = 36;
  Problem p;
  if (MakeProblem(h, batch, ctx, 1, kLayers, rng, p) != 0) return 1;
  cudaStream_t stream = nullptr;
  TANDEM_BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // µs per launch of a replayed graph of kLayers chained launches, or a negative value on failure.
  auto time = [&](const PagedAttentionPlan& plan) -> double {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    tandem::Status st;
    for (int i = 0; i < kLayers && st.ok(); ++i) st = p.Launch(plan, PagedKernel::kAuto, i, i % 2, stream);
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!st.ok() || end != cudaSuccess) {
      std::fprintf(stderr, "paged attention chain: %s %s\n", st.ToString().c_str(), cudaGetErrorString(end));
      return -1;
    }
    double us = -1;
    if (cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      constexpr int kReplays = 50;
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      for (int i = 0; i < 3; ++i) cudaGraphLaunch(exec, stream);
      cudaEventRecord(e0, stream);
      for (int i = 0; i < kReplays; ++i) cudaGraphLaunch(exec, stream);
      cudaEventRecord(e1, stream);
      float ms = 0;
      if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess) {
        us = ms * 1e3 / (kReplays * kLayers);
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaGraphExecDestroy(exec);
    }
    cudaGraphDestroy(graph);
    return us;
  };
  using tandem::kernels::PlanPagedAttention;
  const PagedAttentionPlan combine = PlanPagedAttention(p.s, sms);
  const PagedAttentionPlan cluster = PlanPagedAttention(p.s, sms, tandem::kernels::kPagedMinSplitTokens, true);
  const PagedAttentionPlan fine = PlanPagedAttention(p.s, sms, tandem::kernels::kPagedTileTokens, true);
  const double t_combine = time(combine), t_cluster = time(cluster), t_fine = time(fine);
  cudaStreamDestroy(stream);
  if (t_combine < 0 || t_cluster < 0 || t_fine < 0) return 1;
  std::printf("| %s | %d | %d | %d | %.2f | %d | %.2f | %d | %.2f | %.2fx |\n", h.name, batch, ctx, combine.num_splits,
              t_combine, cluster.num_splits, t_cluster, fine.num_splits, t_fine,
              t_combine / std::min(t_cluster, t_fine));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, chain = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    chain = chain || std::strcmp(argv[i], "--chain") == 0;
  }
  cudaDeviceProp prop{};
  TANDEM_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::mt19937_64 rng(1);
  const Heads heads[] = {{"16/2 x 128", 16, 2, 128},
                         {"16/8 x 128", 16, 8, 128},
                         {"32/4 x 128", 32, 4, 128},
                         {"16/8 x 64", 16, 8, 64}};
  if (chain) {
    std::printf("device: %s, %d SMs; a graph of 36 chained launches, µs per launch\n\n", prop.name,
                prop.multiProcessorCount);
    std::printf("| heads (Hq/Hkv x D) | batch | context | splits (combine) | combine µs | splits (cluster) "
                "| cluster µs | splits (cluster, 64-key min) | µs | combine / best cluster |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Heads& h : {heads[0], heads[3]}) {
      for (int32_t batch : {1, 4, 16, 64, 256}) {
        for (int32_t ctx : {512, 1024, 2048, 4096}) {
          if (RunChain(h, batch, ctx, prop.multiProcessorCount, rng) != 0) return 1;
        }
      }
    }
    return 0;
  }
  double copy_bw = 0;
  if (CopyBandwidth(&copy_bw) != 0) return 1;
  std::printf("device: %s, %d SMs; device copy bandwidth %.0f GB/s (read + write, 1 GiB cudaMemcpyAsync)\n\n",
              prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  std::printf("| heads (Hq/Hkv x D) | batch | context | new tokens | splits | tiles µs | warps µs | mma µs "
              "| auto / tiles | splits (64-key min) | auto µs (64-key min) | speed-up | MB moved | GB/s | limit µs "
              "| of limit |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
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

// Overhead of the LibTorch glue against calling the CUDA kernel directly
// (docs/kernels-torch.md, "Overhead"; figures in docs/benchmarks.md). Same
// inputs, same kernels: the glue adds argument checks, output allocation
// from the caching allocator, the plan-cache lookup and the autograd node.
// Prints one line per case: direct and glue microseconds per call (mean of
// 20 calls between CUDA events, median of 15 repetitions). Built only with
// the glue's CUDA path; run by scripts/gpu/run_torch_glue.sh.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/lm_head_loss/lm_head_loss_cuda.h"
#include "workers/ops/lm_head_loss_op.h"
#include "workers/ops/tree_attention_op.h"
#include "kernels/tree_attention/forest_builder.h"
#include "kernels/tree_attention/tree_attention_cuda.h"

namespace tg = tandem::ops;
namespace tk = tandem::kernels;

namespace {

double MicrosPerCall(const std::function<void()>& fn) {
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  for (int i = 0; i < 5; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> reps;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(a, s);
    for (int i = 0; i < 20; ++i) fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    reps.push_back(ms * 1000.0 / 20);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(reps.begin(), reps.begin() + reps.size() / 2, reps.end());
  return reps[reps.size() / 2];
}

__nv_bfloat16* Bf16(const at::Tensor& t) { return reinterpret_cast<__nv_bfloat16*>(t.data_ptr()); }

void Report(const char* name, double direct, double glue) {
  std::printf("[glue-overhead] %-44s direct %9.1f us  glue %9.1f us  overhead %+7.1f us (%+.1f%%)\n", name, direct,
              glue, glue - direct, 100.0 * (glue - direct) / direct);
}

void TreeAttentionCase(int prompt, int groups, int response, int hq, int hkv, int d) {
  std::vector<std::vector<int32_t>> seqs;
  for (int g = 0; g < groups; ++g) {
    std::vector<int32_t> s(prompt, 1);
    for (int i = 0; i < response; ++i) s.push_back(10 + g);
    seqs.push_back(s);
  }
  auto packed = tk::BuildPackedForest(seqs);
  if (!packed.ok()) return;
  auto forest = tg::TreeForest::Create(packed->forest);
  const int64_t T = forest->num_tokens();
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({T, hq, d}, opts).requires_grad_(true);
  const at::Tensor k = at::randn({T, hkv, d}, opts).requires_grad_(true);
  const at::Tensor v = at::randn({T, hkv, d}, opts).requires_grad_(true);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor out = at::empty({T, hq, d}, opts), lse = at::empty({hq, T}, opts.dtype(at::kFloat));
  tg::TreeAttention(q, k, v, forest, scale);  // uploads the plan
  const auto* plan = static_cast<const tk::TreeAttentionDevicePlan*>(forest->DevicePlan(q));
  const tk::TreeAttentionShape shape{static_cast<int32_t>(T), hq, hkv, d, static_cast<float>(scale)};
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  const double direct = MicrosPerCall([&] {
    (void)tk::TreeAttentionForwardCuda(*plan, shape, Bf16(q), Bf16(k), Bf16(v), Bf16(out), lse.data_ptr<float>(), s);
  });
  const double glue = MicrosPerCall([&] { (void)tg::TreeAttention(q, k, v, forest, scale); });
  char name[128];
  std::snprintf(name, sizeof name, "tree attention fwd T=%lld Hq=%d Hkv=%d D=%d", static_cast<long long>(T), hq, hkv,
                d);
  Report(name, direct, glue);
}

void LmHeadLossCase(int64_t n, int h, int vocab, int64_t chunk) {
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor hidden = at::randn({n, h}, opts).requires_grad_(true);
  const at::Tensor weight = at::randn({vocab, h}, opts).mul(0.02).detach().requires_grad_(true);
  const at::Tensor rows = at::empty({n}, opts.dtype(at::kInt));
  const at::Tensor labels = at::empty({n}, opts.dtype(at::kInt));
  {
    std::vector<int32_t> r(n), l(n);
    for (int64_t i = 0; i < n; ++i) r[i] = static_cast<int32_t>(i), l[i] = static_cast<int32_t>((i * 7919) % vocab);
    cudaMemcpy(rows.data_ptr(), r.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(labels.data_ptr(), l.data(), n * 4, cudaMemcpyHostToDevice);
  }
  tk::LmHeadLossShape shape{n, h, vocab, n, 1.f};
  const size_t ws_bytes = tk::LmHeadLossWorkspaceBytes(shape, chunk);
  const at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, opts.dtype(at::kByte));
  const at::Tensor lp = at::empty({n}, opts.dtype(at::kFloat)), ent = at::empty({n}, opts.dtype(at::kFloat)), lse = at::empty({n}, opts.dtype(at::kFloat));
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const double direct = MicrosPerCall([&] {
    (void)tk::LmHeadLossForwardCuda(handle, shape, Bf16(hidden), Bf16(weight), rows.data_ptr<int32_t>(),
                                    labels.data_ptr<int32_t>(), lp.data_ptr<float>(), ent.data_ptr<float>(),
                                    lse.data_ptr<float>(), ws.data_ptr(), ws_bytes, chunk, s);
  });
  const double glue = MicrosPerCall([&] { (void)tg::LmHeadLoss(hidden, weight, rows, labels, 1.0, chunk); });
  char name[128];
  std::snprintf(name, sizeof name, "lm-head loss fwd N=%lld H=%d V=%d", static_cast<long long>(n), h, vocab);
  Report(name, direct, glue);
}

}  // namespace

int main() {
  try {
    TreeAttentionCase(64, 4, 64, 4, 1, 64);       // T=320: launch-bound, the fixed cost shows
    TreeAttentionCase(2048, 8, 768, 16, 4, 128);  // T=8192
    LmHeadLossCase(256, 1024, 8192, 256);
    LmHeadLossCase(4096, 4096, 151936, 1024);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "glue_overhead_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

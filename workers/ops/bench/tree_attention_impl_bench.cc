// The tree attention implementations through the glue (tree_attention_op.h)
// on RL-shaped tries: the tree kernels (`tiles`) against FlashAttention-2's
// varlen kernel under the two forms of tree_attention_varlen.h
// (`varlen-flash`, `varlen-split-flash`). Prints one JSON line per (shape, heads,
// implementation): forward and forward+backward milliseconds (CUDA events,
// median of 15), useful TFLOP/s (4 * pairs * D * Hq for the forward), and
// the relative error of the varlen outputs and gradients against tiles.
// The flat-batch and FlexAttention baselines of the same shapes are
// scripts/gpu/tree_varlen_probe.py's, run in the same call by
// scripts/gpu/run_round4.sh. Built only with the glue's CUDA path.
#include <ATen/TensorOperators.h>
#include <ATen/ops/randn.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/tree_attention/forest.h"
#include "workers/ops/tree_attention_op.h"

namespace tg = tandem::ops;
namespace tk = tandem::kernels;

namespace {

double Millis(const std::function<void()>& fn) {
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> reps;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(a, s);
    fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    reps.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(reps.begin(), reps.begin() + reps.size() / 2, reps.end());
  return reps[reps.size() / 2];
}

// A regular trie: levels[0] = {1, P}; each segment of level i has
// levels[i+1].first children of levels[i+1].second tokens. Preorder.
tk::Forest RegularTrie(const std::vector<std::pair<int, int>>& levels) {
  tk::Forest f;
  std::function<void(size_t, int32_t)> add = [&](size_t level, int32_t parent) {
    for (int c = 0; c < levels[level].first; ++c) {
      const auto self = static_cast<int32_t>(f.segments.size());
      f.segments.push_back({f.num_tokens, levels[level].second, parent});
      f.num_tokens += levels[level].second;
      if (level + 1 < levels.size()) add(level + 1, self);
    }
  };
  add(0, -1);
  return f;
}

double RelErr(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).norm() / b.to(at::kFloat).norm().clamp_min(1e-30)).item<double>();
}

void Case(const std::string& name, const tk::Forest& f, int64_t hq, int64_t hkv, int64_t d) {
  auto forest = tg::TreeForest::Create(f);
  const int64_t T = forest->num_tokens();
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({T, hq, d}, opts).requires_grad_(true);
  const at::Tensor k = at::randn({T, hkv, d}, opts).requires_grad_(true);
  const at::Tensor v = at::randn({T, hkv, d}, opts).requires_grad_(true);
  const at::Tensor dout = at::randn({T, hq, d}, opts);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double useful = 4.0 * static_cast<double>(tk::TreePairs(f)) * static_cast<double>(d * hq);
  std::vector<at::Tensor> tiles_results;
  for (auto [impl, label] : {std::pair{tg::TreeAttentionImpl::kTiles, "tiles"},
                             std::pair{tg::TreeAttentionImpl::kVarlenFlash, "varlen-flash"},
                             std::pair{tg::TreeAttentionImpl::kVarlenSplitFlash, "varlen-split-flash"}}) {
    if (impl == tg::TreeAttentionImpl::kTiles && d != 64 && d != 128) continue;
    try {
      const at::Tensor out = tg::TreeAttention(q, k, v, forest, scale, impl);
      auto grads = torch::autograd::grad({out}, {q, k, v}, {dout});
      double err = -1;
      if (impl == tg::TreeAttentionImpl::kTiles) {
        tiles_results = {out.detach(), grads[0], grads[1], grads[2]};
      } else if (!tiles_results.empty()) {
        err = std::max({RelErr(out, tiles_results[0]), RelErr(grads[0], tiles_results[1]),
                        RelErr(grads[1], tiles_results[2]), RelErr(grads[2], tiles_results[3])});
      }
      const double fwd = Millis([&] {
        c10::NoGradGuard no_grad;
        tg::TreeAttention(q, k, v, forest, scale, impl);
      });
      const double fb = Millis([&] {
        const at::Tensor o = tg::TreeAttention(q, k, v, forest, scale, impl);
        torch::autograd::grad({o}, {q, k, v}, {dout});
      });
      std::printf("{\"shape\": \"%s\", \"tokens\": %lld, \"hq\": %lld, \"hkv\": %lld, \"d\": %lld, \"impl\": \"%s\", "
                  "\"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"bwd_over_fwd\": %.2f, "
                  "\"relerr_vs_tiles\": %.2e}\n",
                  name.c_str(), static_cast<long long>(T), static_cast<long long>(hq), static_cast<long long>(hkv),
                  static_cast<long long>(d), label, fwd, fb, useful / fwd / 1e9, (fb - fwd) / fwd, err);
    } catch (const c10::Error& e) {
      std::printf("{\"shape\": \"%s\", \"impl\": \"%s\", \"error\": \"%.200s\"}\n", name.c_str(), label,
                  e.what_without_backtrace());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  const int shapes[][3] = {{2048, 1024, 8}, {8192, 1024, 16}, {512, 4096, 4},
                           {512, 256, 4},   {2048, 4096, 16}, {8192, 256, 8}};
  for (const auto& s : shapes) {
    const std::string name = "P" + std::to_string(s[0]) + " R" + std::to_string(s[1]) + " G" + std::to_string(s[2]);
    const tk::Forest f = RegularTrie({{1, s[0]}, {s[2], s[1]}});
    Case(name, f, 32, 8, 128);
    Case(name, f, 16, 16, 64);
  }
  Case("multi P1024 8x512 4x512", RegularTrie({{1, 1024}, {8, 512}, {4, 512}}), 32, 8, 128);
  // Whole GRPO batches (many tries in one forest), at Qwen3-0.6B's heads:
  // the RL job's short answers (docs/benchmarks.md "Tree packing where it
  // pays"), the model benchmark's batch, and its flat form (every sequence a
  // root), where the two implementations have only been compared across
  // calls so far.
  Case("grpo 64x(P67 8xR128)", RegularTrie({{64, 67}, {8, 128}}), 16, 8, 128);
  Case("grpo 4x(P512 8xR512)", RegularTrie({{4, 512}, {8, 512}}), 16, 8, 128);
  Case("flat 32x1024", RegularTrie({{32, 1024}}), 16, 8, 128);
  Case("grpo 8x(P256 8xR1024)", RegularTrie({{8, 256}, {8, 1024}}), 16, 8, 128);
  Case("chain 64x3 x16", RegularTrie({{1, 512}, {16, 3}, {1, 3}, {1, 3}, {1, 3}, {1, 3}, {1, 3}, {1, 3}, {1, 3}}), 32, 8,
       128);
  return 0;
}

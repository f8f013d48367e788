// LibTorch glue for tree attention (issue #4, "Thin LibTorch glue";
// docs/kernels-torch.md; the mask model is kernels/tree_attention/forest.h).
//
// TreeForest is a packed forest prepared once: validated, its tile plan built,
// its position ids (trie depths) as a tensor, and, per CUDA device, the plan
// uploaded on first use and kept for the forest's lifetime. Build one per
// micro-batch and pass it to every layer's TreeAttention call.
//
// TreeAttention(q, k, v, forest, scale) -> out, a custom autograd function
// (gradients for q, k and v):
//   q [T, Hq, D], k and v [T, Hkv, D], out [T, Hq, D]; T = forest tokens,
//   Hq % Hkv == 0 (GQA), scale > 0 (usually 1/sqrt(D)).
//   CPU: fp32, the CPU implementation (any D). CUDA: bf16, D in {64, 128},
//   the CUDA kernels on the current stream of q's device.
//   All three on one device with one dtype; any strides (made contiguous).
// Any violation throws c10::Error naming the argument.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <mutex>

#include "kernels/tree_attention/forest.h"

namespace tandem::ops {

class TreeForest : public torch::CustomClassHolder {
 public:
  // Validates the forest and builds its plan; throws c10::Error when invalid.
  static c10::intrusive_ptr<TreeForest> Create(kernels::Forest forest);
  TreeForest();  // empty; use Create
  ~TreeForest() override;

  const kernels::Forest& forest() const { return forest_; }
  const kernels::TreeAttentionPlan& plan() const { return plan_; }
  int64_t num_tokens() const { return forest_.num_tokens; }
  // Trie depth of every token, int64 [T] on the CPU (move it where needed).
  const at::Tensor& position_ids() const { return position_ids_; }

  // The plan on a CUDA device, uploaded on first use (thread-safe); opaque
  // here so that this header needs no CUDA. Used by the glue only.
  const void* DevicePlan(const at::Tensor& like) const;

 private:
  kernels::Forest forest_;
  kernels::TreeAttentionPlan plan_;
  at::Tensor position_ids_;
  struct DeviceCache;
  mutable std::mutex mu_;
  mutable std::unique_ptr<DeviceCache> device_;
};

at::Tensor TreeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const c10::intrusive_ptr<TreeForest>& forest, double scale);

}  // namespace tandem::ops

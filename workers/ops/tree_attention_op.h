// LibTorch glue for tree attention (issue #4, "Thin LibTorch glue";
// docs/kernels-torch.md; the mask model is kernels/tree_attention/forest.h).
//
// TreeForest is a packed forest prepared once: validated, its tile plan built,
// its position ids (trie depths) as a tensor, and, per CUDA device, the plan
// uploaded on first use and kept for the forest's lifetime. Build one per
// micro-batch and pass it to every layer's TreeAttention call.
//
// TreeAttention(q, k, v, forest, scale[, impl]) -> out, a custom autograd
// function (gradients for q, k and v):
//   q [T, Hq, D], k and v [T, Hkv, D], out [T, Hq, D]; T = forest tokens,
//   Hq % Hkv == 0 (GQA), scale > 0 (usually 1/sqrt(D)).
//   CPU: fp32. CUDA: bf16, on the current stream of q's device.
//   All three on one device with one dtype; any strides (made contiguous).
// Any violation throws c10::Error naming the argument.
//
// Implementations (TreeAttentionImpl):
//   kTiles           the tree kernels over the tile plan: the CPU
//                    implementation (any D), the CUDA kernels (D in {64, 128})
//   kVarlenFlash     CUDA: every segment a block of PyTorch's FlashAttention-2
//                    varlen kernel over its gathered key path
//                    (tree_attention_varlen.h; D % 8 == 0, D <= 256)
//   kVarlenSplitFlash the same kernel on the split form (a self part and an
//                    ancestor part merged by log-sum-exp; varlen_plan.h)
//   kVarlenReference, kVarlenSplitReference
//                    the two forms with ordinary LibTorch ops, any device
//                    (the CPU path CI tests the decompositions with)
//   kDefault         kTiles, or the environment's TANDEM_TREE_ATTENTION
//                    ("tiles", "varlen-flash", "varlen-split-flash",
//                    "varlen-reference", "varlen-split-reference") for CUDA
//                    tensors; the CPU always takes kTiles by default.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/tree_attention/forest.h"

namespace tandem::ops {

enum class TreeAttentionImpl {
  kDefault,
  kTiles,
  kVarlenFlash,
  kVarlenSplitFlash,
  kVarlenReference,
  kVarlenSplitReference
};

// One chunk of a varlen plan (kernels/tree_attention/varlen_plan.h) on a
// device: cu_q and cu_k int32; q_rows and key_rows int64, undefined where
// the plan's are empty (the packed rows [q_begin, q_end) as they are).
struct VarlenChunkTensors {
  at::Tensor cu_q, cu_k, q_rows, key_rows;
  int64_t q_begin = 0, q_end = 0, max_q = 0, max_k = 0;
  bool causal = true;
};

class TreeForest : public torch::CustomClassHolder {
 public:
  // Keys gathered per varlen call at most (a longer single key path is a
  // call of its own): 256 Ki keys, 1 GiB of K and V at 8 kv heads of 128 bf16.
  static constexpr int64_t kVarlenChunkKeys = int64_t{1} << 18;

  // Validates the forest and builds its plan; throws c10::Error when invalid.
  static c10::intrusive_ptr<TreeForest> Create(kernels::Forest forest, int64_t varlen_chunk_keys = kVarlenChunkKeys);
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
  // A varlen plan's chunks on `device`, built and uploaded on first use
  // (thread-safe): the single form's, or the split form's (the self part
  // first, then the ancestor part's). Used by the varlen glue only.
  const std::vector<VarlenChunkTensors>& VarlenChunks(const at::Device& device, bool split) const;

 private:
  kernels::Forest forest_;
  kernels::TreeAttentionPlan plan_;
  at::Tensor position_ids_;
  int64_t varlen_chunk_keys_ = kVarlenChunkKeys;
  struct DeviceCache;
  mutable std::mutex mu_;
  mutable std::unique_ptr<DeviceCache> device_;
  mutable std::map<std::string, std::vector<VarlenChunkTensors>> varlen_;  // by form and device, under mu_
};

at::Tensor TreeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const c10::intrusive_ptr<TreeForest>& forest, double scale,
                         TreeAttentionImpl impl = TreeAttentionImpl::kDefault);

// What kDefault means for CUDA tensors: TANDEM_TREE_ATTENTION, read once;
// an unknown value throws c10::Error naming the variable and the values.
TreeAttentionImpl DefaultCudaTreeAttentionImpl();

}  // namespace tandem::ops

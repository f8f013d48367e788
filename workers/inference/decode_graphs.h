// Decode steps at fixed batch sizes (issue #14 item 2; docs/inference.md
// "CUDA-graph decode"): the host cost of a decode step — a few hundred
// kernel launches, each LibTorch op's dispatch — paid once at capture.
//
// For each batch size B: static device inputs (tokens, positions, block
// table [B, W], context lengths, q lengths = 1, slot mapping) and, on CUDA,
// a CUDA graph of Transformer::DecodePaged captured over them (all sizes in
// one memory pool: they never replay at once), whose logits it copies into
// one buffer shared by all sizes. A step of b <= B sequences
// with one new token each is copied in — one host-to-device copy per dtype
// from a pinned staging buffer — rows b..B-1 padded (token 0 at position 0,
// written to `pad_block`'s first slot, attending to that one entry), the
// graph replayed, and logits[:b] returned. On the CPU the same padded
// inputs run eagerly, which is what CI checks of this class.
//
// With `memory` set, the graphs' own memory (their activations, logits
// staging and cuBLAS workspace) is the `cuda_graph` tag's (graph_memory.h):
// released and resumed with it at the same addresses. The graphs read the
// weights and the KV pool at their addresses: still valid after the tagged
// memory's release and resume and after LoadWeights (in place). The
// Generator replays only while all three are present. `pad_block` must belong to no sequence (the Generator keeps the
// pool's last block for it). MoE models only with the experts on ATen's
// grouped GEMM (TANDEM_MOE_EXPERTS=grouped-mm, ops/moe_ops.h: no host
// offsets, no sync); with the kernels' experts Create refuses them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/inference/graph_memory.h"
#include "workers/inference/scheduler.h"
#include "workers/model/transformer.h"

namespace tandem::inference {

// Whether this process holds decode graphs captured outside a tagged pool:
// they hold cuBLAS's workspaces of LibTorch's memory, which
// ReturnCachedDeviceMemory must then keep (tagged_model.h).
bool AnyDecodeGraphs();

// The batch sizes a --cuda-graphs flag names: "auto" (on CUDA 1, 2, 4, 8,
// then steps of 8 to 64, of 16 to 128 and of 32 to 256, none above
// max_running; none on the CPU), "none", or a comma-separated list.
// InvalidArgument naming the bad entry.
StatusOr<std::vector<int64_t>> DecodeGraphBatches(std::string_view spec, bool cuda, int64_t max_running);

// The address space a `cuda_graph` tag reserves for the graphs (only what
// they take is mapped: TaggedModelOptions::cuda_graph_bytes).
inline constexpr int64_t kGraphTagReserve = 32ll << 30;

struct DecodeGraphOptions {
  std::vector<int64_t> batch_sizes;  // ascending after Create; each > 0
  int32_t max_blocks_per_seq = 0;    // W: ceil(max_model_len / block_size)
  int32_t pad_block = 0;
  // A grow tag of it (graph_memory.h) holds the graphs' memory (CUDA); null:
  // LibTorch's own graph pool, which no release gives back.
  memory::TaggedMemory* memory = nullptr;
  std::string tag = "cuda_graph";
};

class DecodeGraphs {
 public:
  // OK when Create can serve `config`; else why not (an MoE layer).
  static Status Supports(const model::ModelConfig& config);
  // Captures every size (CUDA). InvalidArgument for bad options or an MoE
  // model; Internal when a capture fails (the Generator then decodes eagerly).
  static StatusOr<std::unique_ptr<DecodeGraphs>> Create(std::shared_ptr<const model::Transformer> model,
                                                        std::vector<at::Tensor> key_blocks,
                                                        std::vector<at::Tensor> value_blocks,
                                                        DecodeGraphOptions options);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // One new token per row, at most the largest size, a block table no wider than W.
  bool Fits(const StepPlan& plan) const;
  // The logits [rows, V] fp32 of `plan` (Fits), on the model's device.
  at::Tensor Run(const StepPlan& plan);

  const std::vector<int64_t>& batch_sizes() const { return options_.batch_sizes; }
  // Device bytes the graphs' pool took at capture (0 on the CPU).
  int64_t captured_bytes() const { return captured_bytes_; }
  // Whether that pool is options.memory's tag, and the bytes it took there
  // (LibTorch's allocator counts them among its reserved bytes too).
  bool in_tag() const { return graph_memory_ != nullptr; }
  int64_t tag_bytes() const { return graph_memory_ ? static_cast<int64_t>(graph_memory_->bytes()) : 0; }

  struct Bucket;

 private:
  DecodeGraphs(std::shared_ptr<const model::Transformer> model, std::vector<at::Tensor> key_blocks,
               std::vector<at::Tensor> value_blocks, DecodeGraphOptions options);
  // Writes `plan` (b rows) padded to `bucket`'s size into its staging buffers
  // and copies them to its device inputs.
  void Load(Bucket& bucket, const StepPlan* plan);
  at::Tensor Eager(Bucket& bucket) const;

  const std::shared_ptr<const model::Transformer> model_;
  const std::vector<at::Tensor> key_blocks_, value_blocks_;
  DecodeGraphOptions options_;
  std::unique_ptr<GraphMemory> graph_memory_;     // outlives the graphs (declared before them)
  std::vector<std::unique_ptr<Bucket>> buckets_;  // by batch_sizes
  at::Tensor logits_;  // [largest size, V] fp32: every graph's output (CUDA)
  int64_t captured_bytes_ = 0;
  bool captured_ = false;
};

}  // namespace tandem::inference

// The CUDA implementations a worker process may pick for the glue ops, by
// name (docs/kernels-torch.md "Picking an implementation"): the values of
// TANDEM_TREE_ATTENTION, TANDEM_MOE_EXPERTS, TANDEM_DECODE_GEMV,
// TANDEM_PAGED_ATTENTION and TANDEM_PAGED_SPLITS, which tandem-worker's
// --tree-attention, --moe-experts, --decode-gemv, --paged-attention and
// --paged-splits set for the process (a
// task's environment is tandem's, so a job spec picks them through the
// worker's args). The first name of each is the default. LibTorch-free: the worker's
// main parses the flags against these lists.
#pragma once

#include <array>
#include <string_view>

namespace tandem::ops {

inline constexpr const char* kTreeAttentionVar = "TANDEM_TREE_ATTENTION";
// In TreeAttentionImpl's order (tree_attention_op.h), kTiles first.
inline constexpr std::array<std::string_view, 5> kTreeAttentionChoices = {
    "tiles", "varlen-flash", "varlen-split-flash", "varlen-reference", "varlen-split-reference"};

inline constexpr const char* kMoeExpertsVar = "TANDEM_MOE_EXPERTS";
// kGroupedMm, kKernels (moe_ops.h): grouped-mm first since the decode steps
// of a MoE model run in CUDA graphs with it (docs/benchmarks.md).
inline constexpr std::array<std::string_view, 2> kMoeExpertsChoices = {"grouped-mm", "kernels"};

inline constexpr const char* kDecodeGemvVar = "TANDEM_DECODE_GEMV";
// Whether ops::NormLinear / DecodeLinear run the decode GEMV kernel where it
// is faster (kernels::DecodeGemvPays) as a dependent launch (on) or an
// ordinary one (serial), or the norm, cuBLAS and SwiGLU they replace (off).
inline constexpr std::array<std::string_view, 3> kDecodeGemvChoices = {"on", "off", "serial"};

inline constexpr const char* kPagedAttentionVar = "TANDEM_PAGED_ATTENTION";
// kernels::PagedKernel: auto (the warps kernel for decode steps of at most 4
// rows per kv head, the mma kernel otherwise; docs/benchmarks.md "Paged
// decode attention"), or the tiles or the mma kernel everywhere.
inline constexpr std::array<std::string_view, 3> kPagedAttentionChoices = {"auto", "tiles", "mma"};

inline constexpr const char* kPagedSplitsVar = "TANDEM_PAGED_SPLITS";
// How paged attention's key splits merge (kernels::PagedAttentionPlan): by
// a combine kernel, up to 64 splits of at least 128 keys (combine), or
// inside a thread-block cluster, at most 8 splits of at least 64 keys, the
// old keys loaded before the kernel before ends (cluster; where the call
// has at most 16 rows per kv head and the kernel is not the tiles one,
// else as combine). combine stays the default until cluster has been
// measured on the GPU (docs/inference.md "Splits merged in a cluster").
inline constexpr std::array<std::string_view, 2> kPagedSplitsChoices = {"combine", "cluster"};

}  // namespace tandem::ops

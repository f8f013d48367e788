// Paged attention on CUDA, host side (paged_attention_cuda.h): argument
// checks, the workspace layout, the launch arguments.
#include "kernels/paged_attention/paged_attention_cuda.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/common/cuda_status.h"
#include "kernels/paged_attention/paged_attention_launch.h"

namespace tandem::kernels {
namespace {

size_t Align256(size_t n) { return (n + 255) & ~size_t{255}; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status CheckPointers(std::initializer_list<const void*> ptrs, const char* what) {
  for (const void* p : ptrs) {
    if (p == nullptr) return InvalidArgument(std::string(what) + ": null pointer");
    if (!Aligned16(p)) return InvalidArgument(std::string(what) + ": pointers must be 16-byte aligned");
  }
  return Status::Ok();
}

int Log2(int32_t v) {
  int l = 0;
  while ((int32_t{1} << l) < v) ++l;
  return l;
}

}  // namespace

StatusOr<int> CurrentDeviceSmCount() {
  int dev = 0, sms = 0;
  TANDEM_RETURN_IF_ERROR(Cuda(cudaGetDevice(&dev), "cudaGetDevice"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count"));
  return sms;
}

size_t PagedAttentionWorkspaceBytes(const PagedAttentionShape& s, const PagedAttentionPlan& plan) {
  if (plan.num_splits <= 1 || plan.cluster) return 0;
  const size_t rows = static_cast<size_t>(s.num_tokens) * static_cast<size_t>(s.num_heads) *
                      static_cast<size_t>(plan.num_splits);
  return Align256(sizeof(float) * rows * static_cast<size_t>(s.head_dim)) + Align256(sizeof(float) * rows);
}

int64_t PagedMaxRows(const PagedAttentionShape& s) {
  return (int64_t{s.num_tokens} - s.num_seqs + 1) * (s.num_heads / s.num_kv_heads);
}

bool PagedWarpsFit(const PagedAttentionShape& s) { return PagedMaxRows(s) <= detail::kPagedWarpsMaxRows; }

bool PagedClusterFits(const PagedAttentionShape& s) { return PagedMaxRows(s) <= detail::kPagedClusterMaxRows; }

Status PagedAttentionCuda(const PagedAttentionShape& s, const PagedAttentionPlan& plan, const __nv_bfloat16* q,
                          const __nv_bfloat16* key_blocks, const __nv_bfloat16* value_blocks,
                          const int32_t* block_table, const int32_t* context_lens, const int32_t* q_starts,
                          __nv_bfloat16* out, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                          PagedKernel kernel) {
  constexpr const char* kWhat = "paged attention (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionShape(s), kWhat);
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionPlan(plan), kWhat);
  if (s.head_dim != 64 && s.head_dim != 128) {
    return InvalidArgument(std::string(kWhat) + ": head_dim must be 64 or 128, got " + std::to_string(s.head_dim));
  }
  if (s.num_seqs > 65535) {
    return InvalidArgument(std::string(kWhat) + ": at most 65535 sequences per call, got " +
                           std::to_string(s.num_seqs));
  }
  TANDEM_RETURN_IF_ERROR(CheckPointers({q, key_blocks, value_blocks, out}, kWhat));
  if (block_table == nullptr || context_lens == nullptr || q_starts == nullptr) {
    return InvalidArgument(std::string(kWhat) + ": null metadata");
  }
  const bool cluster = plan.cluster && plan.num_splits > 1;
  if (cluster && (kernel == PagedKernel::kTiles || !PagedClusterFits(s))) {
    return InvalidArgument(std::string(kWhat) + ": a clustered plan runs the warps or mma kernel, with at most " +
                           std::to_string(detail::kPagedClusterMaxRows) + " rows per kv head; this call has up to " +
                           std::to_string(PagedMaxRows(s)) +
                           (kernel == PagedKernel::kTiles ? ", on the tiles kernel" : ""));
  }
  detail::PagedAttnArgs a;
  a.cluster = cluster;
  if (plan.num_splits > 1 && !cluster) {
    const size_t need = PagedAttentionWorkspaceBytes(s, plan);
    if (workspace == nullptr || workspace_bytes < need) {
      return InvalidArgument(std::string(kWhat) + ": workspace of " + std::to_string(workspace_bytes) +
                             " bytes, needs " + std::to_string(need));
    }
    const size_t rows = static_cast<size_t>(s.num_tokens) * static_cast<size_t>(s.num_heads) *
                        static_cast<size_t>(plan.num_splits);
    a.part_o = static_cast<float*>(workspace);
    a.part_lse = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                          Align256(sizeof(float) * rows * static_cast<size_t>(s.head_dim)));
  }
  a.q = q;
  a.key_blocks = key_blocks;
  a.value_blocks = value_blocks;
  a.block_table = block_table;
  a.context_lens = context_lens;
  a.q_starts = q_starts;
  a.out = out;
  a.B = s.num_seqs;
  a.T = s.num_tokens;
  a.Hq = s.num_heads;
  a.Hkv = s.num_kv_heads;
  a.D = s.head_dim;
  a.num_blocks = s.num_blocks;
  a.block_size_log2 = Log2(s.block_size);
  a.max_blocks_per_seq = s.max_blocks_per_seq;
  a.capacity = s.capacity();
  a.num_splits = plan.num_splits;
  a.min_split_tokens = plan.min_split_tokens;
  a.scale_log2 = s.scale * 1.4426950408889634f;  // log2(e)
  const int64_t max_rows = PagedMaxRows(s);
  a.max_rows = static_cast<int32_t>(std::min<int64_t>(max_rows, INT32_MAX));
  const bool warps_fit = PagedWarpsFit(s);
  if (kernel == PagedKernel::kWarps && !warps_fit) {
    return InvalidArgument(std::string(kWhat) + ": the warps kernel holds at most " +
                           std::to_string(detail::kPagedWarpsMaxRows) + " rows per kv head, this call has up to " +
                           std::to_string(max_rows));
  }
  detail::PagedImpl impl = detail::PagedImpl::kTiles;
  if (kernel == PagedKernel::kWarps || (kernel == PagedKernel::kAuto && warps_fit)) impl = detail::PagedImpl::kWarps;
  if (kernel == PagedKernel::kMma || (kernel == PagedKernel::kAuto && !warps_fit)) impl = detail::PagedImpl::kMma;
  return Cuda(detail::LaunchPagedAttention(a, impl, stream), "paged attention launch");
}

Status PagedKvWriteCuda(const PagedKvWriteShape& s, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const int64_t* slot_mapping, __nv_bfloat16* key_blocks, __nv_bfloat16* value_blocks,
                        cudaStream_t stream) {
  constexpr const char* kWhat = "paged kv write (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckPagedKvWriteShape(s), kWhat);
  const int64_t row = int64_t{s.num_kv_heads} * s.head_dim;
  if (row % 8 != 0 || row > INT32_MAX) {
    return InvalidArgument(std::string(kWhat) + ": Hkv * D must be a multiple of 8, got " + std::to_string(row));
  }
  if (s.num_tokens == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers({k, v, key_blocks, value_blocks}, kWhat));
  if (slot_mapping == nullptr) return InvalidArgument(std::string(kWhat) + ": null slot_mapping");
  return Cuda(detail::LaunchPagedKvWrite(s.num_tokens, static_cast<int32_t>(row), s.num_slots, k, v, slot_mapping,
                                         key_blocks, value_blocks, stream),
              "paged kv write launch");
}

}  // namespace tandem::kernels

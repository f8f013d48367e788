// Tree attention on CUDA: argument checks, plan upload and dispatch to the
// kernel variants (tree_attention_cuda.h). Host code only; the kernels are in
// tree_attention_simple.cu, tree_attention.cu, tree_attention_fwd_wide.cu,
// tree_attention_bwd.cu and tree_attention_bwd_fused.cu.
#include "kernels/tree_attention/tree_attention_cuda.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/cuda_status.h"
#include "kernels/tree_attention/tree_attention_launch.h"

namespace tandem::kernels {
namespace {

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

Status CheckArgs(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& shape,
                 std::initializer_list<const void*> tensors) {
  TANDEM_RETURN_IF_ERROR(CheckTreeAttentionShape(shape));
  if (shape.head_dim != 64 && shape.head_dim != 128) {
    return InvalidArgument("tree attention (cuda): head_dim must be 64 or 128, got " + std::to_string(shape.head_dim));
  }
  if (plan.num_tokens != shape.num_tokens) {
    return InvalidArgument("tree attention (cuda): plan has " + std::to_string(plan.num_tokens) +
                           " tokens, shape has " + std::to_string(shape.num_tokens));
  }
  if (shape.num_tokens > 0 && (plan.kend == nullptr || plan.q_ptr == nullptr || plan.kv_ranges == nullptr ||
                               plan.k_ptr == nullptr || plan.q_ranges == nullptr || plan.tile_kend_min == nullptr)) {
    return InvalidArgument("tree attention (cuda): plan has null arrays");
  }
  for (const void* p : tensors) {
    if (p == nullptr) return InvalidArgument("tree attention (cuda): null tensor");
    if (!Aligned16(p)) return InvalidArgument("tree attention (cuda): tensors must be 16-byte aligned");
  }
  return Status::Ok();
}

detail::TreeAttnArgs MakeArgs(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& s) {
  detail::TreeAttnArgs a{};
  a.kend = plan.kend;
  a.q_ptr = plan.q_ptr;
  a.kv_ranges = plan.kv_ranges;
  a.k_ptr = plan.k_ptr;
  a.q_ranges = plan.q_ranges;
  a.tile_kend_min = plan.tile_kend_min;
  a.num_tiles = plan.num_tiles;
  a.T = s.num_tokens;
  a.Hq = s.num_q_heads;
  a.Hkv = s.num_kv_heads;
  a.D = s.head_dim;
  a.scale = s.scale;
  return a;
}

}  // namespace

TreeAttentionPlanBuffer::TreeAttentionPlanBuffer(TreeAttentionPlanBuffer&& o) noexcept
    : mem_(std::exchange(o.mem_, nullptr)), view_(o.view_) {}
TreeAttentionPlanBuffer& TreeAttentionPlanBuffer::operator=(TreeAttentionPlanBuffer&& o) noexcept {
  if (this != &o) {
    if (mem_ != nullptr) cudaFree(mem_);
    mem_ = std::exchange(o.mem_, nullptr);
    view_ = o.view_;
  }
  return *this;
}
TreeAttentionPlanBuffer::~TreeAttentionPlanBuffer() {
  if (mem_ != nullptr) cudaFree(mem_);
}

StatusOr<TreeAttentionPlanBuffer> TreeAttentionPlanBuffer::Upload(const TreeAttentionPlan& plan,
                                                                  cudaStream_t stream) {
  const std::vector<const std::vector<int32_t>*> parts = {&plan.kend,  &plan.q_ptr,    &plan.kv_ranges,
                                                          &plan.k_ptr, &plan.q_ranges, &plan.tile_kend_min};
  size_t total = 0;
  for (const auto* p : parts) total += p->size();
  std::vector<int32_t> host;
  host.reserve(total);
  for (const auto* p : parts) host.insert(host.end(), p->begin(), p->end());
  TreeAttentionPlanBuffer buf;
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMalloc(&buf.mem_, std::max<size_t>(1, total) * sizeof(int32_t)), "cudaMalloc plan"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(buf.mem_, host.data(), total * sizeof(int32_t),
                                                    cudaMemcpyHostToDevice, stream),
                                    "copy plan"));
  TANDEM_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream), "copy plan"));
  const int32_t* d = static_cast<const int32_t*>(buf.mem_);
  const int32_t* ptrs[6];
  for (size_t i = 0; i < parts.size(); ++i) {
    ptrs[i] = d;
    d += parts[i]->size();
  }
  buf.view_ = TreeAttentionDevicePlan{ptrs[0], ptrs[1], ptrs[2],        ptrs[3],
                                      ptrs[4], ptrs[5], plan.num_tokens, plan.num_tiles};
  return buf;
}

size_t TreeAttentionBackwardWorkspaceFloats(const TreeAttentionShape& shape) {
  const size_t tiles = (static_cast<size_t>(shape.num_tokens) + kTreeTile - 1) / kTreeTile;
  return static_cast<size_t>(shape.num_q_heads) * (static_cast<size_t>(shape.num_tokens) * shape.head_dim + tiles);
}

Status TreeAttentionForwardCuda(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& shape,
                                const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                __nv_bfloat16* out, float* lse, cudaStream_t stream, TreeAttentionKernel kernel) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(plan, shape, {q, k, v, out, lse}), "tree attention forward");
  if (shape.num_tokens == 0) return Status::Ok();
  detail::TreeAttnArgs a = MakeArgs(plan, shape);
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = out;
  a.lse = lse;
  const cudaError_t e = kernel == TreeAttentionKernel::kSimple       ? detail::LaunchForwardSimple(a, stream)
                        : kernel == TreeAttentionKernel::kTensorCore ? detail::LaunchForwardTensorCore(a, stream)
                        : kernel == TreeAttentionKernel::kTensorCoreWide ? detail::LaunchForwardTensorCoreWide(a, stream)
                        : kernel == TreeAttentionKernel::kTensorCoreWideLazy ||
                                kernel == TreeAttentionKernel::kTensorCoreFusedBwd ||
                                kernel == TreeAttentionKernel::kTensorCoreFusedBwdOrdered ||
                                kernel == TreeAttentionKernel::kTensorCoreFusedBwdWide
                            ? detail::LaunchForwardTensorCoreWideLazy(a, stream)
                                                                         : detail::LaunchForwardTensorCoreOverlapV(a, stream);
  return Cuda(e, "tree attention forward launch");
}

Status TreeAttentionBackwardCuda(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& shape,
                                 const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                 const __nv_bfloat16* out, const __nv_bfloat16* dout, const float* lse, float* delta,
                                 __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream,
                                 TreeAttentionKernel kernel, float* dq_accum) {
  TANDEM_RETURN_IF_ERROR(CheckArgs(plan, shape, {q, k, v, out, dout, lse, delta, dq, dk, dv}),
                         "tree attention backward");
  if (dq_accum != nullptr && !Aligned16(dq_accum)) {
    return InvalidArgument("tree attention backward (cuda): dq_accum must be 16-byte aligned");
  }
  if (shape.num_tokens == 0) return Status::Ok();
  detail::TreeAttnArgs a = MakeArgs(plan, shape);
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.dout = dout;
  a.lse_in = lse;
  a.delta = delta;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  if (kernel == TreeAttentionKernel::kTensorCoreFusedBwd || kernel == TreeAttentionKernel::kTensorCoreFusedBwdOrdered ||
      kernel == TreeAttentionKernel::kTensorCoreFusedBwdWide) {
    const bool ordered = kernel == TreeAttentionKernel::kTensorCoreFusedBwdOrdered;
    const bool wide = kernel == TreeAttentionKernel::kTensorCoreFusedBwdWide;
    auto launch = [&](float* ws) {
      return wide ? detail::LaunchBackwardTensorCoreFusedWide(a, ws, stream)
                  : detail::LaunchBackwardTensorCoreFused(a, ws, ordered, stream);
    };
    if (dq_accum != nullptr) return Cuda(launch(dq_accum), "tree attention backward launch");
    const size_t bytes = TreeAttentionBackwardWorkspaceFloats(shape) * sizeof(float);
    void* ws = nullptr;
    TANDEM_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&ws, bytes, stream), "tree attention backward: dq workspace"));
    const Status launched = Cuda(launch(static_cast<float*>(ws)), "tree attention backward launch");
    const Status freed = Cuda(cudaFreeAsync(ws, stream), "tree attention backward: free dq workspace");
    return launched.ok() ? freed : launched;
  }
  const cudaError_t e = kernel == TreeAttentionKernel::kSimple ? detail::LaunchBackwardSimple(a, stream)
                                                               : detail::LaunchBackwardTensorCore(a, stream);
  return Cuda(e, "tree attention backward launch");
}

}  // namespace tandem::kernels

// Paged attention glue: argument checks and the dispatch to the kernels' CPU
// implementation or CUDA launchers (paged_attention_op.h). No autograd.
// IValue complete before the other ATen headers: clang 14 in C++20 rejects them alone.
#include <ATen/core/ivalue.h>

#include "workers/ops/paged_attention_op.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "kernels/paged_attention/paged_attention.h"
#include "workers/ops/glue_common.h"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <iterator>

#include "kernels/paged_attention/paged_attention_cuda.h"
#include "workers/ops/env_choice.h"
#include "workers/ops/kernel_choices.h"
#endif

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)

namespace {

constexpr const char* kAttn = "PagedAttention";
constexpr const char* kWrite = "PagedKvWrite";

// The two pools: one shape [N, block_size, Hkv, D], `dtype`, contiguous, on `device`.
void CheckPools(const at::Tensor& key_blocks, const at::Tensor& value_blocks, at::ScalarType dtype,
                const at::Device& device, const char* fn) {
  CheckTensor(key_blocks, fn, "key_blocks", 4, dtype, device.type());
  CheckTensor(value_blocks, fn, "value_blocks", 4, dtype, device.type());
  TORCH_CHECK(key_blocks.device() == device && value_blocks.device() == device, fn, ": the pools must be on ",
              device);
  TORCH_CHECK(value_blocks.sizes() == key_blocks.sizes(), fn, ": value_blocks ", value_blocks.sizes(),
              " must match key_blocks ", key_blocks.sizes());
  TORCH_CHECK(key_blocks.is_contiguous() && value_blocks.is_contiguous(), fn, ": the pools must be contiguous");
}

#ifdef TANDEM_TORCH_CUDA
// The kernel TANDEM_PAGED_ATTENTION picks (kernel_choices.h), read once a process.
PagedKernel Kernel() {
  constexpr PagedKernel kByChoice[] = {PagedKernel::kAuto, PagedKernel::kTiles, PagedKernel::kMma};
  static_assert(std::size(kByChoice) == kPagedAttentionChoices.size(), "one kernel per choice, in its order");
  static const PagedKernel k = kByChoice[EnvChoice(kPagedAttentionVar, kPagedAttentionChoices)];
  return k;
}

// The split plan for `s` on this device: merged in a cluster where
// TANDEM_PAGED_SPLITS allows it and the call fits one (kernel_choices.h),
// else by the combine kernel.
PagedAttentionPlan Plan(const PagedAttentionShape& s) {
  static const bool cluster_chosen =
      kPagedSplitsChoices[EnvChoice(kPagedSplitsVar, kPagedSplitsChoices)] == "cluster";
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (cluster_chosen && Kernel() != PagedKernel::kTiles && PagedClusterFits(s)) {
    return PlanPagedAttention(s, sms, kPagedTileTokens, /*cluster=*/true);
  }
  return PlanPagedAttention(s, sms);
}
#endif

at::Tensor Metadata(const at::Tensor& t, const char* name, int64_t dim, const at::Device& device) {
  CheckTensor(t, kAttn, name, dim, at::kInt, device.type());
  TORCH_CHECK(t.device() == device, kAttn, ": ", name, " must be on ", device, ", got ", t.device());
  return t.contiguous();
}

}  // namespace

at::Tensor PagedAttention(const at::Tensor& q_in, const at::Tensor& key_blocks, const at::Tensor& value_blocks,
                          const at::Tensor& block_table_in, const at::Tensor& context_lens_in,
                          const at::Tensor& q_starts_in, double scale) {
  const at::ScalarType dtype = KernelDtype(q_in, kAttn);
  const at::Device device = q_in.device();
  CheckTensor(q_in, kAttn, "q", 3, dtype, device.type());
  CheckPools(key_blocks, value_blocks, dtype, device, kAttn);
  TORCH_CHECK(key_blocks.size(3) == q_in.size(2), kAttn, ": q is [T, Hq, ", q_in.size(2), "] but the pools are [N, ",
              "block_size, Hkv, ", key_blocks.size(3), "]");
  const at::Tensor block_table = Metadata(block_table_in, "block_table", 2, device);
  const at::Tensor context_lens = Metadata(context_lens_in, "context_lens", 1, device);
  const at::Tensor q_starts = Metadata(q_starts_in, "q_starts", 1, device);
  const int64_t batch = context_lens.size(0);
  TORCH_CHECK(block_table.size(0) == batch && q_starts.size(0) == batch + 1, kAttn, ": block_table ",
              block_table.sizes(), " and context_lens ", context_lens.sizes(), " must have B rows and q_starts ",
              q_starts.sizes(), " B + 1");
  PagedAttentionShape s;
  s.num_seqs = CheckedInt32(batch, kAttn, "B");
  s.num_tokens = CheckedInt32(q_in.size(0), kAttn, "T");
  s.num_heads = CheckedInt32(q_in.size(1), kAttn, "Hq");
  s.num_kv_heads = CheckedInt32(key_blocks.size(2), kAttn, "Hkv");
  s.head_dim = CheckedInt32(q_in.size(2), kAttn, "D");
  s.num_blocks = CheckedInt32(key_blocks.size(0), kAttn, "num_blocks");
  s.block_size = CheckedInt32(key_blocks.size(1), kAttn, "block_size");
  s.max_blocks_per_seq = CheckedInt32(block_table.size(1), kAttn, "max_blocks_per_seq");
  s.scale = static_cast<float>(scale);
  ThrowIfError(CheckPagedAttentionShape(s), kAttn);
  const at::Tensor q = q_in.contiguous();
  at::Tensor out = NewOutput(q.sizes(), q.options());
  if (device.is_cpu()) {
    ThrowIfError(PagedAttentionCpu(s, SingleSplitPlan(), q.data_ptr<float>(), key_blocks.data_ptr<float>(),
                                   value_blocks.data_ptr<float>(), block_table.data_ptr<int32_t>(),
                                   context_lens.data_ptr<int32_t>(), q_starts.data_ptr<int32_t>(),
                                   out.data_ptr<float>()),
                 kAttn);
    return out;
  }
#ifdef TANDEM_TORCH_CUDA
  c10::cuda::CUDAGuard guard(device);
  const PagedAttentionPlan plan = Plan(s);
  const size_t ws_bytes = PagedAttentionWorkspaceBytes(s, plan);
  const at::Tensor ws =
      at::empty({static_cast<int64_t>(std::max<size_t>(ws_bytes, 1))}, q.options().dtype(at::kByte));
  ThrowIfError(PagedAttentionCuda(s, plan, Bf16(q), Bf16(key_blocks), Bf16(value_blocks),
                                  block_table.data_ptr<int32_t>(), context_lens.data_ptr<int32_t>(),
                                  q_starts.data_ptr<int32_t>(), Bf16(out), ws.data_ptr(), ws_bytes,
                                  CurrentStream(), Kernel()),
               kAttn);
#endif
  return out;
}

at::Tensor QueryStarts(const at::Tensor& q_lens) {
  TORCH_CHECK(q_lens.defined() && q_lens.dim() == 1 && q_lens.scalar_type() == at::kInt,
              "QueryStarts: q_lens must be int32 [B]");
  return at::cat({at::zeros({1}, q_lens.options()), at::cumsum(q_lens, 0, at::kInt)});  // on the device: no host sync
}

void PagedKvWrite(const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& key_blocks,
                  const at::Tensor& value_blocks, const at::Tensor& slot_mapping_in) {
  const at::ScalarType dtype = KernelDtype(key_blocks, kWrite);
  const at::Device device = key_blocks.device();
  CheckPools(key_blocks, value_blocks, dtype, device, kWrite);
  CheckTensor(k_in, kWrite, "k", 3, dtype, device.type());
  CheckTensor(v_in, kWrite, "v", 3, dtype, device.type());
  CheckTensor(slot_mapping_in, kWrite, "slot_mapping", 1, at::kLong, device.type());
  TORCH_CHECK(k_in.device() == device && v_in.device() == device && slot_mapping_in.device() == device, kWrite,
              ": k, v and slot_mapping must be on ", device);
  TORCH_CHECK(k_in.size(1) == key_blocks.size(2) && k_in.size(2) == key_blocks.size(3) && v_in.sizes() == k_in.sizes(),
              kWrite, ": k and v must be [T, ", key_blocks.size(2), ", ", key_blocks.size(3), "], got ", k_in.sizes(),
              " and ", v_in.sizes());
  TORCH_CHECK(slot_mapping_in.size(0) == k_in.size(0), kWrite, ": slot_mapping has ", slot_mapping_in.size(0),
              " entries for ", k_in.size(0), " tokens");
  PagedKvWriteShape s;
  s.num_tokens = CheckedInt32(k_in.size(0), kWrite, "T");
  s.num_kv_heads = CheckedInt32(k_in.size(1), kWrite, "Hkv");
  s.head_dim = CheckedInt32(k_in.size(2), kWrite, "D");
  s.num_slots = key_blocks.size(0) * key_blocks.size(1);
  ThrowIfError(CheckPagedKvWriteShape(s), kWrite);
  const at::Tensor k = k_in.contiguous(), v = v_in.contiguous(), slots = slot_mapping_in.contiguous();
  if (device.is_cpu()) {
    ThrowIfError(PagedKvWriteCpu(s, k.data_ptr<float>(), v.data_ptr<float>(), slots.data_ptr<int64_t>(),
                                 key_blocks.data_ptr<float>(), value_blocks.data_ptr<float>()),
                 kWrite);
    return;
  }
#ifdef TANDEM_TORCH_CUDA
  c10::cuda::CUDAGuard guard(device);
  ThrowIfError(PagedKvWriteCuda(s, Bf16(k), Bf16(v), slots.data_ptr<int64_t>(), Bf16(key_blocks),
                                Bf16(value_blocks), CurrentStream()),
               kWrite);
#endif
}

}  // namespace tandem::ops

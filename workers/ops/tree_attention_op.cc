// Tree attention glue: the TreeForest cache and the autograd function
// (tree_attention_op.h; docs/kernels-torch.md).
#include "workers/ops/tree_attention_op.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "workers/ops/env_choice.h"
#include "workers/ops/kernel_choices.h"
#include "workers/ops/glue_common.h"
#include "workers/ops/tree_attention_varlen.h"
#include "kernels/tree_attention/tree_attention.h"
#include "kernels/tree_attention/varlen_plan.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/tree_attention/tree_attention_cuda.h"
#endif

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)

namespace {
constexpr const char* kFn = "TreeAttention";
}  // namespace

#ifdef TANDEM_TORCH_CUDA
struct TreeForest::DeviceCache {
  std::map<int, TreeAttentionPlanBuffer> per_device;
};
#else
struct TreeForest::DeviceCache {};
#endif

TreeForest::TreeForest() = default;
TreeForest::~TreeForest() = default;

c10::intrusive_ptr<TreeForest> TreeForest::Create(Forest forest, int64_t varlen_chunk_keys) {
  ThrowIfError(ValidateForest(forest), "TreeForest::Create");
  TORCH_CHECK(varlen_chunk_keys >= 1 && varlen_chunk_keys <= INT32_MAX,
              "TreeForest::Create: varlen_chunk_keys must be in [1, 2^31), got ", varlen_chunk_keys);
  auto f = c10::make_intrusive<TreeForest>();
  f->varlen_chunk_keys_ = varlen_chunk_keys;
  f->plan_ = ValueOrThrow(BuildTreeAttentionPlan(forest), "TreeForest::Create");
  const std::vector<int32_t> pos = PositionIds(forest);
  f->position_ids_ = at::empty({static_cast<int64_t>(pos.size())}, at::TensorOptions().dtype(at::kLong));
  int64_t* p = f->position_ids_.data_ptr<int64_t>();
  for (size_t i = 0; i < pos.size(); ++i) p[i] = pos[i];
  f->forest_ = std::move(forest);
  return f;
}

const void* TreeForest::DevicePlan([[maybe_unused]] const at::Tensor& like) const {
#ifdef TANDEM_TORCH_CUDA
  TORCH_CHECK(like.device().is_cuda(), kFn, ": DevicePlan needs a CUDA tensor");
  std::lock_guard<std::mutex> lock(mu_);
  if (!device_) device_ = std::make_unique<DeviceCache>();
  const int index = like.device().index();
  auto it = device_->per_device.find(index);
  if (it == device_->per_device.end()) {
    c10::cuda::CUDAGuard guard(like.device());
    auto buf = ValueOrThrow(TreeAttentionPlanBuffer::Upload(plan_, c10::cuda::getCurrentCUDAStream(index).stream()),
                            "TreeForest: upload plan");
    it = device_->per_device.emplace(index, std::move(buf)).first;
  }
  return &it->second.view();
#else
  TORCH_CHECK(false, kFn, ": this build has no CUDA path");
  return nullptr;
#endif
}

const std::vector<VarlenChunkTensors>& TreeForest::VarlenChunks(const at::Device& device, bool split) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = (split ? "split:" : "single:") + device.str();
  auto it = varlen_.find(key);
  if (it != varlen_.end()) return it->second;
  std::vector<VarlenChunk> plan;
  if (split) {
    VarlenSplitPlan p = ValueOrThrow(BuildVarlenSplitPlan(forest_, varlen_chunk_keys_), "TreeForest: varlen plan");
    plan.push_back(std::move(p.self));
    for (VarlenChunk& c : p.ancestors) plan.push_back(std::move(c));
  } else {
    plan = ValueOrThrow(BuildVarlenTreePlan(forest_, varlen_chunk_keys_), "TreeForest: varlen plan").chunks;
  }
  auto upload = [&](const std::vector<int32_t>& v, at::ScalarType type) {
    at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kInt));
    std::copy(v.begin(), v.end(), t.data_ptr<int32_t>());
    return t.to(device, type);
  };
  // Row indices (int64, for index_select); none: the rows as they are.
  auto rows = [&](const std::vector<int32_t>& v) { return v.empty() ? at::Tensor() : upload(v, at::kLong); };
  std::vector<VarlenChunkTensors> chunks;
  for (const VarlenChunk& c : plan) {
    chunks.push_back({upload(c.cu_q, at::kInt), upload(c.cu_k, at::kInt), rows(c.q_rows), rows(c.key_rows), c.q_begin,
                      c.q_end, c.max_q, c.max_k, c.causal});
  }
  return varlen_.emplace(key, std::move(chunks)).first->second;
}

namespace {

struct ForestCapsule : torch::CustomClassHolder {
  explicit ForestCapsule(c10::intrusive_ptr<TreeForest> f) : forest(std::move(f)) {}
  c10::intrusive_ptr<TreeForest> forest;
};

TreeAttentionShape CheckArgs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TreeForest& forest,
                             double scale) {
  const at::ScalarType dtype = KernelDtype(q, kFn);
  const c10::DeviceType dev = q.device().type();
  CheckTensor(q, kFn, "q", 3, dtype, dev);
  CheckTensor(k, kFn, "k", 3, dtype, dev);
  CheckTensor(v, kFn, "v", 3, dtype, dev);
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), kFn, ": q, k, v must be on one device");
  TORCH_CHECK(q.size(0) == forest.num_tokens(), kFn, ": q has ", q.size(0), " tokens, the forest ",
              forest.num_tokens());
  TORCH_CHECK(k.sizes() == v.sizes(), kFn, ": k and v must have one shape, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(k.size(0) == q.size(0), kFn, ": k has ", k.size(0), " tokens, q ", q.size(0));
  TORCH_CHECK(k.size(2) == q.size(2), kFn, ": head dims differ: q ", q.size(2), ", k ", k.size(2));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, kFn, ": q heads (", q.size(1),
              ") must be a multiple of kv heads (", k.size(1), ")");
  TreeAttentionShape shape;
  shape.num_tokens = CheckedInt32(q.size(0), kFn, "tokens");
  shape.num_q_heads = CheckedInt32(q.size(1), kFn, "q heads");
  shape.num_kv_heads = CheckedInt32(k.size(1), kFn, "kv heads");
  shape.head_dim = CheckedInt32(q.size(2), kFn, "head dim");
  shape.scale = static_cast<float>(scale);
  ThrowIfError(CheckTreeAttentionShape(shape), kFn);
  return shape;
}

class TreeAttentionFunction : public torch::autograd::Function<TreeAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const c10::intrusive_ptr<TreeForest>& forest, double scale) {
    const TreeAttentionShape shape = CheckArgs(q_in, k_in, v_in, *forest, scale);
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    at::Tensor out = NewOutput(q.sizes(), q.options());
    at::Tensor lse = NewOutput({shape.num_q_heads, shape.num_tokens}, q.options().dtype(at::kFloat));
    if (q.device().is_cpu()) {
      ThrowIfError(TreeAttentionForwardCpu(forest->plan(), shape, q.data_ptr<float>(), k.data_ptr<float>(),
                                           v.data_ptr<float>(), out.data_ptr<float>(), lse.data_ptr<float>()),
                   kFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(q.device());
      const auto* plan = static_cast<const TreeAttentionDevicePlan*>(forest->DevicePlan(q));
      ThrowIfError(TreeAttentionForwardCuda(*plan, shape, Bf16(q), Bf16(k), Bf16(v), Bf16(out),
                                            lse.data_ptr<float>(), CurrentStream()),
                   kFn);
#endif
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["forest"] = c10::IValue::make_capsule(c10::make_intrusive<ForestCapsule>(forest));
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto capsule = ctx->saved_data["forest"].toCapsule();
    const TreeForest& forest = *static_cast<ForestCapsule*>(capsule.get())->forest;
    const TreeAttentionShape shape = CheckArgs(q, k, v, forest, ctx->saved_data["scale"].toDouble());
    TORCH_CHECK(grads[0].defined(), kFn, ": backward without an output gradient");
    const at::Tensor dout = grads[0].to(q.scalar_type()).contiguous();
    at::Tensor dq = NewOutput(q.sizes(), q.options());
    at::Tensor dk = NewOutput(k.sizes(), k.options());
    at::Tensor dv = NewOutput(v.sizes(), v.options());
    if (q.device().is_cpu()) {
      ThrowIfError(TreeAttentionBackwardCpu(forest.plan(), shape, q.data_ptr<float>(), k.data_ptr<float>(),
                                            v.data_ptr<float>(), out.data_ptr<float>(), lse.data_ptr<float>(),
                                            dout.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                                            dv.data_ptr<float>()),
                   kFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(q.device());
      const auto* plan = static_cast<const TreeAttentionDevicePlan*>(forest.DevicePlan(q));
      at::Tensor delta = at::empty({shape.num_q_heads, shape.num_tokens}, q.options().dtype(at::kFloat));
      ThrowIfError(TreeAttentionBackwardCuda(*plan, shape, Bf16(q), Bf16(k), Bf16(v), Bf16(out), Bf16(dout),
                                             lse.data_ptr<float>(), delta.data_ptr<float>(), Bf16(dq), Bf16(dk),
                                             Bf16(dv), CurrentStream()),
                   kFn);
#endif
    }
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

TreeAttentionImpl DefaultCudaTreeAttentionImpl() {
  static const TreeAttentionImpl kChoices[] = {TreeAttentionImpl::kTiles, TreeAttentionImpl::kVarlenFlash,
                                               TreeAttentionImpl::kVarlenSplitFlash, TreeAttentionImpl::kVarlenReference,
                                               TreeAttentionImpl::kVarlenSplitReference};
  static_assert(std::size(kChoices) == kTreeAttentionChoices.size());
  static const TreeAttentionImpl impl = kChoices[EnvChoice(kTreeAttentionVar, kTreeAttentionChoices)];
  return impl;
}

at::Tensor TreeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const c10::intrusive_ptr<TreeForest>& forest, double scale, TreeAttentionImpl impl) {
  TORCH_CHECK(forest, kFn, ": forest is null");
  TORCH_CHECK(std::isfinite(scale) && scale > 0, kFn, ": scale must be finite and > 0, got ", scale);
  const TreeAttentionShape shape = CheckArgs(q, k, v, *forest, scale);
  if (impl == TreeAttentionImpl::kDefault)
    impl = q.device().is_cuda() ? DefaultCudaTreeAttentionImpl() : TreeAttentionImpl::kTiles;
  const bool split = impl == TreeAttentionImpl::kVarlenSplitFlash || impl == TreeAttentionImpl::kVarlenSplitReference;
  switch (impl) {
    case TreeAttentionImpl::kVarlenFlash:
    case TreeAttentionImpl::kVarlenSplitFlash:  // the flash kernel checks device, dtype and head dim
      return TreeAttentionVarlen(q, k, v, forest, scale, DenseVarlenKernel::kFlash, split);
    case TreeAttentionImpl::kVarlenReference:
    case TreeAttentionImpl::kVarlenSplitReference:
      return TreeAttentionVarlen(q, k, v, forest, scale, DenseVarlenKernel::kReference, split);
    default:
      TORCH_CHECK(!q.device().is_cuda() || shape.head_dim == 64 || shape.head_dim == 128, kFn,
                  ": the CUDA tree kernels need head dim 64 or 128, got ", shape.head_dim,
                  " (varlen-flash takes multiples of 8 up to 256)");
      return TreeAttentionFunction::apply(q, k, v, forest, scale);
  }
}

}  // namespace tandem::ops

// MoE glue: router, permutation plan, permute, expert FFN and unpermute as
// custom autograd functions dispatching by device (moe_ops.h).
#include "workers/ops/moe_ops.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "workers/ops/aten_call.h"
#include "workers/ops/env_choice.h"
#include "workers/ops/kernel_choices.h"
#include "workers/ops/fused_ops.h"
#include "workers/ops/glue_common.h"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/moe/moe_cuda.h"
#endif

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

template <typename T>
std::vector<T> ToVector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

at::Tensor FromVector(const std::vector<int32_t>& v, const at::TensorOptions& options) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, options.dtype(at::kInt));
  if (!v.empty()) std::memcpy(t.data_ptr<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

at::Tensor FromVector(const std::vector<float>& v, at::IntArrayRef sizes) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kFloat));
  if (!v.empty()) std::memcpy(t.data_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

// The activations/weights dtype of the device (fp32 CPU, bf16 CUDA).
void CheckActivation(const at::Tensor& t, const char* fn, const char* name, int64_t dim, const at::Tensor& like) {
  CheckTensor(t, fn, name, dim, KernelDtype(like, fn), like.device().type());
  TORCH_CHECK(t.device() == like.device(), fn, ": ", name, " must be on ", like.device(), ", got ", t.device());
}

void CheckPlan(const MoePermutation& p, const at::Tensor& like, const char* fn) {
  TORCH_CHECK(p.offsets.defined() && p.perm_pos.defined() && p.perm_src.defined(), fn,
              ": the permutation plan is empty (use MoePermutePlan)");
  TORCH_CHECK(p.perm_pos.device() == like.device(), fn, ": the plan is on ", p.perm_pos.device(), ", the data on ",
              like.device());
  TORCH_CHECK(p.offsets.numel() == p.experts + 1, fn, ": plan offsets size");
  TORCH_CHECK(p.host_offsets.empty() || static_cast<int64_t>(p.host_offsets.size()) == p.experts + 1, fn,
              ": plan host_offsets size");
}

// Permute, unpermute and the router do not use `inter`; the CUDA row
// kernels still check it (multiple of 8), so they get this placeholder.
constexpr int64_t kUnusedInter = 8;

MoeShape Shape(int64_t tokens, int64_t hidden, int64_t inter, int64_t experts, int64_t top_k, const char* fn) {
  MoeShape s;
  s.tokens = tokens;
  s.hidden = CheckedInt32(hidden, fn, "hidden");
  s.inter = CheckedInt32(inter, fn, "inter");
  s.experts = CheckedInt32(experts, fn, "experts");
  s.top_k = CheckedInt32(top_k, fn, "top_k");
  ThrowIfError(CheckMoeShape(s), fn);
  return s;
}

// ---------------------------------------------------------------- router
constexpr const char* kRoute = "MoeRoute";

class RouterFunction : public torch::autograd::Function<RouterFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits_in, int64_t top_k, RouterScore score,
                               bool renormalize) {
    CheckTensor(logits_in, kRoute, "logits", 2, at::kFloat, logits_in.device().type());
    KernelDtype(logits_in, kRoute);  // the device check
    MoeShape s = Shape(logits_in.size(0), 1, 1, logits_in.size(1), top_k, kRoute);
    s.score = score;
    s.renormalize = renormalize;
    const at::Tensor logits = logits_in.contiguous();
    const int64_t T = s.tokens, E = s.experts, K = s.top_k;
    at::Tensor scores, idx, weight, counts, score_sum;
    if (logits.device().is_cpu()) {
      RouterOutput r = ValueOrThrow(MoeRouterCpu(s, logits.data_ptr<float>()), kRoute);
      scores = FromVector(r.scores, {T, E});
      weight = FromVector(r.topk_weight, {T, K});
      score_sum = FromVector(r.score_sum, {E});
      idx = FromVector(r.topk_idx, at::TensorOptions()).view({T, K});
      counts = FromVector(r.counts, at::TensorOptions());
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(logits.device());
      const auto f32 = logits.options();
      scores = NewOutput({T, E}, f32);
      weight = NewOutput({T, K}, f32);
      score_sum = NewOutput({E}, f32);
      idx = at::empty({T, K}, f32.dtype(at::kInt));
      counts = at::empty({E}, f32.dtype(at::kInt));
      ThrowIfError(MoeRouterCuda(s, logits.data_ptr<float>(), scores.data_ptr<float>(), idx.data_ptr<int32_t>(),
                                 weight.data_ptr<float>(), counts.data_ptr<int32_t>(), score_sum.data_ptr<float>(),
                                 CurrentStream()),
                   kRoute);
#endif
    }
    ctx->mark_non_differentiable({idx, scores, counts});
    ctx->save_for_backward({scores, idx, weight});
    ctx->saved_data["top_k"] = top_k;
    ctx->saved_data["sigmoid"] = score == RouterScore::kSigmoid;
    ctx->saved_data["renormalize"] = renormalize;
    return {weight, score_sum, idx, scores, counts};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &scores = saved[0], &idx = saved[1], &weight = saved[2];
    MoeShape s = Shape(scores.size(0), 1, 1, scores.size(1), ctx->saved_data["top_k"].toInt(), kRoute);
    s.score = ctx->saved_data["sigmoid"].toBool() ? RouterScore::kSigmoid : RouterScore::kSoftmax;
    s.renormalize = ctx->saved_data["renormalize"].toBool();
    at::Tensor gw = grads[0].defined() ? grads[0].to(at::kFloat).contiguous()
                                       : at::zeros(weight.sizes(), weight.options());
    at::Tensor gss = grads[1].defined() ? grads[1].to(at::kFloat).contiguous() : at::Tensor();
    at::Tensor glogits = NewOutput(scores.sizes(), scores.options());
    if (scores.device().is_cpu()) {
      RouterOutput r;
      r.scores = ToVector<float>(scores);
      r.topk_idx = ToVector<int32_t>(idx);
      r.topk_weight = ToVector<float>(weight);
      ThrowIfError(MoeRouterBackwardCpu(s, r, gw.data_ptr<float>(), gss.defined() ? gss.data_ptr<float>() : nullptr,
                                        glogits.data_ptr<float>()),
                   kRoute);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(scores.device());
      ThrowIfError(MoeRouterBackwardCuda(s, scores.data_ptr<float>(), idx.data_ptr<int32_t>(), weight.data_ptr<float>(),
                                         gw.data_ptr<float>(), gss.defined() ? gss.data_ptr<float>() : nullptr,
                                         glogits.data_ptr<float>(), CurrentStream()),
                   kRoute);
#endif
    }
    return {glogits, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---------------------------------------------------------------- permute
constexpr const char* kPermute = "MoePermute";

void SavePlan(AutogradContext* ctx, const MoePermutation& p) {
  ctx->saved_data["tokens"] = p.tokens;
  ctx->saved_data["top_k"] = p.top_k;
  ctx->saved_data["experts"] = p.experts;
  ctx->saved_data["perm_pos"] = p.perm_pos;
  ctx->saved_data["perm_src"] = p.perm_src;
  ctx->saved_data["offsets"] = std::vector<int64_t>(p.host_offsets.begin(), p.host_offsets.end());
}

MoePermutation LoadPlan(AutogradContext* ctx) {
  MoePermutation p;
  p.tokens = ctx->saved_data["tokens"].toInt();
  p.top_k = ctx->saved_data["top_k"].toInt();
  p.experts = ctx->saved_data["experts"].toInt();
  p.perm_pos = ctx->saved_data["perm_pos"].toTensor();
  p.perm_src = ctx->saved_data["perm_src"].toTensor();
  for (int64_t o : ctx->saved_data["offsets"].toIntVector()) p.host_offsets.push_back(static_cast<int32_t>(o));
  return p;
}

class PermuteFunction : public torch::autograd::Function<PermuteFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const MoePermutation& p) {
    CheckActivation(x_in, kPermute, "x", 2, x_in);
    CheckPlan(p, x_in, kPermute);
    TORCH_CHECK(x_in.size(0) == p.tokens, kPermute, ": x has ", x_in.size(0), " rows, the plan ", p.tokens, " tokens");
    const MoeShape s = Shape(p.tokens, x_in.size(1), kUnusedInter, p.experts, p.top_k, kPermute);
    const at::Tensor x = x_in.contiguous();
    const int64_t rows = p.tokens * p.top_k, H = s.hidden;
    at::Tensor xp = NewOutput({rows, H}, x.options());
    if (x.device().is_cpu()) {
      ThrowIfError(MoePermuteRowsCpu(s, x.data_ptr<float>(), p.perm_src.data_ptr<int32_t>(), xp.data_ptr<float>()),
                   kPermute);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(x.device());
      ThrowIfError(MoePermuteRowsCuda(s, Bf16(x), p.perm_src.data_ptr<int32_t>(), Bf16(xp), CurrentStream()), kPermute);
#endif
    }
    SavePlan(ctx, p);
    ctx->saved_data["hidden"] = H;
    return xp;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const MoePermutation p = LoadPlan(ctx);
    const int64_t H = ctx->saved_data["hidden"].toInt();
    const MoeShape s = Shape(p.tokens, H, kUnusedInter, p.experts, p.top_k, kPermute);
    const at::Tensor dxp = grads[0].contiguous();
    at::Tensor dx = NewOutput({p.tokens, H}, dxp.options());
    if (dxp.device().is_cpu()) {
      ThrowIfError(
          MoePermuteRowsBackwardCpu(s, dxp.data_ptr<float>(), p.perm_pos.data_ptr<int32_t>(), dx.data_ptr<float>()),
          kPermute);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(dxp.device());
      ThrowIfError(MoePermuteRowsBackwardCuda(s, Bf16(dxp), p.perm_pos.data_ptr<int32_t>(), Bf16(dx), CurrentStream()),
                   kPermute);
#endif
    }
    return {dx, at::Tensor()};
  }
};

// ---------------------------------------------------------------- experts
constexpr const char* kFfn = "MoeExpertsFfn";

// The experts' arguments, for both implementations.
void CheckExperts(const at::Tensor& xp, const at::Tensor& wgu, const at::Tensor& wd, const MoePermutation& p) {
  CheckActivation(xp, kFfn, "xp", 2, xp);
  CheckActivation(wgu, kFfn, "w_gate_up", 3, xp);
  CheckActivation(wd, kFfn, "w_down", 3, xp);
  CheckPlan(p, xp, kFfn);
  const int64_t rows = p.tokens * p.top_k, E = p.experts, H = xp.size(1), I = wd.size(1);
  TORCH_CHECK(xp.size(0) == rows, kFfn, ": xp has ", xp.size(0), " rows, the plan ", rows);
  TORCH_CHECK(wgu.sizes() == at::IntArrayRef({E, H, 2 * I}), kFfn, ": w_gate_up must be [E, H, 2I] = [", E, ", ", H,
              ", ", 2 * I, "], got ", wgu.sizes());
  TORCH_CHECK(wd.sizes() == at::IntArrayRef({E, I, H}), kFfn, ": w_down must be [E, I, H] = [", E, ", ", I, ", ", H,
              "], got ", wd.sizes());
}

class ExpertsFunction : public torch::autograd::Function<ExpertsFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& xp_in, const at::Tensor& wgu_in,
                            const at::Tensor& wd_in, const MoePermutation& p) {
    CheckExperts(xp_in, wgu_in, wd_in, p);
    TORCH_CHECK(!p.host_offsets.empty(), kFfn,
                ": the kernels' experts need the plan's host offsets (MoePermutePlan with host_offsets, or "
                "MoeExpertsImpl::kGroupedMm)");
    const int64_t rows = p.tokens * p.top_k, E = p.experts, H = xp_in.size(1), I = wd_in.size(1);
    // The rows are already grouped: one "token" per row, k = 1.
    const MoeShape s = Shape(rows, H, I, E, 1, kFfn);
    const at::Tensor xp = xp_in.contiguous(), wgu = wgu_in.contiguous(), wd = wd_in.contiguous();
    at::Tensor yp = NewOutput({rows, H}, xp.options());
    if (xp.device().is_cpu()) {
      const PermutePlan ident = IdentityPlan(p);
      const std::vector<float> ones(rows, 1.f);
      ThrowIfError(MoeExpertsForwardCpu(s, ident, xp.data_ptr<float>(), wgu.data_ptr<float>(), wd.data_ptr<float>(),
                                        ones.data(), yp.data_ptr<float>()),
                   kFfn);
      ctx->save_for_backward({xp, wgu, wd});
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(xp.device());
      at::Tensor gu = at::empty({rows, 2 * I}, xp.options());
      at::Tensor act = at::empty({rows, I}, xp.options());
      ThrowIfError(MoeExpertsForwardCuda(at::cuda::getCurrentCUDABlasHandle(), s, p.host_offsets, Bf16(xp), Bf16(wgu),
                                         Bf16(wd), Bf16(gu), Bf16(act), Bf16(yp), CurrentStream()),
                   kFfn);
      ctx->save_for_backward({xp, wgu, wd, gu, act});
#endif
    }
    SavePlan(ctx, p);
    return yp;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const MoePermutation p = LoadPlan(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &xp = saved[0], &wgu = saved[1], &wd = saved[2];
    const int64_t rows = xp.size(0), E = p.experts, H = xp.size(1), I = wd.size(1);
    const MoeShape s = Shape(rows, H, I, E, 1, kFfn);
    const at::Tensor dyp = grads[0].to(xp.scalar_type()).contiguous();
    at::Tensor dxp = NewOutput({rows, H}, xp.options());
    at::Tensor dwgu = NewOutput({E, H, 2 * I}, xp.options().dtype(at::kFloat));
    at::Tensor dwd = NewOutput({E, I, H}, xp.options().dtype(at::kFloat));
    if (xp.device().is_cpu()) {
      const PermutePlan ident = IdentityPlan(p);
      const std::vector<float> ones(rows, 1.f);
      std::vector<float> dweight(rows);
      ThrowIfError(MoeExpertsBackwardCpu(s, ident, xp.data_ptr<float>(), wgu.data_ptr<float>(), wd.data_ptr<float>(),
                                         ones.data(), dyp.data_ptr<float>(), dxp.data_ptr<float>(),
                                         dwgu.data_ptr<float>(), dwd.data_ptr<float>(), dweight.data()),
                   kFfn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(xp.device());
      const at::Tensor &gu = saved[3], &act = saved[4];
      at::Tensor dgu = at::empty({rows, 2 * I}, xp.options());
      at::Tensor dact = at::empty({rows, I}, xp.options());
      ThrowIfError(MoeExpertsBackwardCuda(at::cuda::getCurrentCUDABlasHandle(), s, p.host_offsets, Bf16(xp),
                                          Bf16(wgu), Bf16(wd), Bf16(gu), Bf16(act), Bf16(dyp), Bf16(dxp),
                                          dwgu.data_ptr<float>(), dwd.data_ptr<float>(), Bf16(dgu), Bf16(dact),
                                          CurrentStream()),
                   kFfn);
#endif
    }
    return {dxp, dwgu.to(wgu.scalar_type()), dwd.to(wd.scalar_type()), at::Tensor()};
  }

 private:
  // The CPU implementation takes a whole layer after routing; over rows
  // already grouped by expert it is the identity permutation with k = 1.
  static PermutePlan IdentityPlan(const MoePermutation& p) {
    PermutePlan ident;
    ident.offsets = p.host_offsets;
    ident.perm_pos.resize(p.tokens * p.top_k);
    std::iota(ident.perm_pos.begin(), ident.perm_pos.end(), 0);
    ident.perm_src = ident.perm_pos;
    return ident;
  }
};

// The experts on ATen's grouped GEMM (MoeExpertsImpl::kGroupedMm): rows
// xp [R, K] grouped by the plan times w [E, K, N] -> [R, N]. On CUDA,
// aten::_grouped_mm over the plan's device offsets (their ends: offsets[1:]),
// called by name (LibTorch 1.13 has no such operator); on the CPU one
// at::mm per expert over the host offsets, the reference it is tested by.
at::Tensor GroupedMm(const at::Tensor& xp, const at::Tensor& w, const MoePermutation& p) {
  if (xp.device().is_cpu()) {
    std::vector<at::Tensor> parts;
    parts.reserve(p.experts);
    for (int64_t e = 0; e < p.experts; ++e) {
      const int64_t first = p.host_offsets[e], rows = p.host_offsets[e + 1] - first;
      parts.push_back(at::mm(xp.narrow(0, first, rows), w.select(0, e)));
    }
    return at::cat(parts);
  }
  TORCH_CHECK(HasOp("aten::_grouped_mm", ""), kFfn,
              ": MoeExpertsImpl::kGroupedMm needs aten::_grouped_mm, which this LibTorch does not have");
  return CallOp("aten::_grouped_mm", "", {{"self", xp}, {"mat2", w}, {"offs", p.offsets.narrow(0, 1, p.experts)}})[0]
      .toTensor();
}

at::Tensor GroupedMmExperts(const at::Tensor& xp, const MoePermutation& p, const at::Tensor& wgu,
                            const at::Tensor& wd) {
  CheckExperts(xp, wgu, wd, p);
  TORCH_CHECK(!xp.device().is_cpu() || !p.host_offsets.empty(), kFfn, ": the CPU plan has no host offsets");
  const int64_t I = wd.size(1);
  const at::Tensor gu = GroupedMm(xp.contiguous(), wgu, p);
  return GroupedMm(Swiglu(gu.narrow(1, 0, I), gu.narrow(1, I, I)), wd, p);
}

// ---------------------------------------------------------------- unpermute
constexpr const char* kUnpermute = "MoeUnpermute";

class UnpermuteFunction : public torch::autograd::Function<UnpermuteFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& yp_in, const at::Tensor& w_in,
                            const MoePermutation& p) {
    CheckActivation(yp_in, kUnpermute, "yp", 2, yp_in);
    CheckTensor(w_in, kUnpermute, "topk_weight", 2, at::kFloat, yp_in.device().type());
    CheckPlan(p, yp_in, kUnpermute);
    TORCH_CHECK(yp_in.size(0) == p.tokens * p.top_k, kUnpermute, ": yp has ", yp_in.size(0), " rows, the plan ",
                p.tokens * p.top_k);
    TORCH_CHECK(w_in.size(0) == p.tokens && w_in.size(1) == p.top_k, kUnpermute, ": topk_weight must be [T, k] = [",
                p.tokens, ", ", p.top_k, "], got ", w_in.sizes());
    const MoeShape s = Shape(p.tokens, yp_in.size(1), kUnusedInter, p.experts, p.top_k, kUnpermute);
    const at::Tensor yp = yp_in.contiguous(), w = w_in.contiguous();
    at::Tensor out = NewOutput({p.tokens, s.hidden}, yp.options());
    if (yp.device().is_cpu()) {
      ThrowIfError(MoeUnpermuteCpu(s, yp.data_ptr<float>(), w.data_ptr<float>(), p.perm_pos.data_ptr<int32_t>(),
                                   out.data_ptr<float>()),
                   kUnpermute);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(yp.device());
      ThrowIfError(MoeUnpermuteCuda(s, Bf16(yp), w.data_ptr<float>(), p.perm_pos.data_ptr<int32_t>(), Bf16(out),
                                    CurrentStream()),
                   kUnpermute);
#endif
    }
    ctx->save_for_backward({yp, w});
    SavePlan(ctx, p);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const MoePermutation p = LoadPlan(ctx);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &yp = saved[0], &w = saved[1];
    const MoeShape s = Shape(p.tokens, yp.size(1), kUnusedInter, p.experts, p.top_k, kUnpermute);
    const at::Tensor dout = grads[0].to(yp.scalar_type()).contiguous();
    at::Tensor dyp = NewOutput(yp.sizes(), yp.options());
    at::Tensor dw = NewOutput(w.sizes(), w.options());
    if (yp.device().is_cpu()) {
      ThrowIfError(MoeUnpermuteBackwardCpu(s, dout.data_ptr<float>(), yp.data_ptr<float>(), w.data_ptr<float>(),
                                           p.perm_pos.data_ptr<int32_t>(), dyp.data_ptr<float>(), dw.data_ptr<float>()),
                   kUnpermute);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(yp.device());
      ThrowIfError(MoeUnpermuteBackwardCuda(s, Bf16(dout), Bf16(yp), w.data_ptr<float>(),
                                            p.perm_pos.data_ptr<int32_t>(), Bf16(dyp), dw.data_ptr<float>(),
                                            CurrentStream()),
                   kUnpermute);
#endif
    }
    return {dyp, dw, at::Tensor()};
  }
};

}  // namespace

MoeRouting MoeRoute(const at::Tensor& logits, int64_t top_k, RouterScore score, bool renormalize) {
  variable_list out = RouterFunction::apply(logits, top_k, score, renormalize);
  return MoeRouting{out[0], out[2], out[3], out[4], out[1]};
}

MoePermutation MoePermutePlan(const at::Tensor& topk_idx_in, int64_t num_experts, bool host_offsets) {
  constexpr const char* kFn = "MoePermutePlan";
  KernelDtype(topk_idx_in, kFn);  // the device check
  CheckTensor(topk_idx_in, kFn, "topk_idx", 2, at::kInt, topk_idx_in.device().type());
  const MoeShape s = Shape(topk_idx_in.size(0), 1, 1, num_experts, topk_idx_in.size(1), kFn);
  const at::Tensor idx = topk_idx_in.contiguous();
  MoePermutation p;
  p.tokens = s.tokens;
  p.top_k = s.top_k;
  p.experts = s.experts;
  (void)host_offsets;  // CPU plans always have them; only the CUDA path reads it
  if (idx.device().is_cpu()) {
    PermutePlan plan = ValueOrThrow(MoePermutePlanCpu(s, idx.data_ptr<int32_t>()), kFn);
    p.offsets = FromVector(plan.offsets, at::TensorOptions());
    p.perm_pos = FromVector(plan.perm_pos, at::TensorOptions());
    p.perm_src = FromVector(plan.perm_src, at::TensorOptions());
    p.host_offsets = std::move(plan.offsets);
  } else {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(idx.device());
    const auto i32 = idx.options();
    p.offsets = at::empty({s.experts + 1}, i32);
    p.perm_pos = at::empty({s.tokens * s.top_k}, i32);
    p.perm_src = at::empty({s.tokens * s.top_k}, i32);
    const size_t ws_bytes = MoePermuteWorkspaceBytes(s);
    at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, i32.dtype(at::kByte));
    ThrowIfError(MoePermutePlanCuda(s, idx.data_ptr<int32_t>(), p.offsets.data_ptr<int32_t>(),
                                    p.perm_pos.data_ptr<int32_t>(), p.perm_src.data_ptr<int32_t>(), ws.data_ptr(),
                                    ws_bytes, CurrentStream()),
                 kFn);
    if (host_offsets)
      p.host_offsets = ValueOrThrow(MoeOffsetsToHost(s, p.offsets.data_ptr<int32_t>(), CurrentStream()), kFn);
#endif
  }
  return p;
}

at::Tensor MoePermute(const at::Tensor& x, const MoePermutation& plan) { return PermuteFunction::apply(x, plan); }

MoeExpertsImpl DefaultMoeExpertsImpl(const at::Device& device) {
  // Unset: grouped-mm where this LibTorch has aten::_grouped_mm (PyTorch
  // >= 2.8), else our kernels. Named: that one (grouped-mm without the op
  // fails naming it).
  static const MoeExpertsImpl cuda = [] {
    const bool named = std::getenv(kMoeExpertsVar) != nullptr && *std::getenv(kMoeExpertsVar) != '\0';
    if (EnvChoice(kMoeExpertsVar, kMoeExpertsChoices) != 0) return MoeExpertsImpl::kKernels;
    return named || HasOp("aten::_grouped_mm", "") ? MoeExpertsImpl::kGroupedMm : MoeExpertsImpl::kKernels;
  }();
  return device.is_cuda() ? cuda : MoeExpertsImpl::kKernels;
}

at::Tensor MoeExpertsFfn(const at::Tensor& xp, const MoePermutation& plan, const at::Tensor& w_gate_up,
                         const at::Tensor& w_down, MoeExpertsImpl impl) {
  if (impl == MoeExpertsImpl::kDefault) impl = DefaultMoeExpertsImpl(xp.device());
  if (impl == MoeExpertsImpl::kGroupedMm) return GroupedMmExperts(xp, plan, w_gate_up, w_down);
  return ExpertsFunction::apply(xp, w_gate_up, w_down, plan);
}

at::Tensor MoeUnpermute(const at::Tensor& yp, const at::Tensor& topk_weight, const MoePermutation& plan) {
  return UnpermuteFunction::apply(yp, topk_weight, plan);
}

}  // namespace tandem::ops

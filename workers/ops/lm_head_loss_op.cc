// LM-head loss glue: the autograd function dispatching by device
// (lm_head_loss_op.h).
#include "workers/ops/lm_head_loss_op.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "kernels/lm_head_loss/lm_head_loss.h"
#include "workers/ops/glue_common.h"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/lm_head_loss/lm_head_loss_cuda.h"
#endif

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

constexpr const char* kFn = "LmHeadLoss";

at::Tensor PairIndex(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.defined(), kFn, ": ", name, " is undefined");
  TORCH_CHECK(t.dim() == 1, kFn, ": ", name, " must have 1 dimension, got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, kFn, ": ", name,
              " must be int32 or int64, got ", t.scalar_type());
  TORCH_CHECK(t.device() == like.device(), kFn, ": ", name, " must be on ", like.device(), ", got ", t.device());
  return t.to(at::kInt).contiguous();
}

LmHeadLossShape CheckArgs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& rows,
                          const at::Tensor& labels, double temperature, int64_t chunk_rows) {
  const at::ScalarType dtype = KernelDtype(hidden, kFn);
  CheckTensor(hidden, kFn, "hidden", 2, dtype, hidden.device().type());
  CheckTensor(weight, kFn, "weight", 2, dtype, hidden.device().type());
  TORCH_CHECK(weight.device() == hidden.device(), kFn, ": weight must be on ", hidden.device());
  TORCH_CHECK(weight.size(1) == hidden.size(1), kFn, ": hidden is [N, ", hidden.size(1), "] but weight is [V, ",
              weight.size(1), "]");
  TORCH_CHECK(rows.numel() == labels.numel(), kFn, ": rows (", rows.numel(), ") and labels (", labels.numel(),
              ") must have one length");
  TORCH_CHECK(chunk_rows > 0, kFn, ": chunk_rows must be > 0, got ", chunk_rows);
  LmHeadLossShape s;
  s.num_rows = hidden.size(0);
  s.hidden = CheckedInt32(hidden.size(1), kFn, "hidden size");
  s.vocab = CheckedInt32(weight.size(0), kFn, "vocab");
  s.num_pairs = rows.numel();
  s.temperature = static_cast<float>(temperature);
  ThrowIfError(CheckLmHeadLossShape(s), kFn);
  return s;
}

class LmHeadLossFunction : public torch::autograd::Function<LmHeadLossFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden_in, const at::Tensor& weight_in,
                               const at::Tensor& rows_in, const at::Tensor& labels_in, double temperature,
                               int64_t chunk_rows) {
    const at::Tensor rows = PairIndex(rows_in, hidden_in, "rows"), labels = PairIndex(labels_in, hidden_in, "labels");
    const LmHeadLossShape s = CheckArgs(hidden_in, weight_in, rows, labels, temperature, chunk_rows);
    const at::Tensor hidden = hidden_in.contiguous(), weight = weight_in.contiguous();
    const auto f32 = hidden.options().dtype(at::kFloat);
    at::Tensor logprob = NewOutput({s.num_pairs}, f32);
    at::Tensor entropy = NewOutput({s.num_rows}, f32);
    at::Tensor lse = NewOutput({s.num_rows}, f32);
    if (hidden.device().is_cpu()) {
      ThrowIfError(CheckLmHeadLossPairs(s, rows.data_ptr<int32_t>(), labels.data_ptr<int32_t>()), kFn);
      ThrowIfError(LmHeadLossForwardCpu(s, hidden.data_ptr<float>(), weight.data_ptr<float>(), rows.data_ptr<int32_t>(),
                                        labels.data_ptr<int32_t>(), logprob.data_ptr<float>(),
                                        entropy.data_ptr<float>(), lse.data_ptr<float>()),
                   kFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(hidden.device());
      const size_t ws_bytes = LmHeadLossWorkspaceBytes(s, chunk_rows);
      at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, hidden.options().dtype(at::kByte));
      ThrowIfError(LmHeadLossForwardCuda(at::cuda::getCurrentCUDABlasHandle(), s, Bf16(hidden), Bf16(weight),
                                         rows.data_ptr<int32_t>(), labels.data_ptr<int32_t>(),
                                         logprob.data_ptr<float>(), entropy.data_ptr<float>(), lse.data_ptr<float>(),
                                         ws.data_ptr(), ws_bytes, chunk_rows,
                                         CurrentStream()),
                   kFn);
#endif
    }
    ctx->save_for_backward({hidden, weight, rows, labels, lse, entropy});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    return {logprob, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &rows = saved[2], &labels = saved[3], &lse = saved[4],
                     &entropy = saved[5];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const LmHeadLossShape s =
        CheckArgs(hidden, weight, rows, labels, ctx->saved_data["temperature"].toDouble(), chunk_rows);
    const at::Tensor glp = grads[0].defined() ? grads[0].to(at::kFloat).contiguous() : at::Tensor();
    const at::Tensor gent = grads[1].defined() ? grads[1].to(at::kFloat).contiguous() : at::Tensor();
    const float* glp_ptr = glp.defined() ? glp.data_ptr<float>() : nullptr;
    const float* gent_ptr = gent.defined() ? gent.data_ptr<float>() : nullptr;
    const auto f32 = hidden.options().dtype(at::kFloat);
    at::Tensor ghidden = NewOutput(hidden.sizes(), f32);
    at::Tensor gweight = NewOutput(weight.sizes(), f32);
    if (hidden.device().is_cpu()) {
      ThrowIfError(LmHeadLossBackwardCpu(s, hidden.data_ptr<float>(), weight.data_ptr<float>(),
                                         rows.data_ptr<int32_t>(), labels.data_ptr<int32_t>(), lse.data_ptr<float>(),
                                         entropy.data_ptr<float>(), glp_ptr, gent_ptr, ghidden.data_ptr<float>(),
                                         gweight.data_ptr<float>()),
                   kFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(hidden.device());
      const size_t ws_bytes = LmHeadLossWorkspaceBytes(s, chunk_rows);
      at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, hidden.options().dtype(at::kByte));
      ThrowIfError(LmHeadLossBackwardCuda(at::cuda::getCurrentCUDABlasHandle(), s, Bf16(hidden), Bf16(weight),
                                          rows.data_ptr<int32_t>(), labels.data_ptr<int32_t>(), lse.data_ptr<float>(),
                                          entropy.data_ptr<float>(), glp_ptr, gent_ptr, ghidden.data_ptr<float>(),
                                          gweight.data_ptr<float>(), ws.data_ptr(), ws_bytes, chunk_rows,
                                          CurrentStream()),
                   kFn);
#endif
    }
    return {ghidden.to(hidden.scalar_type()), gweight.to(weight.scalar_type()), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LmHeadLossOutput LmHeadLoss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& rows,
                            const at::Tensor& labels, double temperature, int64_t chunk_rows) {
  TORCH_CHECK(std::isfinite(temperature) && temperature > 0, kFn, ": temperature must be finite and > 0, got ",
              temperature);
  variable_list out = LmHeadLossFunction::apply(hidden, weight, rows, labels, temperature, chunk_rows);
  return {out[0], out[1]};
}

}  // namespace tandem::ops

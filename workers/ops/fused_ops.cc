// The fused glue ops (fused_ops.h): argument checks, then the CPU
// implementation or the CUDA kernels of kernels/fused, as autograd functions.
#include "workers/ops/fused_ops.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <utility>

#include "kernels/fused/fused.h"
#include "workers/ops/glue_common.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/fused/fused_cuda.h"
#endif

namespace tandem::ops {

using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

#ifdef TANDEM_TORCH_CUDA
at::Tensor Workspace(size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}
#endif
float* FOrNull(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// Contiguous and 4-byte aligned (the CUDA kernels access bf16 pairs).
at::Tensor Dense(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 4 != 0) c = c.clone();
  return c;
}

// `t` of the kernels' dtype on `like`'s device, with `like`'s sizes.
void CheckLike(const at::Tensor& t, const at::Tensor& like, const char* fn, const char* name) {
  TORCH_CHECK(t.defined(), fn, ": ", name, " is undefined");
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.device() == like.device(), fn, ": ", name, " must be ",
              like.scalar_type(), " on ", like.device(), ", got ", t.scalar_type(), " on ", t.device());
  TORCH_CHECK(t.sizes() == like.sizes(), fn, ": ", name, " must have shape ", like.sizes(), ", got ", t.sizes());
}

void CheckWeight(const at::Tensor& w, const at::Tensor& x, int64_t cols, const char* fn) {
  CheckTensor(w, fn, "weight", 1, x.scalar_type(), x.device().type());
  TORCH_CHECK(w.device() == x.device() && w.size(0) == cols, fn, ": weight must be [", cols, "] on ", x.device(),
              ", got ", w.sizes(), " on ", w.device());
}

// The gradient for output `g` of a function whose output looks like `like`.
at::Tensor GradOrZeros(const at::Tensor& g, const at::Tensor& like) {
  return g.defined() ? Dense(g.to(like.scalar_type())) : at::zeros_like(like);
}

constexpr const char* kNormFn = "RmsNorm";

RmsNormShape NormShape(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::ScalarType dtype = KernelDtype(x, kNormFn);
  TORCH_CHECK(x.dim() >= 1 && x.scalar_type() == dtype, kNormFn, ": x must be ", dtype, " [..., C], got ",
              x.scalar_type(), " ", x.sizes());
  const int64_t cols = x.size(-1);
  CheckWeight(weight, x, cols, kNormFn);
  RmsNormShape s;
  s.cols = CheckedInt32(cols, kNormFn, "the normalised size");
  s.rows = cols == 0 ? 0 : x.numel() / cols;
  s.eps = static_cast<float>(eps);
  ThrowIfError(CheckRmsNormShape(s), kNormFn);
  return s;
}

// The norm's forward: y = RmsNorm(x), or with delta defined sum = x + delta
// and y = RmsNorm(sum). Returns {sum (undefined without delta), y}.
std::pair<at::Tensor, at::Tensor> NormForward(const RmsNormShape& s, const at::Tensor& x, const at::Tensor& delta,
                                              const at::Tensor& w) {
  const bool residual = delta.defined();
  at::Tensor y = NewOutput(x.sizes(), x.options());
  at::Tensor sum = residual ? NewOutput(x.sizes(), x.options()) : at::Tensor();
  if (x.device().is_cpu()) {
    ThrowIfError(RmsNormForwardCpu(s, x.data_ptr<float>(), FOrNull(delta), w.data_ptr<float>(), FOrNull(sum),
                                   y.data_ptr<float>()),
                 kNormFn);
  } else {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(x.device());
    ThrowIfError(RmsNormForwardCuda(s, Bf16(x), Bf16(delta), Bf16(w), Bf16(sum), Bf16(y), CurrentStream()),
                 kNormFn);
#endif
  }
  return {sum, y};
}

// The norm's backward at input h: {grad of h (plus grad_h when defined),
// grad of weight in its dtype}.
std::pair<at::Tensor, at::Tensor> NormBackward(const at::Tensor& h, const at::Tensor& w, double eps,
                                               const at::Tensor& grad_y, const at::Tensor& grad_h) {
  const RmsNormShape s = NormShape(h, w, eps);
  const at::Tensor gy = GradOrZeros(grad_y, h);
  const at::Tensor gh = grad_h.defined() ? Dense(grad_h.to(h.scalar_type())) : at::Tensor();
  at::Tensor gin = NewOutput(h.sizes(), h.options());
  at::Tensor gw = NewOutput({s.cols}, h.options().dtype(at::kFloat));
  if (h.device().is_cpu()) {
    ThrowIfError(RmsNormBackwardCpu(s, h.data_ptr<float>(), w.data_ptr<float>(), gy.data_ptr<float>(), FOrNull(gh),
                                    gin.data_ptr<float>(), gw.data_ptr<float>()),
                 kNormFn);
  } else {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(h.device());
    const size_t bytes = RmsNormBackwardWorkspaceBytes(s);
    at::Tensor ws = Workspace(bytes, h);
    ThrowIfError(RmsNormBackwardCuda(s, Bf16(h), Bf16(w), Bf16(gy), Bf16(gh), Bf16(gin), gw.data_ptr<float>(),
                                     ws.data_ptr(), bytes, CurrentStream()),
                 kNormFn);
#endif
  }
  return {gin, gw.to(w.scalar_type())};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight_in,
                               double eps) {
    const RmsNormShape s = NormShape(x_in, weight_in, eps);
    const at::Tensor x = Dense(x_in), w = Dense(weight_in);
    at::Tensor y = NormForward(s, x, at::Tensor(), w).second;
    ctx->save_for_backward({x, w});
    ctx->saved_data["eps"] = eps;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [gx, gw] = NormBackward(saved[0], saved[1], ctx->saved_data["eps"].toDouble(), grads[0], at::Tensor());
    return {gx, gw, at::Tensor()};
  }
};

// outputs {sum = x + delta, RmsNorm(sum)}
class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& delta_in,
                               const at::Tensor& weight_in, double eps) {
    const RmsNormShape s = NormShape(x_in, weight_in, eps);
    CheckLike(delta_in, x_in, kNormFn, "delta");
    const at::Tensor x = Dense(x_in), w = Dense(weight_in), delta = Dense(delta_in);
    auto [sum, y] = NormForward(s, x, delta, w);
    ctx->save_for_backward({sum, w});
    ctx->saved_data["eps"] = eps;
    return {sum, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [gin, gw] = NormBackward(saved[0], saved[1], ctx->saved_data["eps"].toDouble(), grads[1], grads[0]);
    // x and delta have one gradient (the sum's).
    return {gin, gin, gw, at::Tensor()};
  }
};

constexpr const char* kRotaryFn = "QkNormRotary";

QkRotaryShape RotaryShape(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos,
                          const at::Tensor& sin, double eps) {
  const at::ScalarType dtype = KernelDtype(x, kRotaryFn);
  CheckTensor(x, kRotaryFn, "x", 3, dtype, x.device().type());
  const int64_t t = x.size(0), d = x.size(2);
  CheckWeight(weight, x, d, kRotaryFn);
  for (const auto& [tab, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}}) {
    CheckTensor(*tab, kRotaryFn, name, 2, dtype, x.device().type());
    TORCH_CHECK(tab->device() == x.device() && tab->size(0) == t && tab->size(1) == d, kRotaryFn, ": ", name,
                " must be [", t, ", ", d, "] on ", x.device(), ", got ", tab->sizes());
  }
  QkRotaryShape s;
  s.tokens = t;
  s.heads = CheckedInt32(x.size(1), kRotaryFn, "heads");
  s.head_dim = CheckedInt32(d, kRotaryFn, "head_dim");
  s.eps = static_cast<float>(eps);
  ThrowIfError(CheckQkRotaryShape(s), kRotaryFn);
  return s;
}

class QkNormRotaryFunction : public torch::autograd::Function<QkNormRotaryFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight_in,
                               const at::Tensor& cos_in, const at::Tensor& sin_in, double eps) {
    const QkRotaryShape s = RotaryShape(x_in, weight_in, cos_in, sin_in, eps);
    const at::Tensor x = Dense(x_in), w = Dense(weight_in), cos = Dense(cos_in), sin = Dense(sin_in);
    at::Tensor y = NewOutput(x.sizes(), x.options());
    if (x.device().is_cpu()) {
      ThrowIfError(QkNormRotaryForwardCpu(s, x.data_ptr<float>(), w.data_ptr<float>(), cos.data_ptr<float>(),
                                          sin.data_ptr<float>(), y.data_ptr<float>()),
                   kRotaryFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(x.device());
      ThrowIfError(QkNormRotaryForwardCuda(s, Bf16(x), Bf16(w), Bf16(cos), Bf16(sin), Bf16(y), CurrentStream()),
                   kRotaryFn);
#endif
    }
    ctx->save_for_backward({x, w, cos, sin});
    ctx->saved_data["eps"] = eps;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &cos = saved[2], &sin = saved[3];
    const QkRotaryShape s = RotaryShape(x, w, cos, sin, ctx->saved_data["eps"].toDouble());
    const at::Tensor gy = GradOrZeros(grads[0], x);
    at::Tensor gx = NewOutput(x.sizes(), x.options());
    at::Tensor gw = NewOutput({s.head_dim}, x.options().dtype(at::kFloat));
    if (x.device().is_cpu()) {
      ThrowIfError(QkNormRotaryBackwardCpu(s, x.data_ptr<float>(), w.data_ptr<float>(), cos.data_ptr<float>(),
                                           sin.data_ptr<float>(), gy.data_ptr<float>(), gx.data_ptr<float>(),
                                           gw.data_ptr<float>()),
                   kRotaryFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(x.device());
      const size_t bytes = QkNormRotaryBackwardWorkspaceBytes(s);
      at::Tensor ws = Workspace(bytes, x);
      ThrowIfError(QkNormRotaryBackwardCuda(s, Bf16(x), Bf16(w), Bf16(cos), Bf16(sin), Bf16(gy), Bf16(gx),
                                            gw.data_ptr<float>(), ws.data_ptr(), bytes, CurrentStream()),
                   kRotaryFn);
#endif
    }
    return {gx, gw.to(w.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

constexpr const char* kSwigluFn = "Swiglu";

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::ScalarType dtype = KernelDtype(gate_in, kSwigluFn);
    TORCH_CHECK(gate_in.scalar_type() == dtype, kSwigluFn, ": gate must be ", dtype, ", got ", gate_in.scalar_type());
    CheckLike(up_in, gate_in, kSwigluFn, "up");
    const at::Tensor gate = Dense(gate_in), up = Dense(up_in);
    at::Tensor y = NewOutput(gate.sizes(), gate.options());
    if (gate.device().is_cpu()) {
      ThrowIfError(SwigluForwardCpu(gate.numel(), gate.data_ptr<float>(), up.data_ptr<float>(), y.data_ptr<float>()),
                   kSwigluFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(gate.device());
      ThrowIfError(SwigluForwardCuda(gate.numel(), Bf16(gate), Bf16(up), Bf16(y), CurrentStream()), kSwigluFn);
#endif
    }
    ctx->save_for_backward({gate, up});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    const at::Tensor gy = GradOrZeros(grads[0], gate);
    at::Tensor gg = NewOutput(gate.sizes(), gate.options()), gu = NewOutput(gate.sizes(), gate.options());
    if (gate.device().is_cpu()) {
      ThrowIfError(SwigluBackwardCpu(gate.numel(), gate.data_ptr<float>(), up.data_ptr<float>(), gy.data_ptr<float>(),
                                     gg.data_ptr<float>(), gu.data_ptr<float>()),
                   kSwigluFn);
    } else {
#ifdef TANDEM_TORCH_CUDA
      c10::cuda::CUDAGuard guard(gate.device());
      ThrowIfError(
          SwigluBackwardCuda(gate.numel(), Bf16(gate), Bf16(up), Bf16(gy), Bf16(gg), Bf16(gu), CurrentStream()),
          kSwigluFn);
#endif
    }
    return {gg, gu};
  }
};

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps)[0];
}

AddRmsNormOutput AddRmsNorm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps) {
  variable_list out = AddRmsNormFunction::apply(x, delta, weight, eps);
  return {out[0], out[1]};
}

at::Tensor QkNormRotary(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin,
                        double eps) {
  return QkNormRotaryFunction::apply(x, weight, cos, sin, eps)[0];
}

at::Tensor Swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwigluFunction::apply(gate, up)[0]; }

}  // namespace tandem::ops

// The decode step's forward-only fused glue (decode_glue.h): argument
// checks, then one CUDA kernel of kernels/fused, or the ops it replaces.
#include "workers/ops/decode_glue.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "kernels/fused/fused.h"
#include "workers/ops/env_choice.h"
#include "workers/ops/fused_ops.h"
#include "workers/ops/glue_common.h"
#include "workers/ops/kernel_choices.h"
#include "workers/ops/paged_attention_op.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/decode_gemv/decode_gemv_cuda.h"
#include "kernels/fused/fused_cuda.h"
#endif

namespace tandem::ops {

namespace {

#ifdef TANDEM_TORCH_CUDA
// kDecodeGemvChoices' indices; read once a process.
constexpr int kGemvOff = 1, kGemvSerial = 2;
static_assert(kDecodeGemvChoices[kGemvOff] == "off" && kDecodeGemvChoices[kGemvSerial] == "serial");
int DecodeGemvChoice() {
  static const int choice = static_cast<int>(EnvChoice(kDecodeGemvVar, kDecodeGemvChoices));
  return choice;
}
#endif

void CheckForwardOnly(const at::Tensor& t, const char* fn, const char* name) {
  TORCH_CHECK(!t.requires_grad(), fn, ": ", name, " requires grad; this op is forward only (inference)");
}

// x [T, K] and weight [O, K] of x's kernel dtype on its device, no grad.
void CheckProjection(const at::Tensor& x, const at::Tensor& weight, const char* fn) {
  const at::ScalarType dtype = KernelDtype(x, fn);
  CheckTensor(x, fn, "x", 2, dtype, x.device().type());
  CheckTensor(weight, fn, "weight", 2, dtype, x.device().type());
  TORCH_CHECK(weight.device() == x.device(), fn, ": weight must be on ", x.device(), ", got ", weight.device());
  TORCH_CHECK(weight.size(1) == x.size(1), fn, ": weight must be [O, ", x.size(1), "] for x ", x.sizes(), ", got ",
              weight.sizes());
  CheckForwardOnly(x, fn, "x");
  CheckForwardOnly(weight, fn, "weight");
}

#ifdef TANDEM_TORCH_CUDA
// Whether the decode GEMV takes shape `s` over these tensors (the rest of
// the arguments checked by the caller): CUDA, contiguous, 16-byte aligned,
// a shape where it is faster (DecodeGemvPays), and the kernel not turned
// off (TANDEM_DECODE_GEMV=off).
bool GemvTakes(const kernels::DecodeGemvShape& s, std::initializer_list<const at::Tensor*> tensors) {
  if (DecodeGemvChoice() == kGemvOff || !kernels::CheckDecodeGemvShape(s).ok() || !kernels::DecodeGemvPays(s))
    return false;
  for (const at::Tensor* t : tensors)
    if (t->defined() && (!t->is_cuda() || !t->is_contiguous() || !AlignedTo(*t, 16))) return false;
  return true;
}

kernels::DecodeGemvShape GemvShape(const at::Tensor& x, const at::Tensor& weight, bool norm, bool swiglu, double eps) {
  kernels::DecodeGemvShape s;
  s.rows = static_cast<int32_t>(std::min<int64_t>(x.size(0), INT32_MAX));
  s.in = static_cast<int32_t>(std::min<int64_t>(x.size(1), INT32_MAX));
  s.out = weight.size(0);
  s.norm = norm;
  s.swiglu = swiglu;
  s.eps = static_cast<float>(eps);
  s.dependent = DecodeGemvChoice() != kGemvSerial;
  return s;
}
#endif

}  // namespace

at::Tensor QkvRotaryKvWrite(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& key_blocks,
                            const at::Tensor& value_blocks, const at::Tensor& slot_mapping, int64_t q_heads,
                            double eps) {
  constexpr const char* kFn = "QkvRotaryKvWrite";
  const at::ScalarType dtype = KernelDtype(qkv, kFn);
  CheckTensor(qkv, kFn, "qkv", 2, dtype, qkv.device().type());
  CheckTensor(key_blocks, kFn, "key_blocks", 4, dtype, qkv.device().type());
  for (const auto& [t, name] : {std::pair{&qkv, "qkv"}, std::pair{&q_weight, "q_weight"},
                                std::pair{&k_weight, "k_weight"}, std::pair{&cos, "cos"}, std::pair{&sin, "sin"}})
    CheckForwardOnly(*t, kFn, name);
  const int64_t t = qkv.size(0), kv_heads = key_blocks.size(2), d = key_blocks.size(3);
  TORCH_CHECK(q_heads > 0 && qkv.size(1) == (q_heads + 2 * kv_heads) * d, kFn, ": qkv must be [T, (", q_heads,
              " + 2 * ", kv_heads, ") * ", d, "] for the pools' ", kv_heads, " heads of ", d, ", got ", qkv.sizes());
  const at::Tensor q = qkv.narrow(1, 0, q_heads * d).view({t, q_heads, d});
  const at::Tensor k = qkv.narrow(1, q_heads * d, kv_heads * d).view({t, kv_heads, d});
  const at::Tensor v = qkv.narrow(1, (q_heads + kv_heads) * d, kv_heads * d).view({t, kv_heads, d});
#ifdef TANDEM_TORCH_CUDA
  // The kernel's shapes (QkNormRotary's, and rows of bf16 pairs); the
  // weights, tables and pools checked as the ops check them.
  const bool kernel = qkv.is_cuda() && qkv.stride(1) == 1 && qkv.stride(0) % 2 == 0 && AlignedTo(qkv, 4) &&
                      d % 4 == 0 && d <= kernels::kFusedCudaMaxCols && key_blocks.is_contiguous() &&
                      value_blocks.is_contiguous() && value_blocks.sizes() == key_blocks.sizes() &&
                      value_blocks.scalar_type() == dtype && value_blocks.device() == qkv.device() &&
                      key_blocks.device() == qkv.device();
  if (kernel) {
    for (const auto& [w, name] : {std::pair{&q_weight, "q_weight"}, std::pair{&k_weight, "k_weight"}})
      TORCH_CHECK(w->defined() && w->dim() == 1 && w->size(0) == d && w->scalar_type() == dtype &&
                      w->device() == qkv.device(),
                  kFn, ": ", name, " must be [", d, "] of ", dtype, " on ", qkv.device());
    for (const auto& [tab, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}})
      TORCH_CHECK(tab->defined() && tab->dim() == 2 && tab->size(0) == t && tab->size(1) == d &&
                      tab->scalar_type() == dtype && tab->device() == qkv.device(),
                  kFn, ": ", name, " must be [", t, ", ", d, "] of ", dtype, " on ", qkv.device());
    CheckTensor(slot_mapping, kFn, "slot_mapping", 1, at::kLong, qkv.device().type());
    TORCH_CHECK(slot_mapping.size(0) == t && slot_mapping.device() == qkv.device(), kFn, ": slot_mapping must be [",
                t, "] on ", qkv.device());
    const at::Tensor qw = q_weight.contiguous(), kw = k_weight.contiguous(), c = cos.contiguous(),
                     s = sin.contiguous(), slots = slot_mapping.contiguous();
    at::Tensor out = NewOutput({t, q_heads, d}, qkv.options());
    kernels::QkvRotaryShape shape;
    shape.tokens = t;
    shape.q_heads = static_cast<int32_t>(q_heads);
    shape.kv_heads = static_cast<int32_t>(kv_heads);
    shape.head_dim = static_cast<int32_t>(d);
    shape.row_stride = qkv.stride(0);
    shape.num_slots = key_blocks.size(0) * key_blocks.size(1);
    shape.eps = static_cast<float>(eps);
    c10::cuda::CUDAGuard guard(qkv.device());
    ThrowIfError(kernels::QkvRotaryKvWriteCuda(shape, Bf16(qkv), Bf16(qw), Bf16(kw), Bf16(c), Bf16(s),
                                               slots.data_ptr<int64_t>(), Bf16(out), Bf16(key_blocks),
                                               Bf16(value_blocks), CurrentStream()),
                 kFn);
    return out;
  }
#endif
  PagedKvWrite(QkNormRotary(k, k_weight, cos, sin, eps), v, key_blocks, value_blocks, slot_mapping);
  return QkNormRotary(q, q_weight, cos, sin, eps);
}

at::Tensor SwigluPacked(const at::Tensor& gate_up) {
  constexpr const char* kFn = "SwigluPacked";
  const at::ScalarType dtype = KernelDtype(gate_up, kFn);
  CheckTensor(gate_up, kFn, "gate_up", 2, dtype, gate_up.device().type());
  CheckForwardOnly(gate_up, kFn, "gate_up");
  TORCH_CHECK(gate_up.size(1) % 2 == 0 && gate_up.size(1) > 0, kFn, ": gate_up must be [T, 2I], got ",
              gate_up.sizes());
  const int64_t inter = gate_up.size(1) / 2;
#ifdef TANDEM_TORCH_CUDA
  if (gate_up.is_cuda() && inter % 2 == 0 && gate_up.is_contiguous() && AlignedTo(gate_up, 4)) {
    at::Tensor y = NewOutput({gate_up.size(0), inter}, gate_up.options());
    c10::cuda::CUDAGuard guard(gate_up.device());
    ThrowIfError(kernels::SwigluPackedForwardCuda(gate_up.size(0), inter, Bf16(gate_up), Bf16(y),
                                                  CurrentStream()),
                 kFn);
    return y;
  }
#endif
  return Swiglu(gate_up.narrow(1, 0, inter), gate_up.narrow(1, inter, inter));
}

NormLinearOutput NormLinear(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& norm_weight, double eps,
                            const at::Tensor& weight, bool swiglu) {
  constexpr const char* kFn = "NormLinear";
  CheckProjection(x, weight, kFn);
  CheckTensor(norm_weight, kFn, "norm_weight", 1, x.scalar_type(), x.device().type());
  TORCH_CHECK(norm_weight.size(0) == x.size(1) && norm_weight.device() == x.device(), kFn,
              ": norm_weight must be [", x.size(1), "] on ", x.device());
  CheckForwardOnly(norm_weight, kFn, "norm_weight");
  if (delta.defined()) {
    CheckTensor(delta, kFn, "delta", 2, x.scalar_type(), x.device().type());
    TORCH_CHECK(delta.sizes() == x.sizes() && delta.device() == x.device(), kFn, ": delta must be ", x.sizes(),
                " on ", x.device(), ", got ", delta.sizes());
    CheckForwardOnly(delta, kFn, "delta");
  }
  TORCH_CHECK(!swiglu || weight.size(0) % 2 == 0, kFn, ": weight must have an even number of rows (gate, then up) "
              "with swiglu, got ", weight.sizes());
#ifdef TANDEM_TORCH_CUDA
  const kernels::DecodeGemvShape s = GemvShape(x, weight, /*norm=*/true, swiglu, eps);
  if (GemvTakes(s, {&x, &delta, &weight}) && norm_weight.is_contiguous() && AlignedTo(norm_weight, 4)) {
    at::Tensor y = NewOutput({x.size(0), kernels::DecodeGemvOutCols(s)}, x.options());
    at::Tensor sum = delta.defined() ? NewOutput(x.sizes(), x.options()) : x;
    c10::cuda::CUDAGuard guard(x.device());
    ThrowIfError(kernels::DecodeGemvCuda(s, Bf16(x), Bf16(delta), Bf16(norm_weight), Bf16(weight),
                                         delta.defined() ? Bf16(sum) : nullptr, Bf16(y), CurrentStream()),
                 kFn);
    return {sum, y};
  }
#endif
  AddRmsNormOutput n = delta.defined() ? AddRmsNorm(x, delta, norm_weight, eps)
                                       : AddRmsNormOutput{x, RmsNorm(x, norm_weight, eps)};
  const at::Tensor y = at::linear(n.normed, weight);
  return {std::move(n.sum), swiglu ? SwigluPacked(y) : y};
}

at::Tensor DecodeLinear(const at::Tensor& x, const at::Tensor& weight) {
  constexpr const char* kFn = "DecodeLinear";
  CheckProjection(x, weight, kFn);
#ifdef TANDEM_TORCH_CUDA
  const kernels::DecodeGemvShape s = GemvShape(x, weight, /*norm=*/false, /*swiglu=*/false, 0.0);
  if (GemvTakes(s, {&x, &weight})) {
    at::Tensor y = NewOutput({x.size(0), weight.size(0)}, x.options());
    c10::cuda::CUDAGuard guard(x.device());
    ThrowIfError(kernels::DecodeGemvCuda(s, Bf16(x), nullptr, nullptr, Bf16(weight), nullptr, Bf16(y),
                                         CurrentStream()),
                 kFn);
    return y;
  }
#endif
  return at::linear(x, weight);
}

}  // namespace tandem::ops

// Dense varlen attention with a bottom-right causal mask (dense_varlen_attention.h).
#include "workers/ops/dense_varlen_attention.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

#include <limits>
#include <vector>

#include "workers/ops/aten_call.h"

namespace tandem::ops {
namespace {

constexpr const char* kFn = "DenseVarlenAttention";

struct Block {
  int64_t q0, lq, k0, lk;
};

std::vector<Block> Blocks(const DenseVarlenCall& call) {
  const at::Tensor cq = call.cu_q.to(at::kCPU).to(at::kLong).contiguous();
  const at::Tensor ck = call.cu_k.to(at::kCPU).to(at::kLong).contiguous();
  TORCH_CHECK(cq.dim() == 1 && cq.numel() >= 1 && cq.numel() == ck.numel(), kFn,
              ": cu_q and cu_k must be [B + 1] alike, got ", cq.sizes(), " and ", ck.sizes());
  const int64_t* a = cq.data_ptr<int64_t>();
  const int64_t* b = ck.data_ptr<int64_t>();
  std::vector<Block> blocks;
  for (int64_t i = 0; i + 1 < cq.numel(); ++i) blocks.push_back({a[i], a[i + 1] - a[i], b[i], b[i + 1] - b[i]});
  return blocks;
}

// [L, Hkv * g, D] -> [Hkv, g * L, D]: the rows of a kv head's query group,
// row r = gi * L + i.
at::Tensor GroupRows(const at::Tensor& x, int64_t hkv, at::ScalarType acc) {
  const int64_t l = x.size(0), g = x.size(1) / hkv, d = x.size(2);
  return x.to(acc).view({l, hkv, g, d}).permute({1, 2, 0, 3}).reshape({hkv, g * l, d});
}

// The inverse of GroupRows: [Hkv, g * L, D] -> [L, Hkv * g, D].
at::Tensor TokenRows(const at::Tensor& x, int64_t l) {
  const int64_t hkv = x.size(0), g = x.size(1) / l, d = x.size(2);
  return x.view({hkv, g, l, d}).permute({2, 0, 1, 3}).reshape({l, hkv * g, d});
}

// Scores of a block, masked bottom-right causal when `causal`: [Hkv, g * lq, lk].
at::Tensor MaskedScores(const at::Tensor& qh, const at::Tensor& kh, int64_t lq, int64_t lk, double scale, bool causal) {
  const at::Tensor s = qh.matmul(kh.transpose(1, 2)) * scale;
  if (!causal) return s;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(qh.device());
  const at::Tensor i = at::arange(lq, opts).repeat({qh.size(1) / lq});
  const at::Tensor hidden = at::arange(lk, opts).unsqueeze(0).gt((i + (lk - lq)).unsqueeze(1));
  return s.masked_fill(hidden, -std::numeric_limits<double>::infinity());
}

void CheckInputs(DenseVarlenKernel kernel, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes(), kFn, ": q [Tq, Hq, D], k and v [Tk, Hkv, D]");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0 && q.size(2) == k.size(2), kFn, ": heads or head dims differ: q ",
              q.sizes(), ", k ", k.sizes());
  if (kernel == DenseVarlenKernel::kFlash) {
    TORCH_CHECK(q.is_cuda(), kFn, ": the flash kernel runs on CUDA only, got ", q.device());
    TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf, kFn,
                ": the flash kernel takes bf16 or fp16, got ", q.scalar_type());
    TORCH_CHECK(q.size(2) % 8 == 0 && q.size(2) <= 256, kFn,
                ": the flash kernel needs a head dim that is a multiple of 8 up to 256, got ", q.size(2));
  }
}

std::pair<at::Tensor, DenseVarlenSaved> ReferenceForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                         const DenseVarlenCall& call) {
  const at::ScalarType acc = DenseVarlenAccumulator(q);
  const int64_t hkv = k.size(1);
  std::vector<at::Tensor> outs, lses;
  for (const Block& b : Blocks(call)) {
    const at::Tensor qh = GroupRows(q.narrow(0, b.q0, b.lq), hkv, acc);
    const at::Tensor kh = k.narrow(0, b.k0, b.lk).to(acc).permute({1, 0, 2});
    const at::Tensor vh = v.narrow(0, b.k0, b.lk).to(acc).permute({1, 0, 2});
    const at::Tensor s = MaskedScores(qh, kh, b.lq, b.lk, call.scale, call.causal);
    const at::Tensor lse = s.logsumexp(-1);  // [Hkv, g * lq]
    outs.push_back(TokenRows((s - lse.unsqueeze(-1)).exp().matmul(vh), b.lq).to(q.scalar_type()));
    lses.push_back(lse.reshape({q.size(1), b.lq}));  // head hkv * g + gi
  }
  if (outs.empty()) return {q.new_empty(q.sizes()), {q.new_empty({q.size(1), 0}, q.options().dtype(acc)), {}, {}}};
  return {at::cat(outs, 0), {at::cat(lses, 1), {}, {}}};
}

std::array<at::Tensor, 3> ReferenceBackward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& out, const DenseVarlenSaved& saved,
                                            const DenseVarlenCall& call) {
  const at::ScalarType acc = DenseVarlenAccumulator(q);
  const int64_t hkv = k.size(1);
  std::vector<at::Tensor> dqs;
  at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(acc)), dv = at::zeros(v.sizes(), v.options().dtype(acc));
  for (const Block& b : Blocks(call)) {
    const at::Tensor qh = GroupRows(q.narrow(0, b.q0, b.lq), hkv, acc);
    const at::Tensor doh = GroupRows(dout.narrow(0, b.q0, b.lq), hkv, acc);
    const at::Tensor oh = GroupRows(out.narrow(0, b.q0, b.lq), hkv, acc);
    const at::Tensor kh = k.narrow(0, b.k0, b.lk).to(acc).permute({1, 0, 2});
    const at::Tensor vh = v.narrow(0, b.k0, b.lk).to(acc).permute({1, 0, 2});
    const at::Tensor lse = saved.lse.narrow(1, b.q0, b.lq).to(acc).reshape({hkv, -1});
    const at::Tensor p = (MaskedScores(qh, kh, b.lq, b.lk, call.scale, call.causal) - lse.unsqueeze(-1)).exp();
    const at::Tensor ds = p * (doh.matmul(vh.transpose(1, 2)) - (doh * oh).sum(-1, true));
    dqs.push_back(TokenRows(ds.matmul(kh) * call.scale, b.lq).to(q.scalar_type()));
    dk.narrow(0, b.k0, b.lk).add_((ds.transpose(1, 2).matmul(qh) * call.scale).permute({1, 0, 2}));
    dv.narrow(0, b.k0, b.lk).add_(p.transpose(1, 2).matmul(doh).permute({1, 0, 2}));
  }
  at::Tensor dq = dqs.empty() ? at::zeros(q.sizes(), q.options()) : at::cat(dqs, 0);
  return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

}  // namespace

std::pair<at::Tensor, DenseVarlenSaved> DenseVarlenForward(DenseVarlenKernel kernel, const at::Tensor& q,
                                                           const at::Tensor& k, const at::Tensor& v,
                                                           const DenseVarlenCall& call) {
  CheckInputs(kernel, q, k, v);
  if (kernel == DenseVarlenKernel::kReference) return ReferenceForward(q, k, v, call);
  const std::vector<c10::IValue> r =
      CallOp("aten::_flash_attention_forward", "",
             {{"query", q}, {"key", k}, {"value", v}, {"cum_seq_q", call.cu_q}, {"cum_seq_k", call.cu_k},
              {"max_q", call.max_q}, {"max_k", call.max_k}, {"dropout_p", 0.0}, {"is_causal", call.causal},
              {"return_debug_mask", false}, {"scale", call.scale}});
  TORCH_CHECK(r.size() >= 4, kFn, ": aten::_flash_attention_forward returned ", r.size(), " values, expected 5");
  return {r[0].toTensor(), {r[1].toTensor(), r[2].toTensor(), r[3].toTensor()}};
}

std::array<at::Tensor, 3> DenseVarlenBackward(DenseVarlenKernel kernel, const at::Tensor& dout, const at::Tensor& q,
                                              const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                              const DenseVarlenSaved& saved, const DenseVarlenCall& call) {
  CheckInputs(kernel, q, k, v);
  if (kernel == DenseVarlenKernel::kReference) return ReferenceBackward(dout, q, k, v, out, saved, call);
  const std::vector<c10::IValue> r =
      CallOp("aten::_flash_attention_backward", "",
             {{"grad_out", dout}, {"query", q}, {"key", k}, {"value", v}, {"out", out}, {"logsumexp", saved.lse},
              {"cum_seq_q", call.cu_q}, {"cum_seq_k", call.cu_k}, {"max_q", call.max_q}, {"max_k", call.max_k},
              {"dropout_p", 0.0}, {"is_causal", call.causal}, {"rng_state|philox_seed", saved.rng_state},
              {"unused|philox_offset", saved.unused}, {"scale", call.scale}});
  TORCH_CHECK(r.size() == 3, kFn, ": aten::_flash_attention_backward returned ", r.size(), " values, expected 3");
  return {r[0].toTensor(), r[1].toTensor(), r[2].toTensor()};
}

}  // namespace tandem::ops

// Tree attention on dense varlen kernels (tree_attention_varlen.h).
#include "workers/ops/tree_attention_varlen.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace tandem::ops {
namespace {

using Chunks = std::vector<VarlenChunkTensors>;

DenseVarlenCall CallOf(const VarlenChunkTensors& c, double scale) {
  return {c.cu_q, c.cu_k, c.max_q, c.max_k, scale, c.causal};
}

at::Tensor Rows(const at::Tensor& x, const VarlenChunkTensors& c) {
  return c.q_rows.defined() ? x.index_select(0, c.q_rows) : x.narrow(0, c.q_begin, c.q_end - c.q_begin);
}

// Merges a second partial result (o2 [n, H, D], lse2 [H, n]) of the rows
// `rows` into out [T, H, D] and lse [H, T] by their log-sum-exp.
void MergeRows(at::Tensor& out, at::Tensor& lse, const at::Tensor& rows, const at::Tensor& o2, const at::Tensor& lse2) {
  const at::ScalarType acc = lse.scalar_type();
  const at::Tensor l1 = lse.index_select(1, rows), l2 = lse2.to(acc);
  const at::Tensor m = at::maximum(l1, l2);
  const at::Tensor w1 = (l1 - m).exp(), w2 = (l2 - m).exp();
  const at::Tensor sum = w1 + w2;
  const at::Tensor merged = out.index_select(0, rows).to(acc) * (w1 / sum).t().unsqueeze(-1) +
                            o2.to(acc) * (w2 / sum).t().unsqueeze(-1);
  out.index_copy_(0, rows, merged.to(out.scalar_type()));
  lse.index_copy_(1, rows, m + sum.log());
}

// The single form: one call per chunk over its query rows as they are.
// Saved after q, k, v, out: per chunk its lse, rng_state and unused.
at::Tensor SingleForward(DenseVarlenKernel dense, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const Chunks& chunks, double scale, std::vector<at::Tensor>& saved) {
  std::vector<at::Tensor> outs;
  for (const VarlenChunkTensors& c : chunks) {
    auto [out, s] = DenseVarlenForward(dense, Rows(q, c), k.index_select(0, c.key_rows), v.index_select(0, c.key_rows),
                                       CallOf(c, scale));
    outs.push_back(std::move(out));
    saved.insert(saved.end(), {s.lse, s.rng_state, s.unused});
  }
  return outs.empty() ? q.new_empty(q.sizes()) : outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

// The split form: the self part over the packed rows, then each ancestor
// chunk over its gathered rows, merged. Saved after q, k, v, out: the merged
// lse, then per chunk (self first) its rng_state and unused.
at::Tensor SplitForward(DenseVarlenKernel dense, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const Chunks& chunks, double scale, std::vector<at::Tensor>& saved) {
  auto [out, self] = DenseVarlenForward(dense, q, k, v, CallOf(chunks[0], scale));
  at::Tensor lse = self.lse.to(DenseVarlenAccumulator(q)).contiguous();
  saved.insert(saved.end(), {lse, self.rng_state, self.unused});
  for (size_t i = 1; i < chunks.size(); ++i) {
    const VarlenChunkTensors& c = chunks[i];
    auto [part, s] = DenseVarlenForward(dense, Rows(q, c), k.index_select(0, c.key_rows),
                                        v.index_select(0, c.key_rows), CallOf(c, scale));
    MergeRows(out, lse, c.q_rows, part, s.lse);
    saved.insert(saved.end(), {s.rng_state, s.unused});
  }
  return out;
}

class TreeAttentionVarlenFunction : public torch::autograd::Function<TreeAttentionVarlenFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const c10::intrusive_ptr<TreeForest>& forest, double scale,
                            int64_t kernel, bool split) {
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const auto dense = static_cast<DenseVarlenKernel>(kernel);
    const Chunks& chunks = forest->VarlenChunks(q.device(), split);
    std::vector<at::Tensor> saved;
    const at::Tensor out = split ? SplitForward(dense, q, k, v, chunks, scale, saved)
                                 : SingleForward(dense, q, k, v, chunks, scale, saved);
    saved.insert(saved.begin(), {q, k, v, out});
    ctx->save_for_backward(saved);
    ctx->saved_data["forest"] = c10::IValue::make_capsule(forest);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["split"] = split;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    auto capsule = ctx->saved_data["forest"].toCapsule();
    const auto& forest = *static_cast<TreeForest*>(capsule.get());
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dense = static_cast<DenseVarlenKernel>(ctx->saved_data["kernel"].toInt());
    const bool split = ctx->saved_data["split"].toBool();
    TORCH_CHECK(grads[0].defined(), "TreeAttention: backward without an output gradient");
    const at::Tensor dout = grads[0].to(q.scalar_type()).contiguous();
    const at::ScalarType acc = DenseVarlenAccumulator(q);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(acc));
    at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(acc)), dv = at::zeros(v.sizes(), v.options().dtype(acc));
    const Chunks& chunks = forest.VarlenChunks(q.device(), split);
    size_t next = split ? 5 : 4;  // past the merged lse of the split form
    for (size_t i = 0; i < chunks.size(); ++i) {
      const VarlenChunkTensors& c = chunks[i];
      const bool self = split && i == 0;  // the packed rows against their own keys
      DenseVarlenSaved s;
      if (split) {
        s = {c.q_rows.defined() ? saved[4].index_select(1, c.q_rows) : saved[4], saved[next], saved[next + 1]};
        next += 2;
      } else {
        s = {saved[next], saved[next + 1], saved[next + 2]};
        next += 3;
      }
      auto [dqc, dkc, dvc] =
          DenseVarlenBackward(dense, Rows(dout, c), Rows(q, c), self ? k : k.index_select(0, c.key_rows),
                              self ? v : v.index_select(0, c.key_rows), Rows(out, c), s, CallOf(c, scale));
      if (c.q_rows.defined()) {
        dq.index_add_(0, c.q_rows, dqc.to(acc));
      } else {
        dq.narrow(0, c.q_begin, c.q_end - c.q_begin).add_(dqc.to(acc));
      }
      if (self) {
        dk.add_(dkc.to(acc));
        dv.add_(dvc.to(acc));
      } else {
        dk.index_add_(0, c.key_rows, dkc.to(acc));
        dv.index_add_(0, c.key_rows, dvc.to(acc));
      }
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()),
            at::Tensor(),           at::Tensor(),           at::Tensor(),           at::Tensor()};
  }
};

}  // namespace

at::Tensor TreeAttentionVarlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const c10::intrusive_ptr<TreeForest>& forest, double scale, DenseVarlenKernel kernel,
                               bool split) {
  return TreeAttentionVarlenFunction::apply(q, k, v, forest, scale, static_cast<int64_t>(kernel), split);
}

}  // namespace tandem::ops

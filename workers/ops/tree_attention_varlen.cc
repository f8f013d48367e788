// Tree attention on dense varlen kernels (tree_attention_varlen.h).
#include "workers/ops/tree_attention_varlen.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace tandem::ops {
namespace {

DenseVarlenCall CallOf(const VarlenChunkTensors& c, double scale) { return {c.cu_q, c.cu_k, c.max_q, c.max_k, scale}; }

class TreeAttentionVarlenFunction : public torch::autograd::Function<TreeAttentionVarlenFunction> {
 public:
  // Saved: q, k, v, out, then per chunk its lse, rng_state and unused.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const c10::intrusive_ptr<TreeForest>& forest, double scale,
                            int64_t kernel) {
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const auto dense = static_cast<DenseVarlenKernel>(kernel);
    std::vector<at::Tensor> outs, saved;
    for (const VarlenChunkTensors& c : forest->VarlenChunks(q.device())) {
      const at::Tensor kc = k.index_select(0, c.key_rows), vc = v.index_select(0, c.key_rows);
      auto [out, s] = DenseVarlenForward(dense, q.narrow(0, c.q_begin, c.q_end - c.q_begin), kc, vc, CallOf(c, scale));
      outs.push_back(std::move(out));
      saved.insert(saved.end(), {s.lse, s.rng_state, s.unused});
    }
    const at::Tensor out = outs.empty() ? q.new_empty(q.sizes()) : outs.size() == 1 ? outs[0] : at::cat(outs, 0);
    saved.insert(saved.begin(), {q, k, v, out});
    ctx->save_for_backward(saved);
    ctx->saved_data["forest"] = c10::IValue::make_capsule(forest);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["kernel"] = kernel;
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
    TORCH_CHECK(grads[0].defined(), "TreeAttention: backward without an output gradient");
    const at::Tensor dout = grads[0].to(q.scalar_type()).contiguous();
    const at::ScalarType acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(acc)), dv = at::zeros(v.sizes(), v.options().dtype(acc));
    std::vector<at::Tensor> dqs;
    size_t i = 4;
    for (const VarlenChunkTensors& c : forest.VarlenChunks(q.device())) {
      const DenseVarlenSaved s{saved[i], saved[i + 1], saved[i + 2]};
      i += 3;
      const int64_t rows = c.q_end - c.q_begin;
      auto [dqc, dkc, dvc] = DenseVarlenBackward(dense, dout.narrow(0, c.q_begin, rows), q.narrow(0, c.q_begin, rows),
                                                 k.index_select(0, c.key_rows), v.index_select(0, c.key_rows),
                                                 out.narrow(0, c.q_begin, rows), s, CallOf(c, scale));
      dqs.push_back(std::move(dqc));
      dk.index_add_(0, c.key_rows, dkc.to(acc));
      dv.index_add_(0, c.key_rows, dvc.to(acc));
    }
    at::Tensor dq = dqs.empty() ? at::zeros(q.sizes(), q.options()) : dqs.size() == 1 ? dqs[0] : at::cat(dqs, 0);
    return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor TreeAttentionVarlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const c10::intrusive_ptr<TreeForest>& forest, double scale, DenseVarlenKernel kernel) {
  return TreeAttentionVarlenFunction::apply(q, k, v, forest, scale, static_cast<int64_t>(kernel));
}

}  // namespace tandem::ops

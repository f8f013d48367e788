// The trainers' optimizer step (docs/model.md "sft"; docs/rl.md): LibTorch's
// AdamW over a model's parameter slots, weight decay on matrices (dim >= 2)
// and none on norms, after clipping the gradients' global norm. Until the
// optimizer interface of issue #17 (state in tagged host slabs) replaces it.
//
// Step(lr): the global L2 norm of every gradient buffer (double), an
// Internal error when it is not finite (nothing updated), the gradients
// scaled by max_grad_norm / (norm + 1e-6) when over max_grad_norm > 0, then
// one AdamW update at `lr`. State() / Restore() are the checkpoint's view:
// the update count and AdamW's moments by slot name, "exp_avg/<slot>" and
// "exp_avg_sq/<slot>" (none before the first step: AdamW makes them
// lazily). Restoring the state saved with parameters equal to the model's
// continues bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/model/parameter_set.h"

namespace tandem::train {

struct AdamWOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
};

// InvalidArgument unless weight decay and clip >= 0, betas in [0, 1), eps > 0.
Status Validate(const AdamWOptions& options);

// The gradients' global L2 norm (in double) before clipping; when over
// max_grad_norm > 0, every gradient is scaled by max_grad_norm / (norm +
// 1e-6). Internal when the norm is not finite (nothing scaled).
StatusOr<double> ClipGradNorm(const model::ParameterSet& params, double max_grad_norm);

struct OptimizerState {
  int64_t steps = 0;  // updates applied: AdamW's bias-correction step
  std::map<std::string, at::Tensor> tensors;
};

class AdamW {
 public:
  // `params` must outlive the optimizer; its gradients are enabled here.
  static StatusOr<std::unique_ptr<AdamW>> Create(model::ParameterSet& params, const AdamWOptions& options);
  ~AdamW();

  // Returns the gradients' global norm before clipping.
  StatusOr<double> Step(double lr);
  int64_t steps() const { return steps_; }

  // The tensors alias the optimizer's (copy before the next Step).
  OptimizerState State() const;
  // Replaces the state by copies of `state`'s: every slot with both moments
  // of its shape (dtype converted), or no tensors with steps 0. Nothing is
  // changed when one is wrong (InvalidArgument naming the tensor).
  Status Restore(const OptimizerState& state);

 private:
  struct Impl;
  AdamW(model::ParameterSet& params, AdamWOptions options, std::unique_ptr<Impl> impl);
  model::ParameterSet& params_;
  AdamWOptions options_;
  std::unique_ptr<Impl> impl_;
  int64_t steps_ = 0;
};

}  // namespace tandem::train

// The trainers' optimizer interface (docs/optimizers.md; issue #17 item 1):
// AdamW (adamw.h) and Muon (muon.h) behind one step and one state, chosen
// by name. Step(lr) clips the gradients' global norm (returned, before
// clipping; Internal when it is not finite, nothing updated) and applies
// one update; State() / Restore() are the checkpoint's view by tensor name
// (each optimizer's header lists its names); Restore changes nothing when
// it refuses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "workers/model/parameter_set.h"

namespace tandem::train {

struct OptimizerState {
  int64_t steps = 0;  // updates applied: the bias-correction step
  std::map<std::string, at::Tensor> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual StatusOr<double> Step(double lr) = 0;
  virtual int64_t steps() const = 0;
  virtual OptimizerState State() const = 0;  // the tensors alias the optimizer's (copy before the next Step)
  virtual Status Restore(const OptimizerState& state) = 0;
};

}  // namespace tandem::train

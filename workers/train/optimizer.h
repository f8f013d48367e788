// The trainers' optimizer interface (docs/optimizers.md; issue #17 item 1):
// AdamW (adamw.h) and Muon (muon.h) behind one step and one state, chosen
// by name. Step(lr) clips the gradients' global norm (returned, before
// clipping; Internal when it is not finite, nothing updated) and applies
// one update; State() / Restore() are the checkpoint's view by tensor name
// (each optimizer's header lists its names); Restore changes nothing when
// it refuses.
//
// Release() / Resume(): the handoff's optimizer tag (docs/handoff.md "The
// actor's memory"): Release frees the optimizer's memory on the
// parameters' device (native state copied to host first; staged state is
// on the host already, only its buffers go), Resume brings it back; Step
// resumes by itself. device_bytes() is what it holds on the device now,
// resident_bytes() what it holds there once resumed (the tag's size).
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
  // A state sharded across data-parallel ranks (adamw.h "Sharded"):
  // GatherState() is then collective (every rank, at the same step, before
  // rank 0's checkpoint reads State()); a no-op otherwise.
  virtual bool sharded() const { return false; }
  virtual Status GatherState() { return Status::Ok(); }
  virtual Status Release() = 0;
  virtual Status Resume() = 0;
  virtual int64_t device_bytes() const = 0;
  virtual int64_t resident_bytes() const = 0;
};

}  // namespace tandem::train

// What the GPU handoff asks of an engine (docs/inference.md "Memory and the
// control protocol"): the rollout's Generator and the teacher's Scorer both
// implement it, and the control handlers (workers/roles/engine_control.h)
// and ReleaseEngineMemory (tagged_model.h) drive either through it.
// Torch-free.
//
// The order a release follows: Pause (the engine stops starting work),
// MarkAbsent(part) (waits for the work in flight; refuses while the part is
// in use), then the memory is released; a resume maps it again, then
// MarkPresent, then Continue. LoadWeights rewrites the parameters in place
// with no work in flight.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "workers/inference/generation.h"

namespace tandem::inference {

enum class MemoryPart { kWeights, kKvCache, kCudaGraph };

class HandoffEngine {
 public:
  virtual ~HandoffEngine() = default;
  virtual Status Pause(PauseMode mode) = 0;
  // FailedPrecondition while a part is released.
  virtual Status Continue() = 0;
  // FailedPrecondition unless paused (and while the part is in use);
  // NotFound for a part the engine does not have. Idempotent.
  virtual Status MarkAbsent(MemoryPart part) = 0;
  virtual void MarkPresent(MemoryPart part) = 0;
  // `version` is what work started after it reports; FailedPrecondition
  // while the weights are released.
  virtual Status LoadWeights(int64_t version, const std::function<Status()>& load) = 0;
};

}  // namespace tandem::inference

// Learning-rate schedule of the trainers (docs/model.md, "sft"): linear
// warmup times a cosine decay. The cosine follows training *progress* p in
// [0, 1], not a step count, so a run bounded by a time limit decays as well
// as one bounded by steps: the trainer passes p = max(step / max_steps,
// elapsed / time_limit).
//
//   lr(step, p) = peak * min(1, (step + 1) / warmup_steps)
//                      * (final_ratio + (1 - final_ratio) * (1 + cos(pi * p)) / 2)
//
// with p clamped to [0, 1]; warmup_steps 0 means no warmup. Pure C++, no
// LibTorch.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem::train {

struct WarmupCosine {
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  double final_ratio = 0.1;  // lr at p = 1, as a fraction of peak_lr

  // InvalidArgument for a non-positive peak, negative warmup or a final
  // ratio outside [0, 1].
  Status Validate() const;
  double At(int64_t step, double progress) const;
};

}  // namespace tandem::train

// Warmup times cosine (lr_schedule.h).
#include "workers/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace tandem::train {

Status WarmupCosine::Validate() const {
  if (!(peak_lr > 0) || !std::isfinite(peak_lr)) return InvalidArgument("learning rate: expected a positive number");
  if (warmup_steps < 0) return InvalidArgument("warmup steps: expected a non-negative integer");
  if (!(final_ratio >= 0 && final_ratio <= 1)) return InvalidArgument("final lr ratio: expected a number in [0, 1]");
  return Status::Ok();
}

double WarmupCosine::At(int64_t step, double progress) const {
  const double p = std::clamp(std::isfinite(progress) ? progress : 1.0, 0.0, 1.0);
  const double warm =
      warmup_steps > 0 ? std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warmup_steps)) : 1.0;
  return peak_lr * warm * (final_ratio + (1 - final_ratio) * 0.5 * (1 + std::cos(std::numbers::pi * p)));
}

}  // namespace tandem::train

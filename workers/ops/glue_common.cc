// The glue's poisoning test hook and output allocation (glue_common.h).
#include "workers/ops/glue_common.h"

#include <ATen/ops/empty.h>

#include <atomic>
#include <cmath>

namespace tandem::ops {
namespace {
std::atomic<bool> g_poison{false};
}  // namespace

void SetPoisonOutputsForTesting(bool on) { g_poison.store(on, std::memory_order_relaxed); }
bool PoisonOutputsForTesting() { return g_poison.load(std::memory_order_relaxed); }

at::Tensor NewOutput(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
  if (PoisonOutputsForTesting() && at::isFloatingType(t.scalar_type())) t.fill_(NAN);
  return t;
}

}  // namespace tandem::ops

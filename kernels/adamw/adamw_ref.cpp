// The AdamW oracle (adamw.h): the formula in fp64, never used in production.
#include <cmath>

#include "kernels/adamw/adamw.h"

namespace tandem::kernels {

void AdamWRef(const AdamWStep& s, int64_t n, const float* grad, float* w, float* m, float* v) {
  const double t = static_cast<double>(s.step);
  const double bias_correction1 = 1 - std::pow(s.beta1, t), bias_correction2 = 1 - std::pow(s.beta2, t);
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * s.grad_scale;
    double wi = static_cast<double>(w[i]) * (1 - s.lr * s.weight_decay);
    const double mi = m[i] * s.beta1 + (1 - s.beta1) * g;
    const double vi = v[i] * s.beta2 + (1 - s.beta2) * g * g;
    wi -= s.lr / bias_correction1 * mi / (std::sqrt(vi) / std::sqrt(bias_correction2) + s.eps);
    w[i] = static_cast<float>(wi);
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
  }
}

}  // namespace tandem::kernels

// Chunked LM-head loss oracle (lm_head_loss.h): the definition, whole rows,
// fp64. Gradients by the closed forms in the header.
#include <cmath>
#include <vector>

#include "kernels/lm_head_loss/lm_head_loss.h"

namespace tandem::kernels {
namespace {

// z row (fp64), its lse and entropy.
void Row(const LmHeadLossShape& s, const float* hidden, const float* weight, int64_t r, std::vector<double>& z,
         double& lse, double& ent) {
  z.assign(s.vocab, 0.0);
  double mx = -INFINITY;
  for (int64_t v = 0; v < s.vocab; ++v) {
    double acc = 0;
    for (int64_t x = 0; x < s.hidden; ++x) acc += double(hidden[r * s.hidden + x]) * weight[v * s.hidden + x];
    z[v] = acc / s.temperature;
    mx = std::max(mx, z[v]);
  }
  double sum = 0, pz = 0;
  for (double zv : z) sum += std::exp(zv - mx);
  lse = mx + std::log(sum);
  for (double zv : z) pz += std::exp(zv - lse) * zv;
  ent = lse - pz;
}

}  // namespace

void LmHeadLossForwardRef(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                          const int32_t* labels, float* logprob, float* entropy, float* lse) {
  std::vector<double> z, lse_d(s.num_rows);
  for (int64_t r = 0; r < s.num_rows; ++r) {
    double l, e;
    Row(s, hidden, weight, r, z, l, e);
    lse_d[r] = l;
    if (entropy != nullptr) entropy[r] = static_cast<float>(e);
    if (lse != nullptr) lse[r] = static_cast<float>(l);
  }
  for (int64_t i = 0; i < s.num_pairs; ++i) {
    double acc = 0;
    for (int64_t x = 0; x < s.hidden; ++x) acc += double(hidden[rows[i] * int64_t(s.hidden) + x]) * weight[labels[i] * int64_t(s.hidden) + x];
    logprob[i] = static_cast<float>(acc / s.temperature - lse_d[rows[i]]);
  }
}

void LmHeadLossBackwardRef(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                           const int32_t* labels, const float* grad_logprob, const float* grad_entropy,
                           float* grad_hidden, float* grad_weight) {
  const int64_t N = s.num_rows, H = s.hidden, V = s.vocab;
  std::vector<double> gsum(N, 0.0), gh(N * H, 0.0), gw(V * H, 0.0), z, dz(V);
  for (int64_t i = 0; i < s.num_pairs; ++i) gsum[rows[i]] += grad_logprob ? grad_logprob[i] : 0.0;
  for (int64_t r = 0; r < N; ++r) {
    double lse, ent;
    Row(s, hidden, weight, r, z, lse, ent);
    const double ge = grad_entropy ? grad_entropy[r] : 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(z[v] - lse);
      dz[v] = -gsum[r] * p - ge * p * (z[v] - lse + ent);
    }
    for (int64_t i = 0; i < s.num_pairs; ++i) {
      if (rows[i] == r && grad_logprob != nullptr) dz[labels[i]] += grad_logprob[i];
    }
    for (int64_t v = 0; v < V; ++v) {
      const double d = dz[v] / s.temperature;
      for (int64_t x = 0; x < H; ++x) {
        gh[r * H + x] += d * weight[v * H + x];
        gw[v * H + x] += d * hidden[r * H + x];
      }
    }
  }
  for (int64_t i = 0; i < N * H; ++i) grad_hidden[i] = static_cast<float>(gh[i]);
  for (int64_t i = 0; i < V * H; ++i) grad_weight[i] = static_cast<float>(gw[i]);
}

}  // namespace tandem::kernels

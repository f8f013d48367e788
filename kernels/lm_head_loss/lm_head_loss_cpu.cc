// Chunked LM-head loss, CPU implementation (lm_head_loss.h): the GPU's
// algorithm on CPU threads. Forward: per row, one pass over the vocabulary
// with an online (max, sum, sum p z). Backward: chunks of kCpuChunkRows rows;
// dz for the chunk (rows in parallel), then grad_hidden for its rows (rows in
// parallel) and grad_weight += dz^T hidden (vocabulary in parallel, so no
// two threads write one weight row). Holds one chunk of logits at a time.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/lm_head_loss/lm_head_loss.h"
#include "kernels/common/dot.h"
#include "kernels/common/parallel_for.h"

namespace tandem::kernels {
namespace {

constexpr int64_t kCpuChunkRows = 64;

}  // namespace

Status CheckLmHeadLossShape(const LmHeadLossShape& s) {
  if (s.num_rows < 0 || s.num_pairs < 0 || s.hidden <= 0 || s.vocab <= 0) {
    return InvalidArgument("lm head loss: hidden and vocab must be > 0, rows and pairs >= 0");
  }
  if (!(s.temperature > 0.f) || !std::isfinite(s.temperature)) {
    return InvalidArgument("lm head loss: temperature must be finite and > 0");
  }
  return Status::Ok();
}

Status CheckLmHeadLossPairs(const LmHeadLossShape& s, const int32_t* rows, const int32_t* labels) {
  for (int64_t i = 0; i < s.num_pairs; ++i) {
    if (rows[i] < 0 || rows[i] >= s.num_rows || labels[i] < 0 || labels[i] >= s.vocab) {
      return InvalidArgument("lm head loss: pair " + std::to_string(i) + " (row " + std::to_string(rows[i]) +
                             ", label " + std::to_string(labels[i]) + ") out of range");
    }
  }
  return Status::Ok();
}

Status LmHeadLossForwardCpu(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                            const int32_t* labels, float* logprob, float* entropy, float* lse, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossShape(s), "lm head loss forward (cpu)");
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossPairs(s, rows, labels), "lm head loss forward (cpu)");
  const int64_t H = s.hidden, V = s.vocab;
  const float inv_t = 1.f / s.temperature;
  std::vector<float> lse_v(s.num_rows);
  ParallelFor(s.num_rows, threads, [&](int64_t r) {
    float m = -INFINITY, sum = 0.f, pz = 0.f;  // pz: sum exp(z - m) z
    for (int64_t v = 0; v < V; ++v) {
      const float z = Dot(hidden + r * H, weight + v * H, H) * inv_t;
      if (z > m) {
        const float c = std::exp(m - z);
        sum *= c;
        pz *= c;
        m = z;
      }
      const float e = std::exp(z - m);
      sum += e;
      pz += e * z;
    }
    lse_v[r] = m + std::log(sum);
    if (lse != nullptr) lse[r] = lse_v[r];
    if (entropy != nullptr) entropy[r] = lse_v[r] - pz / sum;
  });
  for (int64_t i = 0; i < s.num_pairs; ++i) {
    logprob[i] = Dot(hidden + int64_t{rows[i]} * H, weight + int64_t{labels[i]} * H, H) * inv_t - lse_v[rows[i]];
  }
  return Status::Ok();
}

Status LmHeadLossBackwardCpu(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                             const int32_t* labels, const float* lse, const float* entropy, const float* grad_logprob,
                             const float* grad_entropy, float* grad_hidden, float* grad_weight, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossShape(s), "lm head loss backward (cpu)");
  TANDEM_RETURN_IF_ERROR(CheckLmHeadLossPairs(s, rows, labels), "lm head loss backward (cpu)");
  const int64_t N = s.num_rows, H = s.hidden, V = s.vocab;
  const float inv_t = 1.f / s.temperature;
  std::vector<float> gsum(N, 0.f);
  std::vector<std::vector<int64_t>> pairs_of(N);
  for (int64_t i = 0; i < s.num_pairs; ++i) {
    if (grad_logprob == nullptr) break;
    gsum[rows[i]] += grad_logprob[i];
    pairs_of[rows[i]].push_back(i);
  }
  std::fill(grad_weight, grad_weight + V * H, 0.f);
  std::vector<float> dz(kCpuChunkRows * V);
  for (int64_t r0 = 0; r0 < N; r0 += kCpuChunkRows) {
    const int64_t rows_in = std::min(kCpuChunkRows, N - r0);
    ParallelFor(rows_in, threads, [&](int64_t i) {
      const int64_t r = r0 + i;
      const float ge = grad_entropy ? grad_entropy[r] : 0.f;
      float* d = dz.data() + i * V;
      for (int64_t v = 0; v < V; ++v) {
        const float z = Dot(hidden + r * H, weight + v * H, H) * inv_t;
        const float p = std::exp(z - lse[r]);
        d[v] = (-gsum[r] * p - ge * p * (z - lse[r] + entropy[r])) * inv_t;
      }
      for (int64_t j : pairs_of[r]) d[labels[j]] += grad_logprob[j] * inv_t;
      float* gh = grad_hidden + r * H;
      std::fill(gh, gh + H, 0.f);
      for (int64_t v = 0; v < V; ++v) {
        for (int64_t x = 0; x < H; ++x) gh[x] += d[v] * weight[v * H + x];
      }
    });
    ParallelFor(V, threads, [&](int64_t v) {
      float* gw = grad_weight + v * H;
      for (int64_t i = 0; i < rows_in; ++i) {
        const float d = dz[i * V + v];
        const float* h = hidden + (r0 + i) * H;
        for (int64_t x = 0; x < H; ++x) gw[x] += d * h[x];
      }
    });
  }
  return Status::Ok();
}

}  // namespace tandem::kernels

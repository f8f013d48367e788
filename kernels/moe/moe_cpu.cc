// MoE CPU implementation (moe.h): top-k by repeated argmax, permutation by a
// counting sort, experts in parallel (each expert owns its weight rows and
// gradient), unpermute and the input gradient in parallel over tokens. fp32.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>

#include "kernels/moe/moe.h"
#include "kernels/common/parallel_for.h"

namespace tandem::kernels {
namespace {

float Silu(float g) { return g / (1.f + std::exp(-g)); }

// Rows of expert e: gu [n, 2I], act [n, I], y [n, H] for xp [n, H].
void ExpertForward(const MoeShape& s, int64_t e, const std::vector<float>& xp, int64_t n, const float* wgu,
                   const float* wd, std::vector<float>& gu, std::vector<float>& act, std::vector<float>& y) {
  const int64_t H = s.hidden, I = s.inter;
  gu.assign(n * 2 * I, 0.f);
  act.assign(n * I, 0.f);
  y.assign(n * H, 0.f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      const float xv = xp[r * H + h];
      const float* w = wgu + (e * H + h) * 2 * I;
      for (int64_t c = 0; c < 2 * I; ++c) gu[r * 2 * I + c] += xv * w[c];
    }
    for (int64_t c = 0; c < I; ++c) act[r * I + c] = Silu(gu[r * 2 * I + c]) * gu[r * 2 * I + I + c];
    for (int64_t c = 0; c < I; ++c) {
      const float a = act[r * I + c];
      const float* w = wd + (e * I + c) * H;
      for (int64_t h = 0; h < H; ++h) y[r * H + h] += a * w[h];
    }
  }
}

}  // namespace

Status CheckMoeShape(const MoeShape& s) {
  if (s.tokens < 0 || s.hidden <= 0 || s.inter <= 0 || s.experts <= 0 || s.top_k <= 0 || s.top_k > s.experts) {
    return InvalidArgument("moe: need tokens >= 0, hidden, inter, experts > 0 and 0 < top_k <= experts");
  }
  return Status::Ok();
}

StatusOr<RouterOutput> MoeRouterCpu(const MoeShape& s, const float* logits) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe router (cpu)");
  const int64_t T = s.tokens, E = s.experts, K = s.top_k;
  RouterOutput r;
  r.scores.resize(T * E);
  r.topk_idx.resize(T * K);
  r.topk_weight.resize(T * K);
  r.counts.assign(E, 0);
  r.score_sum.assign(E, 0.f);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    float* sc = r.scores.data() + t * E;
    if (s.score == RouterScore::kSoftmax) {
      const float mx = *std::max_element(l, l + E);
      float sum = 0.f;
      for (int64_t e = 0; e < E; ++e) sum += (sc[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < E; ++e) sc[e] /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) sc[e] = 1.f / (1.f + std::exp(-l[e]));
    }
    float sel = 0.f;
    for (int64_t j = 0; j < K; ++j) {
      int32_t best = -1;
      for (int32_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= r.topk_idx[t * K + i] == e;
        if (!taken && (best < 0 || sc[e] > sc[best])) best = e;
      }
      r.topk_idx[t * K + j] = best;
      sel += sc[best];
    }
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = r.topk_idx[t * K + j];
      r.topk_weight[t * K + j] = s.renormalize ? sc[e] / sel : sc[e];
      ++r.counts[e];
    }
    for (int64_t e = 0; e < E; ++e) r.score_sum[e] += sc[e];
  }
  return r;
}

StatusOr<PermutePlan> MoePermutePlanCpu(const MoeShape& s, const int32_t* topk_idx) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe permute (cpu)");
  const int64_t n = s.tokens * s.top_k;
  PermutePlan p;
  p.offsets.assign(s.experts + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (topk_idx[i] < 0 || topk_idx[i] >= s.experts) {
      return InvalidArgument("moe permute: expert " + std::to_string(topk_idx[i]) + " out of range at " + std::to_string(i));
    }
    ++p.offsets[topk_idx[i] + 1];
  }
  for (int32_t e = 0; e < s.experts; ++e) p.offsets[e + 1] += p.offsets[e];
  std::vector<int32_t> next(p.offsets.begin(), p.offsets.end() - 1);
  p.perm_pos.resize(n);
  p.perm_src.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = next[topk_idx[i]]++;
    p.perm_pos[i] = r;
    p.perm_src[r] = static_cast<int32_t>(i);
  }
  return p;
}

Status MoeExpertsForwardCpu(const MoeShape& s, const PermutePlan& p, const float* x, const float* wgu, const float* wd,
                            const float* topk_weight, float* out, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe experts forward (cpu)");
  const int64_t T = s.tokens, H = s.hidden, K = s.top_k;
  std::vector<float> yp(T * K * H);
  ParallelFor(s.experts, threads, [&](int64_t e) {
    const int64_t r0 = p.offsets[e], n = p.offsets[e + 1] - r0;
    if (n == 0) return;
    std::vector<float> xp(n * H), gu, act, y;
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + (p.perm_src[r0 + r] / K) * H, H, xp.begin() + r * H);
    ExpertForward(s, e, xp, n, wgu, wd, gu, act, y);
    std::copy(y.begin(), y.end(), yp.begin() + r0 * H);
  });
  ParallelFor(T, threads, [&](int64_t t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.f);
    for (int64_t j = 0; j < K; ++j) {
      const float w = topk_weight[t * K + j];
      const float* y = yp.data() + int64_t{p.perm_pos[t * K + j]} * H;
      for (int64_t h = 0; h < H; ++h) o[h] += w * y[h];
    }
  });
  return Status::Ok();
}

Status MoeExpertsBackwardCpu(const MoeShape& s, const PermutePlan& p, const float* x, const float* wgu,
                             const float* wd, const float* topk_weight, const float* dout, float* dx, float* dwgu,
                             float* dwd, float* dtopk_weight, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe experts backward (cpu)");
  const int64_t T = s.tokens, H = s.hidden, I = s.inter, K = s.top_k;
  std::vector<float> dxp(T * K * H, 0.f);
  ParallelFor(s.experts, threads, [&](int64_t e) {
    float* gwgu = dwgu + e * H * 2 * I;
    float* gwd = dwd + e * I * H;
    std::fill(gwgu, gwgu + H * 2 * I, 0.f);
    std::fill(gwd, gwd + I * H, 0.f);
    const int64_t r0 = p.offsets[e], n = p.offsets[e + 1] - r0;
    if (n == 0) return;
    std::vector<float> xp(n * H), gu, act, y, dgu(2 * I), dact(I);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + (p.perm_src[r0 + r] / K) * H, H, xp.begin() + r * H);
    ExpertForward(s, e, xp, n, wgu, wd, gu, act, y);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t src = p.perm_src[r0 + r], t = src / K;
      const float w = topk_weight[src];
      const float* go = dout + t * H;
      float dw = 0.f;
      for (int64_t h = 0; h < H; ++h) dw += y[r * H + h] * go[h];
      dtopk_weight[src] = dw;
      for (int64_t c = 0; c < I; ++c) {
        const float* wrow = wd + (e * I + c) * H;
        float* grow = gwd + c * H;
        const float a = act[r * I + c];
        float v = 0.f;
        for (int64_t h = 0; h < H; ++h) {
          v += w * go[h] * wrow[h];
          grow[h] += a * w * go[h];
        }
        const float g = gu[r * 2 * I + c], u = gu[r * 2 * I + I + c];
        const float sg = 1.f / (1.f + std::exp(-g));
        dgu[c] = v * u * sg * (1.f + g * (1.f - sg));
        dgu[I + c] = v * g * sg;
      }
      float* dxr = dxp.data() + (r0 + r) * H;
      for (int64_t h = 0; h < H; ++h) {
        const float* wrow = wgu + (e * H + h) * 2 * I;
        float* grow = gwgu + h * 2 * I;
        const float xv = xp[r * H + h];
        float v = 0.f;
        for (int64_t c = 0; c < 2 * I; ++c) {
          v += dgu[c] * wrow[c];
          grow[c] += xv * dgu[c];
        }
        dxr[h] = v;
      }
    }
  });
  ParallelFor(T, threads, [&](int64_t t) {
    float* d = dx + t * H;
    std::fill(d, d + H, 0.f);
    for (int64_t j = 0; j < K; ++j) {
      const float* g = dxp.data() + int64_t{p.perm_pos[t * K + j]} * H;
      for (int64_t h = 0; h < H; ++h) d[h] += g[h];
    }
  });
  return Status::Ok();
}

}  // namespace tandem::kernels

namespace tandem::kernels {
Status MoeRouterBackwardCpu(const MoeShape& s, const RouterOutput& r, const float* grad_topk_weight,
                            const float* grad_score_sum, float* grad_logits) {
  TANDEM_RETURN_IF_ERROR(CheckMoeShape(s), "moe router backward (cpu)");
  if (r.scores.size() != static_cast<size_t>(s.tokens * s.experts) ||
      r.topk_idx.size() != static_cast<size_t>(s.tokens * s.top_k)) {
    return InvalidArgument("moe router backward: router output does not match the shape");
  }
  MoeRouterBackwardRef(s, r, grad_topk_weight, grad_score_sum, grad_logits);
  return Status::Ok();
}
}  // namespace tandem::kernels

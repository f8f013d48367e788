// MoE oracle (moe.h): the definitions, written plainly. Top-k by a full stable
// sort, the permutation by a stable sort on expert, GEMMs in fp64.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/moe/moe.h"

namespace tandem::kernels {
namespace {
double Silu(double g) { return g / (1.0 + std::exp(-g)); }
double SiluGrad(double g) {
  const double s = 1.0 / (1.0 + std::exp(-g));
  return s * (1.0 + g * (1.0 - s));
}
}  // namespace

RouterOutput MoeRouterRef(const MoeShape& s, const float* logits) {
  const int64_t T = s.tokens, E = s.experts, K = s.top_k;
  RouterOutput r;
  r.scores.resize(T * E);
  r.topk_idx.resize(T * K);
  r.topk_weight.resize(T * K);
  r.counts.assign(E, 0);
  r.score_sum.assign(E, 0.f);
  std::vector<double> sc(E);
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    if (s.score == RouterScore::kSoftmax) {
      const double mx = *std::max_element(l, l + E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (sc[e] = std::exp(l[e] - mx));
      for (double& x : sc) x /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) sc[e] = 1.0 / (1.0 + std::exp(-double(l[e])));
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sc[a] > sc[b]; });
    double sel = 0;
    for (int64_t j = 0; j < K; ++j) sel += sc[order[j]];
    for (int64_t j = 0; j < K; ++j) {
      r.topk_idx[t * K + j] = order[j];
      r.topk_weight[t * K + j] = static_cast<float>(s.renormalize ? sc[order[j]] / sel : sc[order[j]]);
      ++r.counts[order[j]];
    }
    for (int64_t e = 0; e < E; ++e) {
      r.scores[t * E + e] = static_cast<float>(sc[e]);
      r.score_sum[e] += static_cast<float>(sc[e]);
    }
  }
  return r;
}

void MoeRouterBackwardRef(const MoeShape& s, const RouterOutput& r, const float* gw, const float* gsum,
                          float* grad_logits) {
  const int64_t T = s.tokens, E = s.experts, K = s.top_k;
  std::vector<double> ds(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* sc = r.scores.data() + t * E;
    for (int64_t e = 0; e < E; ++e) ds[e] = gsum != nullptr ? gsum[e] : 0.0;
    double sel = 0, gdotw = 0;
    for (int64_t j = 0; j < K; ++j) {
      sel += sc[r.topk_idx[t * K + j]];
      gdotw += double(gw[t * K + j]) * r.topk_weight[t * K + j];
    }
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = r.topk_idx[t * K + j];
      ds[e] += s.renormalize ? (gw[t * K + j] - gdotw) / sel : gw[t * K + j];
    }
    if (s.score == RouterScore::kSoftmax) {
      double sds = 0;
      for (int64_t e = 0; e < E; ++e) sds += sc[e] * ds[e];
      for (int64_t e = 0; e < E; ++e) grad_logits[t * E + e] = static_cast<float>(sc[e] * (ds[e] - sds));
    } else {
      for (int64_t e = 0; e < E; ++e) grad_logits[t * E + e] = static_cast<float>(ds[e] * sc[e] * (1.0 - sc[e]));
    }
  }
}

PermutePlan MoePermutePlanRef(const MoeShape& s, const int32_t* topk_idx) {
  const int64_t n = s.tokens * s.top_k;
  PermutePlan p;
  p.perm_src.resize(n);
  std::iota(p.perm_src.begin(), p.perm_src.end(), 0);
  std::stable_sort(p.perm_src.begin(), p.perm_src.end(), [&](int32_t a, int32_t b) { return topk_idx[a] < topk_idx[b]; });
  p.perm_pos.resize(n);
  for (int64_t r = 0; r < n; ++r) p.perm_pos[p.perm_src[r]] = static_cast<int32_t>(r);
  p.offsets.assign(s.experts + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++p.offsets[topk_idx[i] + 1];
  for (int32_t e = 0; e < s.experts; ++e) p.offsets[e + 1] += p.offsets[e];
  return p;
}

namespace {
// Expert of permuted row r.
int32_t ExpertOf(const PermutePlan& p, int64_t r) {
  return static_cast<int32_t>(std::upper_bound(p.offsets.begin(), p.offsets.end(), r) - p.offsets.begin() - 1);
}
}  // namespace

void MoeExpertsForwardRef(const MoeShape& s, const PermutePlan& p, const float* x, const float* wgu, const float* wd,
                          const float* topk_weight, float* out) {
  const int64_t T = s.tokens, H = s.hidden, I = s.inter, K = s.top_k;
  std::vector<double> acc(T * H, 0.0), gu(2 * I), act(I);
  for (int64_t r = 0; r < T * K; ++r) {
    const int64_t e = ExpertOf(p, r), src = p.perm_src[r], t = src / K;
    const float* xe = x + t * H;
    for (int64_t c = 0; c < 2 * I; ++c) {
      double v = 0;
      for (int64_t h = 0; h < H; ++h) v += double(xe[h]) * wgu[(e * H + h) * 2 * I + c];
      gu[c] = v;
    }
    for (int64_t c = 0; c < I; ++c) act[c] = Silu(gu[c]) * gu[I + c];
    for (int64_t h = 0; h < H; ++h) {
      double v = 0;
      for (int64_t c = 0; c < I; ++c) v += act[c] * wd[(e * I + c) * H + h];
      acc[t * H + h] += double(topk_weight[src]) * v;
    }
  }
  for (int64_t i = 0; i < T * H; ++i) out[i] = static_cast<float>(acc[i]);
}

void MoeExpertsBackwardRef(const MoeShape& s, const PermutePlan& p, const float* x, const float* wgu, const float* wd,
                           const float* topk_weight, const float* dout, float* dx, float* dwgu, float* dwd,
                           float* dtopk_weight) {
  const int64_t T = s.tokens, H = s.hidden, I = s.inter, K = s.top_k, E = s.experts;
  std::vector<double> gx(T * H, 0.0), ggu(E * H * 2 * I, 0.0), gd(E * I * H, 0.0);
  std::vector<double> gu(2 * I), act(I), dact(I), dgu(2 * I);
  for (int64_t r = 0; r < T * K; ++r) {
    const int64_t e = ExpertOf(p, r), src = p.perm_src[r], t = src / K;
    const float* xe = x + t * H;
    const float* go = dout + t * H;
    for (int64_t c = 0; c < 2 * I; ++c) {
      double v = 0;
      for (int64_t h = 0; h < H; ++h) v += double(xe[h]) * wgu[(e * H + h) * 2 * I + c];
      gu[c] = v;
    }
    for (int64_t c = 0; c < I; ++c) act[c] = Silu(gu[c]) * gu[I + c];
    double dw = 0;
    for (int64_t h = 0; h < H; ++h) {
      double v = 0;
      for (int64_t c = 0; c < I; ++c) v += act[c] * wd[(e * I + c) * H + h];
      dw += v * go[h];
    }
    dtopk_weight[src] = static_cast<float>(dw);
    const double w = topk_weight[src];
    for (int64_t c = 0; c < I; ++c) {
      double v = 0;
      for (int64_t h = 0; h < H; ++h) {
        v += w * go[h] * wd[(e * I + c) * H + h];
        gd[(e * I + c) * H + h] += act[c] * w * go[h];
      }
      dact[c] = v;
      dgu[c] = v * gu[I + c] * SiluGrad(gu[c]);
      dgu[I + c] = v * Silu(gu[c]);
    }
    for (int64_t h = 0; h < H; ++h) {
      double v = 0;
      for (int64_t c = 0; c < 2 * I; ++c) {
        v += dgu[c] * wgu[(e * H + h) * 2 * I + c];
        ggu[(e * H + h) * 2 * I + c] += double(xe[h]) * dgu[c];
      }
      gx[t * H + h] += v;
    }
  }
  for (int64_t i = 0; i < T * H; ++i) dx[i] = static_cast<float>(gx[i]);
  for (size_t i = 0; i < ggu.size(); ++i) dwgu[i] = static_cast<float>(ggu[i]);
  for (size_t i = 0; i < gd.size(); ++i) dwd[i] = static_cast<float>(gd[i]);
}

}  // namespace tandem::kernels

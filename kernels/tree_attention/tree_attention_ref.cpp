// Tree attention oracle (tree_attention.h): the definition, written plainly.
// For each query it enumerates the visible keys by walking parent segments in
// the segment table, and accumulates in fp64. It never reads the tile plan.
#include <cmath>
#include <vector>

#include "kernels/tree_attention/tree_attention.h"

namespace tandem::kernels {
namespace {

// Visible keys of query t: its own segment up to t, then every ancestor.
void VisibleKeys(const Forest& f, const std::vector<int32_t>& seg_of, int32_t t, std::vector<int32_t>& keys) {
  keys.clear();
  int32_t s = seg_of[t];
  for (int32_t k = f.segments[s].start; k <= t; ++k) keys.push_back(k);
  for (s = f.segments[s].parent; s >= 0; s = f.segments[s].parent) {
    for (int32_t k = f.segments[s].start; k < f.segments[s].start + f.segments[s].length; ++k) keys.push_back(k);
  }
}

struct Dims {
  int64_t T, Hq, Hkv, D, group;
  explicit Dims(const TreeAttentionShape& s)
      : T(s.num_tokens), Hq(s.num_q_heads), Hkv(s.num_kv_heads), D(s.head_dim), group(s.num_q_heads / s.num_kv_heads) {}
  int64_t Q(int64_t t, int64_t h) const { return (t * Hq + h) * D; }
  int64_t KV(int64_t t, int64_t h) const { return (t * Hkv + h / group) * D; }
};

// Probabilities of query t, head h over `keys`; returns log-sum-exp.
double Probs(const Dims& d, float scale, const float* q, const float* k, const std::vector<int32_t>& keys, int64_t t,
             int64_t h, std::vector<double>& p) {
  p.assign(keys.size(), 0.0);
  double mx = -INFINITY;
  for (size_t j = 0; j < keys.size(); ++j) {
    double s = 0;
    for (int64_t x = 0; x < d.D; ++x) s += static_cast<double>(q[d.Q(t, h) + x]) * k[d.KV(keys[j], h) + x];
    p[j] = s * scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (double& x : p) sum += (x = std::exp(x - mx));
  for (double& x : p) x /= sum;
  return mx + std::log(sum);
}

}  // namespace

void TreeAttentionForwardRef(const Forest& f, const TreeAttentionShape& shape, const float* q, const float* k,
                             const float* v, float* out, float* lse) {
  const Dims d(shape);
  const std::vector<int32_t> seg_of = TokenSegments(f);
  std::vector<int32_t> keys;
  std::vector<double> p, acc(d.D);
  for (int64_t t = 0; t < d.T; ++t) {
    VisibleKeys(f, seg_of, static_cast<int32_t>(t), keys);
    for (int64_t h = 0; h < d.Hq; ++h) {
      const double l = Probs(d, shape.scale, q, k, keys, t, h, p);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < keys.size(); ++j) {
        for (int64_t x = 0; x < d.D; ++x) acc[x] += p[j] * v[d.KV(keys[j], h) + x];
      }
      for (int64_t x = 0; x < d.D; ++x) out[d.Q(t, h) + x] = static_cast<float>(acc[x]);
      if (lse != nullptr) lse[h * d.T + t] = static_cast<float>(l);
    }
  }
}

void TreeAttentionBackwardRef(const Forest& f, const TreeAttentionShape& shape, const float* q, const float* k,
                              const float* v, const float* dout, float* dq, float* dk, float* dv) {
  const Dims d(shape);
  const std::vector<int32_t> seg_of = TokenSegments(f);
  std::vector<double> gq(d.T * d.Hq * d.D, 0.0), gk(d.T * d.Hkv * d.D, 0.0), gv(d.T * d.Hkv * d.D, 0.0);
  std::vector<int32_t> keys;
  std::vector<double> p, dp;
  for (int64_t t = 0; t < d.T; ++t) {
    VisibleKeys(f, seg_of, static_cast<int32_t>(t), keys);
    for (int64_t h = 0; h < d.Hq; ++h) {
      Probs(d, shape.scale, q, k, keys, t, h, p);
      dp.assign(keys.size(), 0.0);
      double pdp = 0;
      for (size_t j = 0; j < keys.size(); ++j) {
        for (int64_t x = 0; x < d.D; ++x) dp[j] += static_cast<double>(dout[d.Q(t, h) + x]) * v[d.KV(keys[j], h) + x];
        pdp += p[j] * dp[j];
      }
      for (size_t j = 0; j < keys.size(); ++j) {
        const double ds = p[j] * (dp[j] - pdp) * shape.scale;
        for (int64_t x = 0; x < d.D; ++x) {
          gv[d.KV(keys[j], h) + x] += p[j] * dout[d.Q(t, h) + x];
          gq[d.Q(t, h) + x] += ds * k[d.KV(keys[j], h) + x];
          gk[d.KV(keys[j], h) + x] += ds * q[d.Q(t, h) + x];
        }
      }
    }
  }
  for (size_t i = 0; i < gq.size(); ++i) dq[i] = static_cast<float>(gq[i]);
  for (size_t i = 0; i < gk.size(); ++i) dk[i] = static_cast<float>(gk[i]);
  for (size_t i = 0; i < gv.size(); ++i) dv[i] = static_cast<float>(gv[i]);
}

}  // namespace tandem::kernels

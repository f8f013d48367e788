// Tree attention, CPU implementation (tree_attention.h): the same tile plan
// and key-visibility rule (k <= q < kend[k]) as the CUDA kernels, fp32, work
// items (head x tile) spread over threads. Forward with an online softmax per
// query; backward in two deterministic passes: dQ per query tile, dK/dV per
// key tile over the transposed plan (no atomics).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/tree_attention/tree_attention.h"
#include "kernels/common/dot.h"
#include "kernels/common/parallel_for.h"

namespace tandem::kernels {

Status CheckTreeAttentionShape(const TreeAttentionShape& s) {
  if (s.num_tokens < 0 || s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0) {
    return InvalidArgument("tree attention: tokens must be >= 0, heads and head_dim > 0");
  }
  if (s.num_q_heads % s.num_kv_heads != 0) {
    return InvalidArgument("tree attention: num_q_heads " + std::to_string(s.num_q_heads) +
                           " is not a multiple of num_kv_heads " + std::to_string(s.num_kv_heads));
  }
  if (!(s.scale > 0.f) || !std::isfinite(s.scale)) return InvalidArgument("tree attention: scale must be finite and > 0");
  return Status::Ok();
}

namespace {

Status CheckPlan(const TreeAttentionPlan& plan, const TreeAttentionShape& s) {
  TANDEM_RETURN_IF_ERROR(CheckTreeAttentionShape(s));
  if (plan.num_tokens != s.num_tokens) {
    return InvalidArgument("tree attention: plan has " + std::to_string(plan.num_tokens) + " tokens, shape has " +
                           std::to_string(s.num_tokens));
  }
  return Status::Ok();
}

}  // namespace

Status TreeAttentionForwardCpu(const TreeAttentionPlan& plan, const TreeAttentionShape& s, const float* q,
                               const float* k, const float* v, float* out, float* lse, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckPlan(plan, s), "tree attention forward (cpu)");
  const int64_t T = s.num_tokens, Hq = s.num_q_heads, Hkv = s.num_kv_heads, D = s.head_dim, G = Hq / Hkv;
  const int64_t nt = plan.num_tiles;
  ParallelFor(Hq * nt, threads, [&](int64_t item) {
    const int64_t h = item / nt, qt = item % nt, hk = h / G;
    std::vector<float> acc(D), sc(kTreeTile);
    for (int64_t t = qt * kTreeTile; t < std::min<int64_t>(T, (qt + 1) * kTreeTile); ++t) {
      const float* qr = q + (t * Hq + h) * D;
      float m = -INFINITY, l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int32_t j = plan.q_ptr[qt]; j < plan.q_ptr[qt + 1]; ++j) {
        for (int64_t kt = plan.kv_ranges[2 * j]; kt < plan.kv_ranges[2 * j + 1]; ++kt) {
          const int64_t k0 = kt * kTreeTile, k1 = std::min<int64_t>(std::min<int64_t>(T, k0 + kTreeTile), t + 1);
          float tile_max = -INFINITY;
          for (int64_t kk = k0; kk < k1; ++kk) {
            const bool visible = t < plan.kend[kk];
            sc[kk - k0] = visible ? Dot(qr, k + (kk * Hkv + hk) * D, D) * s.scale : -INFINITY;
            tile_max = std::max(tile_max, sc[kk - k0]);
          }
          if (tile_max == -INFINITY) continue;
          const float m_new = std::max(m, tile_max);
          const float corr = std::exp(m - m_new);
          l *= corr;
          for (int64_t x = 0; x < D; ++x) acc[x] *= corr;
          for (int64_t kk = k0; kk < k1; ++kk) {
            if (sc[kk - k0] == -INFINITY) continue;
            const float p = std::exp(sc[kk - k0] - m_new);
            l += p;
            const float* vr = v + (kk * Hkv + hk) * D;
            for (int64_t x = 0; x < D; ++x) acc[x] += p * vr[x];
          }
          m = m_new;
        }
      }
      float* orow = out + (t * Hq + h) * D;
      for (int64_t x = 0; x < D; ++x) orow[x] = acc[x] / l;
      if (lse != nullptr) lse[h * T + t] = m + std::log(l);
    }
  });
  return Status::Ok();
}

Status TreeAttentionBackwardCpu(const TreeAttentionPlan& plan, const TreeAttentionShape& s, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                const float* dout, float* dq, float* dk, float* dv, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckPlan(plan, s), "tree attention backward (cpu)");
  const int64_t T = s.num_tokens, Hq = s.num_q_heads, Hkv = s.num_kv_heads, D = s.head_dim, G = Hq / Hkv;
  const int64_t nt = plan.num_tiles;
  // Delta[h][t] = dout . out
  std::vector<float> delta(Hq * T);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hq; ++h) delta[h * T + t] = Dot(dout + (t * Hq + h) * D, out + (t * Hq + h) * D, D);
  }
  // dQ: per (head, query tile).
  ParallelFor(Hq * nt, threads, [&](int64_t item) {
    const int64_t h = item / nt, qt = item % nt, hk = h / G;
    for (int64_t t = qt * kTreeTile; t < std::min<int64_t>(T, (qt + 1) * kTreeTile); ++t) {
      const float* qr = q + (t * Hq + h) * D;
      const float* dor = dout + (t * Hq + h) * D;
      float* dqr = dq + (t * Hq + h) * D;
      std::fill(dqr, dqr + D, 0.f);
      for (int32_t j = plan.q_ptr[qt]; j < plan.q_ptr[qt + 1]; ++j) {
        const int64_t kbeg = plan.kv_ranges[2 * j] * int64_t{kTreeTile};
        const int64_t kend = std::min<int64_t>(plan.kv_ranges[2 * j + 1] * int64_t{kTreeTile}, t + 1);
        for (int64_t kk = kbeg; kk < kend; ++kk) {
          if (t >= plan.kend[kk]) continue;
          const float* kr = k + (kk * Hkv + hk) * D;
          const float p = std::exp(Dot(qr, kr, D) * s.scale - lse[h * T + t]);
          const float ds = p * (Dot(dor, v + (kk * Hkv + hk) * D, D) - delta[h * T + t]) * s.scale;
          for (int64_t x = 0; x < D; ++x) dqr[x] += ds * kr[x];
        }
      }
    }
  });
  // dK, dV: per (kv head, key tile), over the query tiles that see it.
  ParallelFor(Hkv * nt, threads, [&](int64_t item) {
    const int64_t hk = item / nt, kt = item % nt;
    for (int64_t kk = kt * kTreeTile; kk < std::min<int64_t>(T, (kt + 1) * kTreeTile); ++kk) {
      const float* kr = k + (kk * Hkv + hk) * D;
      const float* vr = v + (kk * Hkv + hk) * D;
      float* dkr = dk + (kk * Hkv + hk) * D;
      float* dvr = dv + (kk * Hkv + hk) * D;
      std::fill(dkr, dkr + D, 0.f);
      std::fill(dvr, dvr + D, 0.f);
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int32_t j = plan.k_ptr[kt]; j < plan.k_ptr[kt + 1]; ++j) {
          const int64_t tbeg = std::max<int64_t>(plan.q_ranges[2 * j] * int64_t{kTreeTile}, kk);
          const int64_t tend = std::min<int64_t>(plan.q_ranges[2 * j + 1] * int64_t{kTreeTile}, plan.kend[kk]);
          for (int64_t t = tbeg; t < tend; ++t) {
            const float* qr = q + (t * Hq + h) * D;
            const float* dor = dout + (t * Hq + h) * D;
            const float p = std::exp(Dot(qr, kr, D) * s.scale - lse[h * T + t]);
            const float ds = p * (Dot(dor, vr, D) - delta[h * T + t]) * s.scale;
            for (int64_t x = 0; x < D; ++x) {
              dvr[x] += p * dor[x];
              dkr[x] += ds * qr[x];
            }
          }
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace tandem::kernels

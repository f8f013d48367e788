// CPU implementation of the fused decoder glue (fused.h): fp32, no rounding
// (the CPU model's dtype), rows split into at most kBlocks fixed blocks run in
// parallel; each block sums its own grad_weight, the blocks' sums are added in
// block order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/parallel_for.h"
#include "kernels/fused/fused.h"

namespace tandem::kernels {
namespace {

constexpr int64_t kBlocks = 64;

// Runs fn(row_begin, row_end, block) over fixed blocks of rows.
template <typename Fn>
int64_t ForRowBlocks(int64_t rows, int threads, Fn fn) {
  const int64_t blocks = std::max<int64_t>(1, std::min(rows, kBlocks));
  const int64_t per = (rows + blocks - 1) / blocks;
  ParallelFor(blocks, threads, [&](int64_t b) {
    const int64_t lo = b * per, hi = std::min(rows, lo + per);
    if (lo < hi) fn(lo, hi, b);
  });
  return blocks;
}

// One row's RMSNorm backward (fp32): dh = rstd*dxn - h*rstd^3*mean(dxn*h),
// dxn = gy*w; adds gy*h*rstd to gw.
void NormRowBackward(int n, float eps, const float* h, const float* w, const float* gy, float* dh, float* gw) {
  float ss = 0, dot = 0;
  for (int c = 0; c < n; ++c) {
    ss += h[c] * h[c];
    dot += gy[c] * w[c] * h[c];
  }
  const float rstd = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  const float coef = rstd * rstd * rstd * dot / static_cast<float>(n);
  for (int c = 0; c < n; ++c) {
    dh[c] = rstd * gy[c] * w[c] - h[c] * coef;
    gw[c] += gy[c] * h[c] * rstd;
  }
}

void SumBlocks(const std::vector<float>& partial, int64_t blocks, int n, float* out) {
  for (int c = 0; c < n; ++c) {
    float s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[static_cast<size_t>(b * n + c)];
    out[c] = s;
  }
}

}  // namespace

Status CheckRmsNormShape(const RmsNormShape& s) {
  if (s.rows < 0 || s.cols <= 0 || s.cols % 2 != 0)
    return InvalidArgument("rms norm: rows >= 0 and an even cols > 0 expected, got rows=" + std::to_string(s.rows) +
                           " cols=" + std::to_string(s.cols));
  if (!std::isfinite(s.eps) || s.eps < 0) return InvalidArgument("rms norm: eps must be finite and >= 0");
  return Status::Ok();
}

Status CheckQkRotaryShape(const QkRotaryShape& s) {
  if (s.tokens < 0 || s.heads <= 0 || s.head_dim <= 0 || s.head_dim % 4 != 0)
    return InvalidArgument("qk norm rotary: tokens >= 0, heads > 0 and head_dim a positive multiple of 4 expected, "
                           "got tokens=" + std::to_string(s.tokens) + " heads=" + std::to_string(s.heads) +
                           " head_dim=" + std::to_string(s.head_dim));
  if (!std::isfinite(s.eps) || s.eps < 0) return InvalidArgument("qk norm rotary: eps must be finite and >= 0");
  return Status::Ok();
}

Status RmsNormForwardCpu(const RmsNormShape& s, const float* x, const float* residual, const float* weight,
                         float* sum_out, float* y, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckRmsNormShape(s), "cpu");
  const int n = s.cols;
  ForRowBlocks(s.rows, threads, [&](int64_t lo, int64_t hi, int64_t) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t o = row * n;
      const float* h = x + o;
      if (residual) {
        for (int c = 0; c < n; ++c) sum_out[o + c] = x[o + c] + residual[o + c];
        h = sum_out + o;
      }
      float ss = 0;
      for (int c = 0; c < n; ++c) ss += h[c] * h[c];
      const float rstd = 1.f / std::sqrt(ss / static_cast<float>(n) + s.eps);
      for (int c = 0; c < n; ++c) y[o + c] = weight[c] * (h[c] * rstd);
    }
  });
  return Status::Ok();
}

Status RmsNormBackwardCpu(const RmsNormShape& s, const float* h, const float* weight, const float* grad_y,
                          const float* grad_h, float* grad_in, float* grad_weight, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckRmsNormShape(s), "cpu");
  const int n = s.cols;
  std::vector<float> partial(static_cast<size_t>(kBlocks * n), 0.f);
  const int64_t blocks = ForRowBlocks(s.rows, threads, [&](int64_t lo, int64_t hi, int64_t b) {
    float* gw = partial.data() + b * n;
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t o = row * n;
      NormRowBackward(n, s.eps, h + o, weight, grad_y + o, grad_in + o, gw);
      if (grad_h)
        for (int c = 0; c < n; ++c) grad_in[o + c] += grad_h[o + c];
    }
  });
  SumBlocks(partial, blocks, n, grad_weight);
  return Status::Ok();
}

Status QkNormRotaryForwardCpu(const QkRotaryShape& s, const float* x, const float* weight, const float* cos,
                              const float* sin, float* y, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckQkRotaryShape(s), "cpu");
  const int d = s.head_dim, half = d / 2;
  ForRowBlocks(s.tokens * s.heads, threads, [&](int64_t lo, int64_t hi, int64_t) {
    std::vector<float> nrm(static_cast<size_t>(d));
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t t = row / s.heads, o = row * d;
      float ss = 0;
      for (int i = 0; i < d; ++i) ss += x[o + i] * x[o + i];
      const float rstd = 1.f / std::sqrt(ss / static_cast<float>(d) + s.eps);
      for (int i = 0; i < d; ++i) nrm[static_cast<size_t>(i)] = weight[i] * (x[o + i] * rstd);
      for (int i = 0; i < d; ++i) {
        const float rot = i < half ? -nrm[static_cast<size_t>(i + half)] : nrm[static_cast<size_t>(i - half)];
        y[o + i] = nrm[static_cast<size_t>(i)] * cos[t * d + i] + rot * sin[t * d + i];
      }
    }
  });
  return Status::Ok();
}

Status QkNormRotaryBackwardCpu(const QkRotaryShape& s, const float* x, const float* weight, const float* cos,
                               const float* sin, const float* grad_y, float* grad_x, float* grad_weight,
                               int threads) {
  TANDEM_RETURN_IF_ERROR(CheckQkRotaryShape(s), "cpu");
  const int d = s.head_dim, half = d / 2;
  std::vector<float> partial(static_cast<size_t>(kBlocks * d), 0.f);
  const int64_t blocks = ForRowBlocks(s.tokens * s.heads, threads, [&](int64_t lo, int64_t hi, int64_t b) {
    std::vector<float> dn(static_cast<size_t>(d));
    float* gw = partial.data() + b * d;
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t t = row / s.heads, o = row * d;
      const float* g = grad_y + o;
      const float* c = cos + t * d;
      const float* sn = sin + t * d;
      for (int i = 0; i < d; ++i)
        dn[static_cast<size_t>(i)] = g[i] * c[i] + (i < half ? g[i + half] * sn[i + half] : -g[i - half] * sn[i - half]);
      NormRowBackward(d, s.eps, x + o, weight, dn.data(), grad_x + o, gw);
    }
  });
  SumBlocks(partial, blocks, d, grad_weight);
  return Status::Ok();
}

Status SwigluForwardCpu(int64_t n, const float* gate, const float* up, float* y, int threads) {
  if (n < 0) return InvalidArgument("swiglu: n must be >= 0");
  ForRowBlocks(n, threads, [&](int64_t lo, int64_t hi, int64_t) {
    for (int64_t i = lo; i < hi; ++i) y[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  });
  return Status::Ok();
}

Status SwigluBackwardCpu(int64_t n, const float* gate, const float* up, const float* grad_y, float* grad_gate,
                         float* grad_up, int threads) {
  if (n < 0) return InvalidArgument("swiglu: n must be >= 0");
  ForRowBlocks(n, threads, [&](int64_t lo, int64_t hi, int64_t) {
    for (int64_t i = lo; i < hi; ++i) {
      const float g = gate[i], sig = 1.f / (1.f + std::exp(-g));
      grad_up[i] = grad_y[i] * g * sig;
      grad_gate[i] = grad_y[i] * up[i] * sig * (1.f + g * (1.f - sig));
    }
  });
  return Status::Ok();
}

}  // namespace tandem::kernels

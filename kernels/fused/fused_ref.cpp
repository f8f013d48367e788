// Oracles of the fused decoder glue (fused.h): HF's formulas written out one
// row / element at a time, fp64 between the rounding points. Slow and plain.
#include <cmath>
#include <vector>

#include "kernels/fused/fused.h"

namespace tandem::kernels {
namespace {

double Round(GlueRounding r, double v) {
  return r == GlueRounding::kBf16 ? static_cast<double>(RoundToBf16(static_cast<float>(v))) : v;
}

// RMSNorm backward of one row of n elements (stride 1): h, weight, grad of
// the output; adds grad_weight; writes the input gradient (before the final
// rounding and any residual gradient) to dh.
void NormRowBackward(GlueRounding r, int n, double eps, const double* h, const float* w, const double* gy,
                     double* dh, double* gw) {
  double ss = 0;
  for (int c = 0; c < n; ++c) ss += h[c] * h[c];
  // fp32 rstd as HF computes it: rsqrt of a fp32 mean.
  const double rstd = 1.0 / std::sqrt(ss / n + eps);
  std::vector<double> dxn(static_cast<size_t>(n));
  double dot = 0;
  for (int c = 0; c < n; ++c) {
    dxn[static_cast<size_t>(c)] = Round(r, gy[c] * w[c]);
    dot += dxn[static_cast<size_t>(c)] * h[c];
    gw[c] += Round(r, gy[c] * Round(r, h[c] * rstd));
  }
  for (int c = 0; c < n; ++c) dh[c] = rstd * dxn[static_cast<size_t>(c)] - h[c] * rstd * rstd * rstd * dot / n;
}

}  // namespace

void RmsNormForwardRef(const RmsNormShape& s, GlueRounding r, const float* x, const float* residual,
                       const float* weight, float* sum_out, float* y) {
  const int n = s.cols;
  std::vector<double> h(static_cast<size_t>(n));
  for (int64_t row = 0; row < s.rows; ++row) {
    const int64_t o = row * n;
    double ss = 0;
    for (int c = 0; c < n; ++c) {
      h[static_cast<size_t>(c)] = residual ? Round(r, double(x[o + c]) + residual[o + c]) : double(x[o + c]);
      if (residual) sum_out[o + c] = static_cast<float>(h[static_cast<size_t>(c)]);
      ss += h[static_cast<size_t>(c)] * h[static_cast<size_t>(c)];
    }
    const double rstd = 1.0 / std::sqrt(ss / n + s.eps);
    for (int c = 0; c < n; ++c)
      y[o + c] = static_cast<float>(Round(r, weight[c] * Round(r, h[static_cast<size_t>(c)] * rstd)));
  }
}

void RmsNormBackwardRef(const RmsNormShape& s, GlueRounding r, const float* h, const float* weight,
                        const float* grad_y, const float* grad_h, float* grad_in, float* grad_weight) {
  const int n = s.cols;
  std::vector<double> gw(static_cast<size_t>(n), 0.0), hd(static_cast<size_t>(n)), gd(static_cast<size_t>(n)),
      dh(static_cast<size_t>(n));
  for (int64_t row = 0; row < s.rows; ++row) {
    const int64_t o = row * n;
    for (int c = 0; c < n; ++c) hd[static_cast<size_t>(c)] = h[o + c], gd[static_cast<size_t>(c)] = grad_y[o + c];
    NormRowBackward(r, n, s.eps, hd.data(), weight, gd.data(), dh.data(), gw.data());
    for (int c = 0; c < n; ++c)
      grad_in[o + c] = static_cast<float>(Round(r, dh[static_cast<size_t>(c)] + (grad_h ? grad_h[o + c] : 0.0)));
  }
  for (int c = 0; c < n; ++c) grad_weight[c] = static_cast<float>(gw[static_cast<size_t>(c)]);
}

void QkNormRotaryForwardRef(const QkRotaryShape& s, GlueRounding r, const float* x, const float* weight,
                            const float* cos, const float* sin, float* y) {
  const int d = s.head_dim, half = d / 2;
  std::vector<double> nrm(static_cast<size_t>(d));
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int hd = 0; hd < s.heads; ++hd) {
      const int64_t o = (t * s.heads + hd) * d;
      double ss = 0;
      for (int i = 0; i < d; ++i) ss += double(x[o + i]) * x[o + i];
      const double rstd = 1.0 / std::sqrt(ss / d + s.eps);
      for (int i = 0; i < d; ++i) nrm[static_cast<size_t>(i)] = Round(r, weight[i] * Round(r, x[o + i] * rstd));
      for (int i = 0; i < d; ++i) {
        const double rot = i < half ? -nrm[static_cast<size_t>(i + half)] : nrm[static_cast<size_t>(i - half)];
        y[o + i] = static_cast<float>(
            Round(r, Round(r, nrm[static_cast<size_t>(i)] * cos[t * d + i]) + Round(r, rot * sin[t * d + i])));
      }
    }
  }
}

void QkNormRotaryBackwardRef(const QkRotaryShape& s, GlueRounding r, const float* x, const float* weight,
                             const float* cos, const float* sin, const float* grad_y, float* grad_x,
                             float* grad_weight) {
  const int d = s.head_dim, half = d / 2;
  std::vector<double> gw(static_cast<size_t>(d), 0.0), xd(static_cast<size_t>(d)), dn(static_cast<size_t>(d)),
      dx(static_cast<size_t>(d));
  for (int64_t t = 0; t < s.tokens; ++t) {
    const float* c = cos + t * d;
    const float* sn = sin + t * d;
    for (int hd = 0; hd < s.heads; ++hd) {
      const int64_t o = (t * s.heads + hd) * d;
      const float* g = grad_y + o;
      for (int i = 0; i < d; ++i) {
        // y_i = n_i c_i + rot_i s_i with rot_i = -n_{i+half} or n_{i-half}.
        const double other = i < half ? double(g[i + half]) * sn[i + half] : -double(g[i - half]) * sn[i - half];
        dn[static_cast<size_t>(i)] = Round(r, double(g[i]) * c[i] + other);
        xd[static_cast<size_t>(i)] = x[o + i];
      }
      NormRowBackward(r, d, s.eps, xd.data(), weight, dn.data(), dx.data(), gw.data());
      for (int i = 0; i < d; ++i) grad_x[o + i] = static_cast<float>(Round(r, dx[static_cast<size_t>(i)]));
    }
  }
  for (int i = 0; i < d; ++i) grad_weight[i] = static_cast<float>(gw[static_cast<size_t>(i)]);
}

void SwigluForwardRef(int64_t n, GlueRounding r, const float* gate, const float* up, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(Round(r, Round(r, g / (1.0 + std::exp(-g))) * up[i]));
  }
}

void SwigluBackwardRef(int64_t n, GlueRounding r, const float* gate, const float* up, const float* grad_y,
                       float* grad_gate, float* grad_up) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], sig = 1.0 / (1.0 + std::exp(-g));
    const double silu = Round(r, g * sig);
    const double ds = Round(r, double(grad_y[i]) * up[i]);
    grad_up[i] = static_cast<float>(Round(r, double(grad_y[i]) * silu));
    grad_gate[i] = static_cast<float>(Round(r, ds * sig * (1.0 + g * (1.0 - sig))));
  }
}

}  // namespace tandem::kernels

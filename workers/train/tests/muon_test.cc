// Muon's update (muon.h) against a reference written here from the
// published algorithm (Keller Jordan's muon.py: one matrix at a time, plain
// loops over the stack), and its properties: Newton–Schulz leaves every
// singular value near 1, the shape scales, the experts' halves are the
// reference's separate gate and up matrices, bad options are named.
#include "workers/train/muon.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

namespace tandem::train {
namespace {

// zeropower_via_newtonschulz5 for one matrix, fp32.
at::Tensor RefNewtonSchulz(at::Tensor g, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  at::Tensor x = g.to(at::kFloat);
  const bool tall = g.size(0) > g.size(1);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);
  for (int i = 0; i < steps; ++i) {
    at::Tensor A = x.mm(x.t());
    at::Tensor B = A * b + A.mm(A) * c;
    x = x * a + B.mm(x);
  }
  return tall ? x.t() : x;
}

// muon_update + the step, one [out, in] matrix.
void RefUpdate(at::Tensor w, at::Tensor grad, at::Tensor m, double lr, double beta, double wd) {
  m.copy_(m * beta + grad * (1 - beta));
  const at::Tensor u = grad * (1 - beta) + m * beta;  // nesterov: grad.lerp(m, beta)
  at::Tensor x = RefNewtonSchulz(u, 5) * std::sqrt(std::max(1.0, static_cast<double>(w.size(0)) / w.size(1)));
  w.copy_(w * (1 - lr * wd) - x * lr);
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(Muon, NewtonSchulzLeavesSingularValuesNearOne) {
  at::manual_seed(1);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{32, 32}, {64, 16}, {16, 96}, {3, 24, 40}}) {
    const at::Tensor g = at::randn(shape);
    const at::Tensor x = NewtonSchulz5(g, 5, at::kFloat);
    const at::Tensor s = at::linalg_svdvals(x);
    const double lo = s.min().item<double>(), hi = s.max().item<double>();
    std::printf("[muon] %s: singular values in [%.3f, %.3f]\n", c10::str(g.sizes()).c_str(), lo, hi);
    // The quintic's band: [0.68, 1.18] measured after five steps from a
    // normalised Gaussian matrix.
    EXPECT_GT(lo, 0.5);
    EXPECT_LT(hi, 1.25);
  }
}

TEST(Muon, UpdateEqualsTheReferenceOverSteps) {
  at::manual_seed(2);
  MuonOptions o;
  o.ns_dtype = at::kFloat;
  o.weight_decay = 0.1;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{48, 32}, {32, 80}}) {
    at::Tensor w = at::randn(shape), m = at::zeros(shape);
    at::Tensor rw = w.clone(), rm = m.clone();
    for (int step = 0; step < 10; ++step) {
      const at::Tensor g = at::randn(shape);
      MuonUpdate(w, g, m, 0.02, o);
      RefUpdate(rw, g.clone(), rm, 0.02, o.beta, o.weight_decay);
    }
    const double d = MaxDiff(w, rw);
    std::printf("[muon] %s after 10 steps: max |w - ref| %.3g\n", c10::str(w.sizes()).c_str(), d);
    EXPECT_LE(d, 1e-5);
    EXPECT_LE(MaxDiff(m, rm), 1e-6);
  }
}

TEST(Muon, ExpertsAreTheReferencesSeparateMatrices) {
  // A MoE experts slot: w_gate_up [E, H, 2I]; the reference updates each
  // expert's gate_proj and up_proj ([I, H]) on its own.
  const int64_t E = 3, H = 24, I = 10;
  at::manual_seed(3);
  MuonOptions o;
  o.ns_dtype = at::kFloat;
  at::Tensor w = at::randn({E, H, 2 * I}), m = at::zeros({E, H, 2 * I});
  const at::Tensor g = at::randn({E, H, 2 * I});
  const at::Tensor w0 = w.clone();
  const std::string name = "model.layers.0.mlp.experts.w_gate_up";
  const auto ws = MuonMatrices(name, w), gs = MuonMatrices(name, g), ms = MuonMatrices(name, m);
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(ws[0].sizes(), (std::vector<int64_t>{E, I, H}));
  for (size_t k = 0; k < ws.size(); ++k) MuonUpdate(ws[k], gs[k], ms[k], 0.05, o);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t half = 0; half < 2; ++half) {
      at::Tensor rw = w0[e].narrow(1, half * I, I).t().contiguous();  // gate_proj / up_proj [I, H]
      at::Tensor rg = g[e].narrow(1, half * I, I).t().contiguous();
      at::Tensor rm = at::zeros({I, H});
      RefUpdate(rw, rg, rm, 0.05, o.beta, o.weight_decay);
      EXPECT_LE(MaxDiff(w[e].narrow(1, half * I, I).t(), rw), 1e-5) << "expert " << e << " half " << half;
    }
  }
  const auto down = MuonMatrices("model.layers.0.mlp.experts.w_down", at::zeros({E, I, H}));
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].sizes(), (std::vector<int64_t>{E, H, I}));
  EXPECT_EQ(MuonMatrices("model.layers.0.self_attn.q_proj.weight", at::zeros({8, 4})).size(), 1u);
}

TEST(Muon, ScalesTakesAndOptions) {
  EXPECT_DOUBLE_EQ(MuonScale(64, 16, false), 2.0);
  EXPECT_DOUBLE_EQ(MuonScale(16, 64, false), 1.0);
  EXPECT_DOUBLE_EQ(MuonScale(16, 100, true), 2.0);
  EXPECT_TRUE(MuonTakes("model.layers.1.self_attn.o_proj.weight", {64, 64}));
  EXPECT_TRUE(MuonTakes("model.layers.1.mlp.experts.w_down", {8, 32, 64}));
  EXPECT_FALSE(MuonTakes("model.embed_tokens.weight", {300, 64}));
  EXPECT_FALSE(MuonTakes("lm_head.weight", {300, 64}));
  EXPECT_FALSE(MuonTakes("model.norm.weight", {64}));
  MuonOptions o;
  EXPECT_TRUE(Validate(o).ok());
  o.beta = 1.0;
  EXPECT_NE(Validate(o).message().find("beta"), std::string::npos);
  o = MuonOptions{};
  o.ns_steps = 0;
  EXPECT_NE(Validate(o).message().find("ns_steps"), std::string::npos);
  // bf16 iteration (the reference's) stays within bf16 of the fp32 one.
  at::manual_seed(4);
  const at::Tensor g = at::randn({40, 24});
  EXPECT_LE(MaxDiff(NewtonSchulz5(g, 5, at::kBFloat16), NewtonSchulz5(g, 5, at::kFloat)), 0.05);
}

}  // namespace
}  // namespace tandem::train

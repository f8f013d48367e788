// Muon's update (muon.h) against a reference written here from the
// published algorithm (Keller Jordan's muon.py: one matrix at a time, plain
// loops over the stack), and its properties: Newton–Schulz leaves every
// singular value near 1, the shape scales, the experts' halves are the
// reference's separate gate and up matrices, bad options are named.
#include "workers/train/muon.h"

#include <gtest/gtest.h>

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>

#include <cmath>

#include "workers/model/tests/model_test_util.h"

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
  // The bf16 iteration (the reference's) lands in the same band as the fp32
  // one: every singular value in NS5's [0.6, 1.2] (the quintic does not
  // converge to 1; 0.69-1.13 in fp32 here). The two are not close element by
  // element: the band is reached by a different path once the GEMMs round
  // to bf16, and how far apart depends on the CPU's bf16 GEMMs (13.7% in
  // Frobenius norm on an AMD EPYC, where an element-wise bound of 0.05 that
  // held on the machine it was written on failed at 0.068).
  at::manual_seed(4);
  const at::Tensor g = at::randn({40, 24});
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    const at::Tensor sv = at::linalg_svdvals(NewtonSchulz5(g, 5, dtype).to(at::kFloat));
    EXPECT_GE(sv.min().item<double>(), 0.6) << dtype;
    EXPECT_LE(sv.max().item<double>(), 1.2) << dtype;
  }
}

TEST(Muon, OwnersTakeTheLargestFirstToTheLeastLoadedRank) {
  EXPECT_EQ(MuonOwners({10, 40, 30, 20}, 2), (std::vector<int>{0, 0, 1, 1}));  // 40 -> 0, 30 -> 1, 20 -> 1, 10 -> 0
  EXPECT_EQ(MuonOwners({5, 5, 5}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(MuonOwners({7}, 4), (std::vector<int>{0}));
  const std::vector<int> three = MuonOwners({9, 9, 9, 1, 1, 1}, 3);
  std::vector<int64_t> load(3, 0);
  const std::vector<int64_t> sizes = {9, 9, 9, 1, 1, 1};
  for (size_t i = 0; i < sizes.size(); ++i) load[static_cast<size_t>(three[i])] += sizes[i];
  EXPECT_EQ(load, (std::vector<int64_t>{10, 10, 10}));
}

// The optimizer over a tiny MoE model: Muon's slots move as MuonUpdate
// moves them (after the global clip), every other slot exactly as AdamW
// over the whole model moves it; a restore at step 5 continues to the same
// step 10.
model::ParameterSet TinyParams() {
  static const model::ModelConfig c = model::testing::TinyConfig(/*moe=*/true, /*layers=*/3);
  model::ParameterSet p = model::ParameterSet::Create(c, at::Device(at::kCPU), at::kFloat);
  at::manual_seed(11);
  c10::NoGradGuard no_grad;
  for (const model::ParameterSet::Slot& s : p.slots()) s.leaf.detach().copy_(at::randn(s.leaf.sizes()) * 0.2);
  p.EnableGrad();
  return p;
}

void Grads(model::ParameterSet& p, int step) {
  at::manual_seed(500 + step);
  for (const at::Tensor& g : p.grad_buffers()) g.copy_(at::randn(g.sizes()) * (step % 4 == 1 ? 40.0 : 0.4));
}

TEST(MuonOptimizer, MuonOnTheMatricesAdamWOnTheRest) {
  MuonOptions mo;
  mo.ns_dtype = at::kFloat;
  mo.lr_scale = 5.0;
  AdamWOptions ao;
  ao.max_grad_norm = 8.0;  // every fourth step is clipped
  model::ParameterSet a = TinyParams(), b = TinyParams(), c = TinyParams();
  auto muon = Muon::Create(a, mo, ao);
  auto adamw = AdamW::Create(b, ao);
  ASSERT_TRUE(muon.ok()) << muon.status().ToString();
  ASSERT_TRUE(adamw.ok());
  std::vector<at::Tensor> momentum;
  for (const size_t i : (*muon)->muon_slots()) momentum.push_back(at::zeros(c.slots()[i].leaf.sizes()));
  // q, k, v, o in 3 layers; the dense layer's gate, up, down; each of the
  // two MoE layers' router and experts (w_gate_up, w_down).
  EXPECT_EQ((*muon)->muon_slots().size(), 3u * 4 + 3 + 2 * 3);
  for (int step = 0; step < 10; ++step) {
    const double lr = 1e-3 * (1 + step % 3);
    Grads(a, step);
    Grads(b, step);
    Grads(c, step);
    auto n1 = (*muon)->Step(lr);
    auto n2 = (*adamw)->Step(lr);
    ASSERT_TRUE(n1.ok() && n2.ok());
    EXPECT_EQ(*n1, *n2);
    ASSERT_TRUE(ClipGradNorm(c, ao.max_grad_norm).ok());
    c10::NoGradGuard no_grad;
    for (size_t k = 0; k < (*muon)->muon_slots().size(); ++k) {
      const model::ParameterSet::Slot& s = c.slots()[(*muon)->muon_slots()[k]];
      const auto ws = MuonMatrices(s.name, s.leaf.detach()), gs = MuonMatrices(s.name, s.leaf.grad()),
                 ms = MuonMatrices(s.name, momentum[k]);
      for (size_t j = 0; j < ws.size(); ++j) MuonUpdate(ws[j], gs[j], ms[j], lr * mo.lr_scale, mo);
    }
  }
  size_t muon_slots = 0;
  for (size_t i = 0; i < a.slots().size(); ++i) {
    const bool is_muon = MuonTakes(a.slots()[i].name, a.slots()[i].leaf.sizes());
    muon_slots += is_muon;
    const at::Tensor& want = is_muon ? c.slots()[i].leaf : b.slots()[i].leaf;
    EXPECT_TRUE(at::equal(a.slots()[i].leaf, want)) << a.slots()[i].name << (is_muon ? " (Muon)" : " (AdamW)");
  }
  EXPECT_EQ(muon_slots, (*muon)->muon_slots().size());

  // Restore at 5, on to 10.
  model::ParameterSet d = TinyParams(), e = TinyParams();
  auto straight = Muon::Create(d, mo, ao);
  auto first = Muon::Create(e, mo, ao);
  ASSERT_TRUE(straight.ok() && first.ok());
  for (int step = 0; step < 10; ++step) {
    Grads(d, step);
    ASSERT_TRUE((*straight)->Step(1e-3).ok());
    if (step < 5) {
      Grads(e, step);
      ASSERT_TRUE((*first)->Step(1e-3).ok());
    }
  }
  OptimizerState saved = (*first)->State();
  for (auto& [k, t] : saved.tensors) t = t.clone();
  EXPECT_EQ(saved.steps, 5);
  EXPECT_TRUE(saved.tensors.count("momentum/" + e.slots()[(*first)->muon_slots()[0]].name));
  auto resumed = Muon::Create(e, mo, ao);
  ASSERT_TRUE(resumed.ok());
  OptimizerState broken = saved;
  broken.tensors.erase("momentum/" + e.slots()[(*first)->muon_slots()[2]].name);
  const Status refused = (*resumed)->Restore(broken);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("momentum/"), std::string::npos) << refused.ToString();
  EXPECT_EQ((*resumed)->steps(), 0) << "nothing restored";
  ASSERT_TRUE((*resumed)->Restore(saved).ok());
  for (int step = 5; step < 10; ++step) {
    Grads(e, step);
    ASSERT_TRUE((*resumed)->Step(1e-3).ok());
  }
  for (size_t i = 0; i < d.slots().size(); ++i) EXPECT_TRUE(at::equal(d.slots()[i].leaf, e.slots()[i].leaf)) << d.slots()[i].name;
}

// Staged Muon (state_slabs.h) against native over the same steps: the
// momentum streamed through buffers just large enough for the largest
// matrix, so the stacks of experts are cut between matrices, never inside
// one; both parts (Muon's and AdamW's) share the buffers. A release and
// resume of the native state in the middle changes nothing.
TEST(MuonOptimizer, StagedEqualsNativeAndNeverCutsAMatrix) {
  MuonOptions mo;
  mo.ns_dtype = at::kFloat;
  AdamWOptions native_o, staged_o;
  model::ParameterSet a = TinyParams(), b = TinyParams();
  int64_t largest = 0, stacked = 0;
  for (const model::ParameterSet::Slot& s : a.slots()) {
    if (!MuonTakes(s.name, s.leaf.sizes())) continue;
    largest = std::max(largest, s.leaf.dim() > 2 ? s.leaf.numel() / s.leaf.size(0) : s.leaf.numel());
    if (s.leaf.dim() > 2) stacked = std::max(stacked, s.leaf.numel());
  }
  staged_o.staging = {Residency::kStaged, 2, (largest * 4 + 1023) / 1024 * 1024};
  ASSERT_LT(staged_o.staging.slot_bytes, stacked * 4) << "an expert stack does not fit one buffer: it is cut";
  auto native = Muon::Create(a, mo, native_o);
  auto staged = Muon::Create(b, mo, staged_o);
  ASSERT_TRUE(native.ok() && staged.ok()) << staged.status().ToString();
  std::printf("[muon] staged through 2 x %lld B: %lld buckets of Muon's state\n",
              static_cast<long long>(staged_o.staging.slot_bytes), static_cast<long long>((*staged)->bucket_count()));
  EXPECT_GT((*staged)->bucket_count(), static_cast<int64_t>((*staged)->muon_slots().size()));
  const int64_t state = (*native)->resident_bytes();
  for (int step = 0; step < 10; ++step) {
    Grads(a, step);
    Grads(b, step);
    if (step == 5) {
      ASSERT_TRUE((*native)->Release().ok());
      EXPECT_EQ((*native)->device_bytes(), 0);
      ASSERT_TRUE((*native)->Resume().ok());
      EXPECT_EQ((*native)->device_bytes(), state);
    }
    ASSERT_TRUE((*native)->Step(1e-3).ok());
    ASSERT_TRUE((*staged)->Step(1e-3).ok());
    EXPECT_LE((*staged)->device_bytes(), 2 * staged_o.staging.slot_bytes);
  }
  EXPECT_EQ((*staged)->device_bytes(), 2 * staged_o.staging.slot_bytes) << "both parts in the same two buffers";
  EXPECT_EQ((*staged)->resident_bytes(), 2 * staged_o.staging.slot_bytes);
  ASSERT_TRUE((*staged)->Release().ok());
  EXPECT_EQ((*staged)->device_bytes(), 0);
  double d = 0;
  for (size_t i = 0; i < a.slots().size(); ++i) d = std::max(d, MaxDiff(a.slots()[i].leaf, b.slots()[i].leaf));
  std::printf("[muon] staged vs native after 10 steps: max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-6);
  OptimizerState sa = (*native)->State(), sb = (*staged)->State();
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (const auto& [name, t] : sa.tensors) EXPECT_LE(MaxDiff(t, sb.tensors.at(name)), 1e-6) << name;

  // A buffer smaller than a matrix: refused, naming it and the flag.
  AdamWOptions tight;
  tight.staging = {Residency::kStaged, 2, staged_o.staging.slot_bytes - 1024};
  model::ParameterSet c = TinyParams();
  auto refused = Muon::Create(c, mo, tight);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("model.layers."), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("--optimizer-slot-mib"), std::string::npos) << refused.status().ToString();
}

}  // namespace
}  // namespace tandem::train

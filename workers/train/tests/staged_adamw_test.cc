// StagedAdamW (staged_adamw.h) against LibTorch's AdamW (adamw.h) on a
// tiny MoE model's parameter set, random gradients, 50 steps at a warmup +
// cosine rate with clipping: native is bit for bit LibTorch's; staged (host
// slabs streamed through small buffers, slots cut into pieces) equals
// native within a bound written below; a restore at step 20 continues to
// the same step 50, across residencies and from LibTorch's state; bf16
// parameters update an fp32 master exactly as fp32 parameters would; bad
// options and bad state are errors naming them.
#include "workers/train/staged_adamw.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <functional>

#include "workers/model/tests/model_test_util.h"
#include "workers/train/lr_schedule.h"

namespace tandem::train {
namespace {

const model::ModelConfig& Config() {
  static const model::ModelConfig c = model::testing::TinyConfig(/*moe=*/true, /*layers=*/3);
  return c;
}

model::ParameterSet Params(at::ScalarType dtype = at::kFloat) {
  model::ParameterSet p = model::ParameterSet::Create(Config(), at::Device(at::kCPU), dtype);
  at::manual_seed(7);
  at::NoGradGuard no_grad;
  for (const model::ParameterSet::Slot& s : p.slots()) s.leaf.detach().copy_(at::randn(s.leaf.sizes()) * 0.3);
  return p;
}

// Step `step`'s gradients: the same in every run (seeded by the step).
void SetGrads(model::ParameterSet& p, int step) {
  at::manual_seed(1000 + step);
  for (const at::Tensor& g : p.grad_buffers()) g.copy_(at::randn(g.sizes()) * (step % 7 == 3 ? 50.0 : 0.5));
}

AdamWOptions Adam() {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.max_grad_norm = 10.0;  // the x50 steps are clipped
  return o;
}

// Runs steps [from, to) on `p` through `step(lr)`.
void RunSteps(model::ParameterSet& p, int from, int to, const std::function<StatusOr<double>(double)>& step,
         std::vector<double>* norms = nullptr) {
  const WarmupCosine schedule{1e-2, 5, 0.1};
  for (int i = from; i < to; ++i) {
    SetGrads(p, i);
    StatusOr<double> n = step(schedule.At(i, static_cast<double>(i) / 50));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (norms) norms->push_back(*n);
  }
}

double MaxDiff(const model::ParameterSet& a, const model::ParameterSet& b) {
  double d = 0;
  for (size_t i = 0; i < a.buffers().size(); ++i)
    d = std::max(d, (a.buffers()[i].to(at::kFloat) - b.buffers()[i].to(at::kFloat)).abs().max().item<double>());
  return d;
}

StagingOptions Staged(int slots, int64_t slot_bytes) {
  StagingOptions s;
  s.residency = Residency::kStaged;
  s.slots = slots;
  s.slot_bytes = slot_bytes;
  return s;
}

TEST(StagedAdamW, NativeIsLibTorchsAdamWBitForBit) {
  model::ParameterSet ref = Params(), ours = Params();
  auto torch_adamw = AdamW::Create(ref, Adam());
  auto native = StagedAdamW::Create(ours, Adam(), {});
  ASSERT_TRUE(torch_adamw.ok() && native.ok());
  std::vector<double> ref_norms, our_norms;
  RunSteps(ref, 0, 50, [&](double lr) { return (*torch_adamw)->Step(lr); }, &ref_norms);
  RunSteps(ours, 0, 50, [&](double lr) { return (*native)->Step(lr); }, &our_norms);
  EXPECT_EQ(ref_norms, our_norms);
  EXPECT_EQ(MaxDiff(ref, ours), 0.0);
  const OptimizerState a = (*torch_adamw)->State(), b = (*native)->State();
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) EXPECT_TRUE(at::equal(t, b.tensors.at(name))) << name;
  EXPECT_GT(MaxDiff(ours, Params()), 1e-3) << "the parameters moved";
}

TEST(StagedAdamW, StagedEqualsNativeWithSlotsCutIntoPieces) {
  model::ParameterSet native_p = Params(), staged_p = Params();
  auto native = StagedAdamW::Create(native_p, Adam(), {});
  // 4 KiB buffers: 512 elements of each moment; the tiny model's matrices
  // (up to 19200 elements) are cut into dozens of pieces.
  auto staged = StagedAdamW::Create(staged_p, Adam(), Staged(2, 4096));
  ASSERT_TRUE(native.ok() && staged.ok());
  EXPECT_GT((*staged)->bucket_count(), 50);
  RunSteps(native_p, 0, 50, [&](double lr) { return (*native)->Step(lr); });
  RunSteps(staged_p, 0, 50, [&](double lr) { return (*staged)->Step(lr); });
  // Elementwise ops on pieces: equal up to vectorised tails, which may round
  // differently by an ulp; 50 AdamW steps at lr 1e-2 keep that far below
  // one step's size.
  const double d = MaxDiff(native_p, staged_p);
  std::printf("[adamw] staged vs native after 50 steps: max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-6);
  EXPECT_EQ((*staged)->device_bytes(), 2 * 4096);
  (*staged)->Release();
  EXPECT_EQ((*staged)->device_bytes(), 0);
  EXPECT_EQ((*native)->device_bytes(), 2 * 4 * Params().numel() + 0) << "fp32: two moments, no master";
}

TEST(StagedAdamW, RestoreAtStep20GivesStep50AcrossResidenciesAndFromLibTorch) {
  model::ParameterSet straight = Params();
  auto whole = StagedAdamW::Create(straight, Adam(), Staged(3, 8192));
  ASSERT_TRUE(whole.ok());
  RunSteps(straight, 0, 50, [&](double lr) { return (*whole)->Step(lr); });

  struct Case {
    const char* name;
    std::function<StatusOr<OptimizerState>(model::ParameterSet&)> first20;  // steps 0..19, its state (copied)
  };
  auto copy = [](OptimizerState s) {
    for (auto& [k, t] : s.tensors) t = t.clone();
    return s;
  };
  const std::vector<Case> cases = {
      {"staged -> staged", [&](model::ParameterSet& p) -> StatusOr<OptimizerState> {
         TANDEM_ASSIGN_OR_RETURN(auto o, StagedAdamW::Create(p, Adam(), Staged(3, 8192)));
         RunSteps(p, 0, 20, [&](double lr) { return o->Step(lr); });
         return copy(o->State());
       }},
      {"native -> staged", [&](model::ParameterSet& p) -> StatusOr<OptimizerState> {
         TANDEM_ASSIGN_OR_RETURN(auto o, StagedAdamW::Create(p, Adam(), {}));
         RunSteps(p, 0, 20, [&](double lr) { return o->Step(lr); });
         return copy(o->State());
       }},
      {"LibTorch -> staged", [&](model::ParameterSet& p) -> StatusOr<OptimizerState> {
         TANDEM_ASSIGN_OR_RETURN(auto o, AdamW::Create(p, Adam()));
         RunSteps(p, 0, 20, [&](double lr) { return o->Step(lr); });
         return copy(o->State());
       }},
  };
  for (const Case& c : cases) {
    model::ParameterSet p = Params();
    auto state = c.first20(p);
    ASSERT_TRUE(state.ok()) << c.name << ": " << state.status().ToString();
    EXPECT_EQ(state->steps, 20);
    auto resumed = StagedAdamW::Create(p, Adam(), Staged(3, 8192));
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->Restore(*state).ok()) << c.name;
    RunSteps(p, 20, 50, [&](double lr) { return (*resumed)->Step(lr); });
    const double d = MaxDiff(straight, p);
    std::printf("[adamw] %s, restored at 20, step 50: max |diff| %.3g\n", c.name, d);
    EXPECT_LE(d, 1e-6) << c.name;
  }
}

TEST(StagedAdamW, Bf16ParametersUpdateAnFp32MasterAsFp32ParametersWould) {
  // The fp32 run starts from the bf16 values, upcast, and sees the bf16
  // gradients, upcast: the master follows it exactly.
  // No clipping: it scales the gradients in their own dtype.
  model::ParameterSet bf = Params(at::kBFloat16);
  model::ParameterSet fp = model::ParameterSet::Create(Config(), at::Device(at::kCPU), at::kFloat);
  for (size_t i = 0; i < fp.slots().size(); ++i) fp.slots()[i].leaf.detach().copy_(bf.slots()[i].leaf.detach());
  AdamWOptions unclipped = Adam();
  unclipped.max_grad_norm = 0;
  auto master = StagedAdamW::Create(bf, unclipped, Staged(2, 16384));
  auto plain = StagedAdamW::Create(fp, unclipped, {});
  ASSERT_TRUE(master.ok() && plain.ok());
  const WarmupCosine schedule{1e-2, 5, 0.1};
  for (int i = 0; i < 20; ++i) {
    SetGrads(bf, i);
    for (size_t k = 0; k < fp.slots().size(); ++k) fp.slots()[k].leaf.grad().copy_(bf.slots()[k].leaf.grad());
    ASSERT_TRUE((*master)->Step(schedule.At(i, i / 20.0)).ok());
    ASSERT_TRUE((*plain)->Step(schedule.At(i, i / 20.0)).ok());
  }
  const OptimizerState s = (*master)->State();
  EXPECT_EQ(s.tensors.size(), 3 * bf.slots().size()) << "exp_avg, exp_avg_sq and master per slot";
  double d = 0;
  for (const model::ParameterSet::Slot& slot : fp.slots()) {
    const at::Tensor& m = s.tensors.at("master/" + slot.name);
    EXPECT_EQ(m.scalar_type(), at::kFloat);
    d = std::max(d, (m - slot.leaf.detach()).abs().max().item<double>());
  }
  std::printf("[adamw] bf16 master vs fp32 parameters after 20 steps: max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-6);
  for (const model::ParameterSet::Slot& slot : bf.slots())
    EXPECT_TRUE(at::equal(slot.leaf.detach(), s.tensors.at("master/" + slot.name).to(at::kBFloat16))) << slot.name;
}

TEST(StagedAdamW, BadOptionsAndBadStateAreErrorsNamingThem) {
  model::ParameterSet p = Params();
  EXPECT_EQ(StagedAdamW::Create(p, Adam(), Staged(0, 4096)).status().code(), StatusCode::kInvalidArgument);
  auto tiny = StagedAdamW::Create(p, Adam(), Staged(2, 100));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("slot_bytes"), std::string::npos) << tiny.status().ToString();
  AdamWOptions bad = Adam();
  bad.beta2 = 1.0;
  EXPECT_EQ(StagedAdamW::Create(p, bad, {}).status().code(), StatusCode::kInvalidArgument);

  auto o = StagedAdamW::Create(p, Adam(), Staged(2, 4096));
  ASSERT_TRUE(o.ok());
  RunSteps(p, 0, 2, [&](double lr) { return (*o)->Step(lr); });
  OptimizerState s = (*o)->State();
  for (auto& [k, t] : s.tensors) t = t.clone();
  const at::Tensor before = p.buffers()[0].clone();
  OptimizerState wrong = s;
  const std::string victim = "exp_avg_sq/" + p.slots()[3].name;
  wrong.tensors[victim] = at::zeros({2, 2});
  Status r = (*o)->Restore(wrong);
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.message().find(victim), std::string::npos) << r.ToString();
  wrong = s;
  wrong.tensors.erase("exp_avg/" + p.slots()[0].name);
  EXPECT_EQ((*o)->Restore(wrong).code(), StatusCode::kInvalidArgument);
  wrong = s;
  wrong.steps = 0;
  EXPECT_EQ((*o)->Restore(wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*o)->steps(), 2) << "nothing changed";
  EXPECT_TRUE(at::equal(before, p.buffers()[0]));

  p.grad_buffers()[0].fill_(std::nan(""));
  auto nan = (*o)->Step(1e-3);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("non-finite gradient"), std::string::npos);
  EXPECT_TRUE(at::equal(before, p.buffers()[0])) << "nothing updated";
}

}  // namespace
}  // namespace tandem::train

// AdamW (adamw.h) against LibTorch's (torch::optim::AdamW, the trainers'
// optimizer before it, the reference) on a tiny MoE model's parameter set, random gradients, 50 steps at a warmup +
// cosine rate with clipping: unfused native is bit for bit LibTorch's, the
// fused kernel follows it within a bound written below; staged (host slabs
// streamed through small buffers, slots cut into pieces) equals native, bit
// for bit when fused; a restore at step 20 continues to
// the same step 50, across residencies and from LibTorch's state; bf16
// parameters update an fp32 master exactly as fp32 parameters would; a
// sharded rank keeps and gathers its part of the state; bad options and
// bad state are errors naming them.
#include "workers/train/adamw.h"

#include <gtest/gtest.h>

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "workers/model/tests/model_test_util.h"
#include "workers/collective/group.h"
#include "workers/train/lr_schedule.h"
#include "workers/train/tests/lone_rank.h"

namespace tandem::train {
namespace {

const model::ModelConfig& Config() {
  static const model::ModelConfig c = model::testing::TinyConfig(/*moe=*/true, /*layers=*/3);
  return c;
}

model::ParameterSet Params(at::ScalarType dtype = at::kFloat) {
  model::ParameterSet p = model::ParameterSet::Create(Config(), at::Device(at::kCPU), dtype);
  at::manual_seed(7);
  c10::NoGradGuard no_grad;
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

AdamWOptions Staged(int slots, int64_t slot_bytes) {
  AdamWOptions o = Adam();
  o.staging.residency = Residency::kStaged;
  o.staging.slots = slots;
  o.staging.slot_bytes = slot_bytes;
  return o;
}

// The key LibTorch's optimizers file a parameter's state under: the
// TensorImpl's address, a string in LibTorch 1.x, a pointer in later ones.
template <class Map>
typename Map::key_type Key(const Map&, const at::Tensor& t) {
  using K = typename Map::key_type;
  if constexpr (std::is_same_v<K, std::string>) {
    std::ostringstream s;
    s << static_cast<const void*>(t.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<K>(t.unsafeGetTensorImpl());
  }
}

// The reference: LibTorch's AdamW, weight decay on matrices only, after
// ClipGradNorm; State() as the checkpoints saved it.
class TorchAdamW {
 public:
  TorchAdamW(model::ParameterSet& p, const AdamWOptions& o) : p_(p), o_(o), adamw_(Groups(p, o)) {}
  StatusOr<double> Step(double lr) {
    TANDEM_ASSIGN_OR_RETURN(const double norm, ClipGradNorm(p_, o_.max_grad_norm));
    for (torch::optim::OptimizerParamGroup& g : adamw_.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    adamw_.step();
    ++steps_;
    return norm;
  }
  OptimizerState State() const {
    OptimizerState out;
    out.steps = steps_;
    for (const model::ParameterSet::Slot& s : p_.slots()) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*adamw_.state().at(Key(adamw_.state(), s.leaf)));
      out.tensors["exp_avg/" + s.name] = st.exp_avg();
      out.tensors["exp_avg_sq/" + s.name] = st.exp_avg_sq();
    }
    return out;
  }

 private:
  static std::vector<torch::optim::OptimizerParamGroup> Groups(model::ParameterSet& p, const AdamWOptions& o) {
    p.EnableGrad();
    std::vector<at::Tensor> decay, no_decay;
    for (const model::ParameterSet::Slot& s : p.slots()) (s.leaf.dim() >= 2 ? decay : no_decay).push_back(s.leaf);
    torch::optim::AdamWOptions base(1e-3);
    base.betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
    auto none = std::make_unique<torch::optim::AdamWOptions>(base);
    none->weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(base));
    groups.emplace_back(no_decay, std::move(none));
    return groups;
  }
  model::ParameterSet& p_;
  AdamWOptions o_;
  torch::optim::AdamW adamw_;
  int64_t steps_ = 0;
};

AdamWOptions Unfused(AdamWOptions o) {
  o.fused = false;
  return o;
}

TEST(AdamW, UnfusedNativeIsLibTorchsAdamWBitForBit) {
  model::ParameterSet ref = Params(), ours = Params();
  TorchAdamW torch_adamw(ref, Adam());
  auto native = AdamW::Create(ours, Unfused(Adam()));
  ASSERT_TRUE(native.ok());
  std::vector<double> ref_norms, our_norms;
  RunSteps(ref, 0, 50, [&](double lr) { return torch_adamw.Step(lr); }, &ref_norms);
  RunSteps(ours, 0, 50, [&](double lr) { return (*native)->Step(lr); }, &our_norms);
  EXPECT_EQ(ref_norms, our_norms);
  EXPECT_EQ(MaxDiff(ref, ours), 0.0);
  const OptimizerState a = torch_adamw.State(), b = (*native)->State();
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) EXPECT_TRUE(at::equal(t, b.tensors.at(name))) << name;
  EXPECT_GT(MaxDiff(ours, Params()), 1e-3) << "the parameters moved";
}

TEST(AdamW, FusedFollowsLibTorchsAdamWWithinRounding) {
  model::ParameterSet ref = Params(), ours = Params();
  TorchAdamW torch_adamw(ref, Adam());
  auto fused = AdamW::Create(ours, Adam());
  ASSERT_TRUE(fused.ok());
  std::vector<double> ref_norms, our_norms;
  RunSteps(ref, 0, 50, [&](double lr) { return torch_adamw.Step(lr); }, &ref_norms);
  RunSteps(ours, 0, 50, [&](double lr) { return (*fused)->Step(lr); }, &our_norms);
  EXPECT_EQ(ref_norms, our_norms);
  // One rounding where LibTorch's vectorised ops contract a multiply-add,
  // over 50 steps at lr 1e-2 on weights of about 0.3: far below a step.
  const double d = MaxDiff(ref, ours);
  std::printf("[adamw] fused vs LibTorch after 50 steps: max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-6);
  const OptimizerState a = torch_adamw.State(), b = (*fused)->State();
  for (const auto& [name, t] : a.tensors) {
    const double scale = t.abs().max().item<double>();
    EXPECT_LE((t - b.tensors.at(name)).abs().max().item<double>(), 1e-5 * scale) << name;
  }

  // A clipped step (the x50 gradients): the kernel scales them as it reads
  // them, and leaves them as they were.
  SetGrads(ours, 3);
  const at::Tensor before = ours.grad_buffers()[0].clone();
  ASSERT_TRUE((*fused)->Step(1e-3).ok());
  EXPECT_TRUE(at::equal(before, ours.grad_buffers()[0]));
}

TEST(AdamW, StagedEqualsNativeWithSlotsCutIntoPieces) {
  for (bool fused : {true, false}) {
    model::ParameterSet native_p = Params(), staged_p = Params();
    AdamWOptions native_o = Adam(), staged_o = Staged(2, 4096);
    native_o.fused = staged_o.fused = fused;
    auto native = AdamW::Create(native_p, native_o);
    // 4 KiB buffers: 512 elements of each moment; the tiny model's matrices
    // (up to 19200 elements) are cut into dozens of pieces.
    auto staged = AdamW::Create(staged_p, staged_o);
    ASSERT_TRUE(native.ok() && staged.ok());
    EXPECT_GT((*staged)->bucket_count(), 50);
    RunSteps(native_p, 0, 50, [&](double lr) { return (*native)->Step(lr); });
    RunSteps(staged_p, 0, 50, [&](double lr) { return (*staged)->Step(lr); });
    // Fused: one elementwise pass, the same bits wherever a piece starts.
    // Unfused: LibTorch's vectorised ops, whose tails may round differently
    // by an ulp; 50 AdamW steps at lr 1e-2 keep that far below a step.
    const double d = MaxDiff(native_p, staged_p);
    std::printf("[adamw] %s, %zu slots in %lld buckets of 4 KiB, staged vs native after 50 steps: max |diff| %.3g\n",
                fused ? "fused" : "unfused", staged_p.slots().size(),
                static_cast<long long>((*staged)->bucket_count()), d);
    if (fused) {
      EXPECT_EQ(d, 0.0);
    } else {
      EXPECT_LE(d, 1e-6);
    }
    if (!fused) continue;
    EXPECT_EQ((*staged)->device_bytes(), 2 * 4096);
    EXPECT_EQ((*staged)->resident_bytes(), 2 * 4096);
    ASSERT_TRUE((*staged)->Release().ok());
    EXPECT_EQ((*staged)->device_bytes(), 0);
    EXPECT_EQ((*native)->device_bytes(), 2 * 4 * Params().numel() + 0) << "fp32: two moments, no master";
  }
}

TEST(AdamW, RestoreAtStep20GivesStep50AcrossResidenciesAndFromLibTorch) {
  model::ParameterSet straight = Params();
  auto whole = AdamW::Create(straight, Staged(3, 8192));
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
         TANDEM_ASSIGN_OR_RETURN(auto o, AdamW::Create(p, Staged(3, 8192)));
         RunSteps(p, 0, 20, [&](double lr) { return o->Step(lr); });
         return copy(o->State());
       }},
      {"native -> staged", [&](model::ParameterSet& p) -> StatusOr<OptimizerState> {
         TANDEM_ASSIGN_OR_RETURN(auto o, AdamW::Create(p, Adam()));
         RunSteps(p, 0, 20, [&](double lr) { return o->Step(lr); });
         return copy(o->State());
       }},
      {"LibTorch -> staged", [&](model::ParameterSet& p) -> StatusOr<OptimizerState> {
         TorchAdamW o(p, Adam());
         RunSteps(p, 0, 20, [&](double lr) { return o.Step(lr); });
         return copy(o.State());
       }},
  };
  for (const Case& c : cases) {
    model::ParameterSet p = Params();
    auto state = c.first20(p);
    ASSERT_TRUE(state.ok()) << c.name << ": " << state.status().ToString();
    EXPECT_EQ(state->steps, 20);
    auto resumed = AdamW::Create(p, Staged(3, 8192));
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->Restore(*state).ok()) << c.name;
    RunSteps(p, 20, 50, [&](double lr) { return (*resumed)->Step(lr); });
    const double d = MaxDiff(straight, p);
    std::printf("[adamw] %s, restored at 20, step 50: max |diff| %.3g\n", c.name, d);
    EXPECT_LE(d, 1e-6) << c.name;
  }
}

TEST(AdamW, Bf16ParametersUpdateAnFp32MasterAsFp32ParametersWould) {
  // The fp32 run starts from the bf16 values, upcast, and sees the bf16
  // gradients, upcast: the master follows it exactly.
  // No clipping: it scales the gradients in their own dtype.
  model::ParameterSet bf = Params(at::kBFloat16);
  model::ParameterSet fp = model::ParameterSet::Create(Config(), at::Device(at::kCPU), at::kFloat);
  for (size_t i = 0; i < fp.slots().size(); ++i) fp.slots()[i].leaf.detach().copy_(bf.slots()[i].leaf.detach());
  AdamWOptions unclipped = Adam();
  unclipped.max_grad_norm = 0;
  AdamWOptions staged = Staged(2, 16384);
  staged.max_grad_norm = 0;
  auto master = AdamW::Create(bf, staged);
  auto plain = AdamW::Create(fp, unclipped);
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

using testing::LoneRank;

// Sharded (adamw.h "Sharded"), ranks of three on their own: each restores
// its third of a whole state (rank 1's cut through slots), holds a third of
// the bytes, and gathers back exactly its third with -0.0 elsewhere; its
// update leaves the others' elements -0.0 for the sum; beside Muon, or with
// fewer parameters than ranks, it is refused.
TEST(AdamW, ShardedRanksKeepTheirThirdOfTheState) {
  model::ParameterSet whole = Params();
  auto replicated = AdamW::Create(whole, Adam());
  ASSERT_TRUE(replicated.ok());
  RunSteps(whole, 0, 3, [&](double lr) { return (*replicated)->Step(lr); });
  const OptimizerState full = (*replicated)->State();
  int64_t total = 0;
  for (const model::ParameterSet::Slot& s : whole.slots()) total += s.leaf.numel();
  int64_t kept = 0;
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    model::ParameterSet p = Params();
    LoneRank group(r, 3);
    AdamWOptions o = Adam();
    o.shard = &group;
    auto sharded = AdamW::Create(p, o);
    ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
    EXPECT_TRUE((*sharded)->sharded());
    ASSERT_TRUE((*sharded)->Restore(full).ok());
    kept += (*sharded)->resident_bytes();
    EXPECT_NEAR(static_cast<double>((*sharded)->resident_bytes()), 2.0 * 4 * total / 3, 8.0);
    EXPECT_TRUE((*sharded)->State().tensors.empty()) << "State() before a gather";
    if (r != 0) continue;  // only rank 0 keeps what it gathers
    ASSERT_TRUE((*sharded)->GatherState().ok());
    const OptimizerState got = (*sharded)->State();
    ASSERT_EQ(got.tensors.size(), full.tensors.size());
    int64_t at = 0;  // rank 0 owns elements [0, ceil(total / 3)) in slot order
    const int64_t mine = total / 3 + (total % 3 > 0 ? 1 : 0);
    for (const model::ParameterSet::Slot& s : p.slots()) {
      for (const char* kind : {"exp_avg/", "exp_avg_sq/"}) {
        const at::Tensor want = full.tensors.at(kind + s.name).reshape({-1});
        const at::Tensor have = got.tensors.at(kind + s.name).reshape({-1});
        for (int64_t i = 0; i < want.numel(); ++i) {
          const float w = at + i < mine ? want[i].item<float>() : -0.0f, h = have[i].item<float>();
          ASSERT_TRUE(std::memcmp(&w, &h, 4) == 0) << kind << s.name << "[" << i << "]: " << h << ", want " << w;
        }
      }
      at += s.leaf.numel();
    }
    SetGrads(p, 3);
    ASSERT_TRUE((*sharded)->Step(1e-3).ok());
    const at::Tensor last = p.slots().back().leaf.detach().reshape({-1});
    EXPECT_TRUE(std::signbit(last[last.numel() - 1].item<float>()) && last[last.numel() - 1].item<float>() == 0.0f)
        << "rank 0's update leaves the last rank's elements -0.0 for the sum";
  }
  EXPECT_EQ(kept, (*replicated)->resident_bytes());
  model::ParameterSet p = Params();
  LoneRank many(0, 1 << 30);
  AdamWOptions too_many = Adam();
  too_many.shard = &many;
  EXPECT_NE(AdamW::Create(p, too_many).status().message().find("cannot be sharded over"), std::string::npos);
  AdamWOptions beside = Adam();
  LoneRank two(0, 2);
  beside.shard = &two;
  beside.takes = [](const model::ParameterSet::Slot& s) { return s.leaf.dim() < 2; };
  EXPECT_NE(AdamW::Create(p, beside).status().message().find("needs AdamW on every parameter"), std::string::npos);
}

TEST(AdamW, TheRolesFlagsMakeStagingOrSayWhatIsWrong) {
  auto staged = MakeStaging("staged", 3, 64);
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(staged->residency, Residency::kStaged);
  EXPECT_EQ(staged->slots, 3);
  EXPECT_EQ(staged->slot_bytes, int64_t{64} << 20);
  EXPECT_EQ(MakeStaging("native", 2, 128)->residency, Residency::kNative);
  for (const auto& [residency, slots, mib, flag] : std::vector<std::tuple<std::string, int64_t, int64_t, std::string>>{
           {"gpu", 2, 128, "--optimizer-residency"}, {"staged", 0, 128, "--optimizer-slots"},
           {"staged", 2, 0, "--optimizer-slot-mib"}, {"staged", 2, int64_t{1} << 40, "--optimizer-slot-mib"}}) {
    auto r = MakeStaging(residency, slots, mib);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().ToString();
  }
}

TEST(AdamW, BadOptionsAndBadStateAreErrorsNamingThem) {
  model::ParameterSet p = Params();
  EXPECT_EQ(AdamW::Create(p, Staged(0, 4096)).status().code(), StatusCode::kInvalidArgument);
  auto tiny = AdamW::Create(p, Staged(2, 100));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("slot_bytes"), std::string::npos) << tiny.status().ToString();
  AdamWOptions bad = Adam();
  bad.beta2 = 1.0;
  EXPECT_EQ(AdamW::Create(p, bad).status().code(), StatusCode::kInvalidArgument);

  auto o = AdamW::Create(p, Staged(2, 4096));
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

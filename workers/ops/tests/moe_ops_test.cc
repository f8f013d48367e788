// MoE glue (moe_ops.h): the whole layer (router -> plan -> permute -> expert
// SwiGLU FFN -> unpermute) and its gradients for the logits, x and both
// weights against a float64 reference written with ordinary LibTorch ops;
// empty experts and heavy imbalance; finite differences on small shapes;
// poisoned outputs; argument errors. CPU always, CUDA (bf16) when present.
#include "workers/ops/moe_ops.h"

#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include <algorithm>

#include "workers/ops/aten_call.h"
#include "workers/ops/tests/torch_test_util.h"

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)
namespace {

using testing::Close;
using testing::GradTol;
using testing::MakeInput;
using testing::OutputTol;

struct Layer {
  at::Tensor out;
  MoeRouting routing;
  MoePermutation plan;
};

Layer RunLayer(const at::Tensor& logits, const at::Tensor& x, const at::Tensor& wgu, const at::Tensor& wd, int64_t k,
               RouterScore score, bool renorm, MoeExpertsImpl impl = MoeExpertsImpl::kKernels) {
  Layer l;
  l.routing = MoeRoute(logits, k, score, renorm);
  l.plan = MoePermutePlan(l.routing.topk_idx, logits.size(1), /*host_offsets=*/impl == MoeExpertsImpl::kKernels);
  const at::Tensor xp = MoePermute(x, l.plan);
  const at::Tensor yp = MoeExpertsFfn(xp, l.plan, wgu, wd, impl);
  l.out = MoeUnpermute(yp, l.routing.topk_weight, l.plan);
  return l;
}

// Float64 reference of the layer on the kernel's expert choice (idx [T, k]).
struct RefLayer {
  at::Tensor out, weight, score_sum;
};
RefLayer Reference(const at::Tensor& logits, const at::Tensor& x, const at::Tensor& wgu, const at::Tensor& wd,
                   const at::Tensor& idx, RouterScore score, bool renorm) {
  const int64_t T = x.size(0), H = x.size(1), k = idx.size(1), I = wd.size(1);
  const at::Tensor scores = score == RouterScore::kSoftmax ? logits.softmax(-1) : logits.sigmoid();
  const at::Tensor flat_idx = idx.to(at::kLong).reshape({-1});
  at::Tensor w = scores.gather(1, idx.to(at::kLong));
  if (renorm) w = w / w.sum(1, true);
  const at::Tensor xg = x.repeat_interleave(k, 0).unsqueeze(1);                 // [T*k, 1, H]
  const at::Tensor h = xg.bmm(wgu.index_select(0, flat_idx));                    // [T*k, 1, 2I]
  const at::Tensor gate = h.narrow(2, 0, I), up = h.narrow(2, I, I);
  const at::Tensor y = (gate * gate.sigmoid() * up).bmm(wd.index_select(0, flat_idx)).view({T, k, H});
  return {(y * w.unsqueeze(2)).sum(1), w, scores.sum(0)};
}

struct Case {
  int64_t tokens, hidden, inter, experts, top_k;
  RouterScore score;
  bool renorm;
  bool skewed;  // logits push every token to experts 0..k-1: the rest are empty
};

class MoeOpsTest : public ::testing::TestWithParam<at::Device> {};

// The experts' implementations this device runs: on CUDA, the grouped-mm
// path where this LibTorch has aten::_grouped_mm.
std::vector<MoeExpertsImpl> Impls(const at::Device& dev) {
  if (dev.is_cuda() && !HasOp("aten::_grouped_mm", "")) return {MoeExpertsImpl::kKernels};
  return {MoeExpertsImpl::kKernels, MoeExpertsImpl::kGroupedMm};
}

TEST_P(MoeOpsTest, LayerAndGradientsMatchReference) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const Case cases[] = {{37, 64, 32, 8, 2, RouterScore::kSoftmax, true, false},
                        {50, 64, 48, 16, 4, RouterScore::kSigmoid, false, false},
                        {33, 32, 16, 8, 2, RouterScore::kSoftmax, false, true},
                        {5, 64, 32, 32, 8, RouterScore::kSigmoid, true, false},  // most experts empty
                        {1, 32, 16, 4, 1, RouterScore::kSoftmax, true, false}};
  for (const MoeExpertsImpl impl : Impls(dev)) {
  for (const Case& c : cases) {
    const uint64_t seed = kernels::testing::FreshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " T=" + std::to_string(c.tokens) + " E=" + std::to_string(c.experts) +
                 (impl == MoeExpertsImpl::kGroupedMm ? " grouped-mm" : " kernels"));
    std::mt19937_64 rng(seed);
    at::Tensor logits64 = testing::Random(rng, {c.tokens, c.experts}, -2, 2);
    if (c.skewed) logits64.narrow(1, 0, c.top_k).add_(10.0);
    auto logits = MakeInput(logits64, dev);
    logits.dev = logits64.to(dev, at::kFloat).requires_grad_(true);  // the router is fp32 on every device
    logits.ref = logits64.clone().requires_grad_(true);
    auto x = MakeInput(testing::Random(rng, {c.tokens, c.hidden}), dev);
    auto wgu = MakeInput(testing::Random(rng, {c.experts, c.hidden, 2 * c.inter}, -0.3, 0.3), dev);
    auto wd = MakeInput(testing::Random(rng, {c.experts, c.inter, c.hidden}, -0.3, 0.3), dev);

    const Layer l = RunLayer(logits.dev, x.dev, wgu.dev, wd.dev, c.top_k, c.score, c.renorm, impl);
    const at::Tensor idx = l.routing.topk_idx.cpu();
    // The chosen experts are the top k of the reference scores.
    const at::Tensor ref_idx = std::get<0>(std::get<1>(logits64.topk(c.top_k, 1)).to(at::kInt).sort(1));
    ASSERT_TRUE(std::get<0>(idx.sort(1)).equal(ref_idx));
    // Counts and offsets agree with the choice; in the skewed case all
    // tokens went to experts 0..k-1 and the others are empty.
    const at::Tensor counts = l.routing.counts.cpu(), offsets = l.plan.offsets.cpu();
    if (dev.is_cuda()) EXPECT_EQ(l.plan.host_offsets.empty(), impl == MoeExpertsImpl::kGroupedMm) << "no sync";
    for (int64_t e = 0; e < c.experts; ++e) {
      const int64_t n = idx.eq(static_cast<int32_t>(e)).sum().item<int64_t>();
      EXPECT_EQ(counts.data_ptr<int32_t>()[e], n) << "expert " << e;
      EXPECT_EQ(offsets.data_ptr<int32_t>()[e + 1] - offsets.data_ptr<int32_t>()[e], n) << "expert " << e;
      if (c.skewed) {
        EXPECT_EQ(n, e < c.top_k ? c.tokens : 0);
      }
    }

    const RefLayer r = Reference(logits.ref, x.ref, wgu.ref, wd.ref, idx, c.score, c.renorm);
    // The router is fp32 on both devices (CUDA: fast exp, atomic sums).
    const testing::Tolerance router_tol = dev.is_cpu() ? testing::Tolerance{1e-6, 1e-5} : testing::Tolerance{1e-5, 1e-4};
    EXPECT_EQ(Close(l.routing.topk_weight, r.weight, router_tol), "");
    EXPECT_EQ(Close(l.routing.score_sum, r.score_sum, router_tol), "");
    EXPECT_EQ(Close(l.out, r.out, OutputTol(dev, r.out)), "");

    // Gradients of sum(out * dout) + sum(score_sum * ds) (a load-balancing term).
    const at::Tensor dout = testing::Random(rng, {c.tokens, c.hidden});
    const at::Tensor ds = testing::Random(rng, {c.experts});
    const auto g = testing::Grads({l.out, l.routing.score_sum}, {dout.to(dev, l.out.scalar_type()), ds.to(dev, at::kFloat)},
                                  {logits.dev, x.dev, wgu.dev, wd.dev});
    const auto gr = testing::Grads({r.out, r.score_sum}, {dout, ds}, {logits.ref, x.ref, wgu.ref, wd.ref});
    const char* names[] = {"dlogits", "dx", "dw_gate_up", "dw_down"};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(Close(g[i], gr[i], GradTol(dev, gr[i])), "") << names[i];
  }
  }
}

TEST_P(MoeOpsTest, RejectsBadArgumentsWithErrors) {
  const at::Device dev = GetParam();
  const auto act = at::TensorOptions().device(dev).dtype(testing::DataType(dev));
  const auto f32 = at::TensorOptions().device(dev).dtype(at::kFloat);
  const at::Tensor logits = at::zeros({6, 4}, f32);
  EXPECT_THROW(MoeRoute(logits.to(at::kDouble), 2, RouterScore::kSoftmax, true), c10::Error);
  EXPECT_THROW(MoeRoute(logits, 5, RouterScore::kSoftmax, true), c10::Error);  // k > E
  EXPECT_THROW(MoeRoute(logits, 0, RouterScore::kSoftmax, true), c10::Error);
  EXPECT_THROW(MoeRoute(logits.view({24}), 1, RouterScore::kSoftmax, true), c10::Error);
  const MoeRouting r = MoeRoute(logits, 2, RouterScore::kSoftmax, true);
  EXPECT_THROW(MoePermutePlan(r.topk_idx.to(at::kLong), 4), c10::Error);
  EXPECT_THROW(MoePermutePlan(r.topk_idx, 1), c10::Error);  // k > E
  const MoePermutation p = MoePermutePlan(r.topk_idx, 4);
  EXPECT_THROW(MoePermute(at::zeros({5, 8}, act), p), c10::Error);                      // rows
  EXPECT_THROW(MoePermute(at::zeros({6, 8}, act.dtype(at::kDouble)), p), c10::Error);    // dtype
  EXPECT_THROW(MoePermute(at::zeros({6, 8}, act), MoePermutation{}), c10::Error);       // no plan
  const at::Tensor xp = MoePermute(at::zeros({6, 8}, act), p);
  for (const MoeExpertsImpl impl : Impls(dev)) {
    EXPECT_THROW(MoeExpertsFfn(xp, p, at::zeros({4, 8, 6}, act), at::zeros({4, 4, 8}, act), impl),
                 c10::Error);  // 2I != 2*3
    EXPECT_THROW(MoeExpertsFfn(xp, p, at::zeros({3, 8, 6}, act), at::zeros({3, 3, 8}, act), impl), c10::Error);  // E
    EXPECT_THROW(MoeExpertsFfn(xp.narrow(0, 0, 5), p, at::zeros({4, 8, 6}, act), at::zeros({4, 3, 8}, act), impl),
                 c10::Error);  // rows
  }
  if (dev.is_cuda()) {  // the kernels need the host offsets a plan made without them lacks
    const MoePermutation no_sync = MoePermutePlan(r.topk_idx, 4, /*host_offsets=*/false);
    EXPECT_THROW(MoeExpertsFfn(xp, no_sync, at::zeros({4, 8, 6}, act), at::zeros({4, 3, 8}, act),
                               MoeExpertsImpl::kKernels),
                 c10::Error);
  }
  EXPECT_THROW(MoeUnpermute(xp, r.topk_weight.narrow(1, 0, 1), p), c10::Error);
  EXPECT_THROW(MoeUnpermute(xp, r.topk_weight.to(at::kDouble), p), c10::Error);
  if (dev.is_cuda()) {
    EXPECT_THROW(MoePermute(at::zeros({6, 8}), p), c10::Error);  // CPU data, CUDA plan
    EXPECT_THROW(MoePermute(at::zeros({6, 8}, f32), p), c10::Error);  // fp32 on CUDA
  } else {
    // An expert id out of range is an error on the CPU.
    const at::Tensor bad = testing::IntTensor({0, 1, 2, 9}).view({2, 2});
    EXPECT_THROW(MoePermutePlan(bad, 4), c10::Error);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MoeOpsTest, ::testing::ValuesIn(testing::TestDevices()), testing::DeviceName);

TEST(MoeOpsCpuTest, GradientsMatchFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t T = 6, H = 5, I = 3, E = 4, k = 2;
  // Logits spread apart so that a step of eps never changes the top k.
  at::Tensor logits = testing::Random(rng, {T, E}, -0.05, 0.05);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) logits[t][e].add_(static_cast<double>((e + t) % E));
  }
  std::vector<at::Tensor> in = {logits.to(at::kFloat), testing::Random(rng, {T, H}).to(at::kFloat),
                                testing::Random(rng, {E, H, 2 * I}).to(at::kFloat),
                                testing::Random(rng, {E, I, H}).to(at::kFloat)};
  const at::Tensor w = testing::Random(rng, {T, H});
  const at::Tensor ws = testing::Random(rng, {E});
  for (auto score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    for (auto& t : in) t.requires_grad_(true);
    const Layer l = RunLayer(in[0], in[1], in[2], in[3], k, score, true);
    const auto g = testing::Grads({l.out, l.routing.score_sum}, {w.to(at::kFloat), ws.to(at::kFloat)}, in);
    auto loss = [&](const std::vector<at::Tensor>& x) {
      const Layer p = RunLayer(x[0], x[1], x[2], x[3], k, score, true);
      return ((p.out.to(at::kDouble) * w).sum() + (p.routing.score_sum.to(at::kDouble) * ws).sum()).item<double>();
    };
    for (auto& t : in) t = t.detach();
    testing::CheckFiniteDifferences(loss, in, g, rng);
  }
}

}  // namespace
}  // namespace tandem::ops

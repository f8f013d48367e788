// The fused glue ops (fused_ops.h) against HF's formulas written with plain
// ATen ops: in float64 on the rounded inputs (CPU and CUDA), and on CUDA also
// the same formula run in bf16 there, whose roundings the kernels keep (so
// the two agree to about one bf16 ulp). Forward values and every gradient,
// either output of AddRmsNorm alone, non-contiguous inputs, finite
// differences on the CPU, poisoned outputs, argument errors.
#include "workers/ops/fused_ops.h"

#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <utility>

#include "workers/ops/tests/torch_test_util.h"

namespace tandem::ops {
namespace {

using testing::Close;
using testing::GradTol;
using testing::MakeInput;
using testing::OutputTol;

// HF's Qwen3RMSNorm (fp32 in the middle; float64 stays float64).
at::Tensor HfRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
  const at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
}
at::Tensor HfRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rot = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rot * sin.unsqueeze(1);
}
// HF's cos/sin tables for positions [T] at head_dim d, theta 1e6, as float64.
std::pair<at::Tensor, at::Tensor> Angles(std::mt19937_64& rng, int64_t t, int64_t d) {
  const at::Tensor pos = (testing::Random(rng, {t}, 0, 4000)).floor();
  const at::Tensor inv = 1.0 / at::pow(1e6, at::arange(0, d, 2, at::TensorOptions().dtype(at::kDouble)) / d);
  const at::Tensor f = pos.unsqueeze(1) * inv.unsqueeze(0);
  const at::Tensor emb = at::cat({f, f}, -1);
  return {emb.cos(), emb.sin()};
}

// On CUDA, `out` against HF's formula run in bf16 on the same inputs: equal
// but for one-ulp flips (fp32 against fp32 in another order; HF's backward
// rounds a few more intermediates). Both are bf16 values, so a flip is 2^-8
// to 2^-7 relative: the whole tensor within 1% in relative L2 (a 12-element
// q/k norm weight gradient read 0.43% on the H200, 2026-12-01).
void ExpectHfBf16(const at::Tensor& out, const at::Tensor& hf, const char* what) {
  EXPECT_EQ(Close(out, hf, {2e-2 * testing::Rms(hf) + 1e-5, 1.6e-2}), "") << what;
  const double rel = (out.to(at::kDouble) - hf.to(at::kDouble)).norm().item<double>() /
                     std::max(hf.to(at::kDouble).norm().item<double>(), 1e-30);
  EXPECT_LT(rel, 1e-2) << what;
}

class FusedOpsTest : public ::testing::TestWithParam<at::Device> {};

TEST_P(FusedOpsTest, RmsNormMatchesHf) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const auto& sizes : {std::vector<int64_t>{37, 3, 64}, std::vector<int64_t>{300, 1024}}) {
    auto x = MakeInput(testing::Random(rng, sizes, -3, 3), dev);
    auto w = MakeInput(testing::Random(rng, {sizes.back()}, 0.5, 1.5), dev);
    const at::Tensor y = RmsNorm(x.dev, w.dev, 1e-6);
    const at::Tensor ref = HfRmsNorm(x.ref, w.ref, 1e-6);
    EXPECT_EQ(y.scalar_type(), testing::DataType(dev));
    EXPECT_EQ(Close(y, ref, OutputTol(dev, ref)), "");
    const at::Tensor gy = testing::Random(rng, sizes);
    const auto g = testing::Grads({y}, {gy.to(dev, testing::DataType(dev))}, {x.dev, w.dev});
    const auto gr = testing::Grads({ref}, {gy}, {x.ref, w.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "dx";
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "dweight";
    if (dev.is_cuda()) {
      const at::Tensor xb = x.dev.detach().requires_grad_(true), wb = w.dev.detach().requires_grad_(true);
      const at::Tensor hf = HfRmsNorm(xb, wb, 1e-6);
      ExpectHfBf16(y, hf, "y vs bf16 HF");
      const auto gh = testing::Grads({hf}, {gy.to(dev, at::kBFloat16)}, {xb, wb});
      ExpectHfBf16(g[0], gh[0], "dx vs bf16 HF");
      ExpectHfBf16(g[1], gh[1], "dweight vs bf16 HF");
    }
  }
}

TEST_P(FusedOpsTest, AddRmsNormMatchesHfWithEitherOutput) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int which = 0; which < 3; ++which) {  // both outputs' gradients, the sum's only, the norm's only
    auto x = MakeInput(testing::Random(rng, {50, 256}, -2, 2), dev);
    auto d = MakeInput(testing::Random(rng, {50, 256}), dev);
    auto w = MakeInput(testing::Random(rng, {256}, 0.5, 1.5), dev);
    const AddRmsNormOutput out = AddRmsNorm(x.dev, d.dev, w.dev, 1e-6);
    const at::Tensor sum_ref = x.ref + d.ref;
    const at::Tensor y_ref = HfRmsNorm(sum_ref, w.ref, 1e-6);
    EXPECT_EQ(Close(out.sum, sum_ref, OutputTol(dev, sum_ref)), "");
    EXPECT_EQ(Close(out.normed, y_ref, OutputTol(dev, y_ref)), "");
    const at::Tensor gs = testing::Random(rng, {50, 256}), gy = testing::Random(rng, {50, 256});
    std::vector<at::Tensor> outs, refs, gouts, grefs;
    if (which != 2) {
      outs.push_back(out.sum);
      refs.push_back(sum_ref);
      gouts.push_back(gs.to(dev, testing::DataType(dev)));
      grefs.push_back(gs);
    }
    if (which != 1) {
      outs.push_back(out.normed);
      refs.push_back(y_ref);
      gouts.push_back(gy.to(dev, testing::DataType(dev)));
      grefs.push_back(gy);
    }
    const auto g = testing::Grads(outs, gouts, {x.dev, d.dev, w.dev});
    const auto gr = testing::Grads(refs, grefs, {x.ref, d.ref, w.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "dx, case " << which;
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "ddelta, case " << which;
    if (which == 1) {
      EXPECT_TRUE(!g[2].defined() || g[2].abs().max().item<double>() == 0.0) << "dweight without the norm's gradient";
    } else {
      EXPECT_EQ(Close(g[2], gr[2], GradTol(dev, gr[2])), "") << "dweight, case " << which;
    }
  }
}

TEST_P(FusedOpsTest, QkNormRotaryMatchesHf) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Case { int64_t t, heads, d; bool strided; };
  for (const Case c : {Case{29, 4, 128, false}, Case{17, 2, 64, true}, Case{5, 3, 12, false}}) {
    SCOPED_TRACE("d=" + std::to_string(c.d));
    // strided: x a [T, heads, D] slice of a wider tensor (not contiguous).
    const at::Tensor base = testing::Random(rng, {c.t, c.heads, c.strided ? 2 * c.d : c.d}, -3, 3);
    auto x = MakeInput(base.narrow(2, 0, c.d).contiguous(), dev);
    const at::Tensor xin = c.strided ? at::cat({x.dev, x.dev}, 2).narrow(2, 0, c.d) : x.dev;
    auto w = MakeInput(testing::Random(rng, {c.d}, 0.5, 1.5), dev);
    auto [cos64, sin64] = Angles(rng, c.t, c.d);
    const at::Tensor cos = cos64.to(dev, testing::DataType(dev)), sin = sin64.to(dev, testing::DataType(dev));
    const at::Tensor y = QkNormRotary(xin, w.dev, cos, sin, 1e-6);
    const at::Tensor ref = HfRotary(HfRmsNorm(x.ref, w.ref, 1e-6), cos.to(at::kCPU, at::kDouble), sin.to(at::kCPU, at::kDouble));
    EXPECT_EQ(Close(y, ref, OutputTol(dev, ref)), "");
    const at::Tensor gy = testing::Random(rng, {c.t, c.heads, c.d});
    const auto g = testing::Grads({y}, {gy.to(dev, testing::DataType(dev))}, {x.dev, w.dev});
    const auto gr = testing::Grads({ref}, {gy}, {x.ref, w.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "dx";
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "dweight";
    if (dev.is_cuda()) {
      const at::Tensor xb = x.dev.detach().requires_grad_(true), wb = w.dev.detach().requires_grad_(true);
      const at::Tensor hf = HfRotary(HfRmsNorm(xb, wb, 1e-6), cos, sin);
      ExpectHfBf16(y, hf, "y vs bf16 HF");
      const auto gh = testing::Grads({hf}, {gy.to(dev, at::kBFloat16)}, {xb, wb});
      ExpectHfBf16(g[0], gh[0], "dx vs bf16 HF");
      ExpectHfBf16(g[1], gh[1], "dweight vs bf16 HF");
    }
  }
}

TEST_P(FusedOpsTest, SwigluMatchesHf) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const auto& sizes : {std::vector<int64_t>{33, 70}, std::vector<int64_t>{7, 13}}) {
    auto gate = MakeInput(testing::Random(rng, sizes, -6, 6), dev);
    auto up = MakeInput(testing::Random(rng, sizes), dev);
    const at::Tensor y = Swiglu(gate.dev, up.dev);
    const at::Tensor ref = at::silu(gate.ref) * up.ref;
    EXPECT_EQ(Close(y, ref, OutputTol(dev, ref)), "");
    const at::Tensor gy = testing::Random(rng, sizes);
    const auto g = testing::Grads({y}, {gy.to(dev, testing::DataType(dev))}, {gate.dev, up.dev});
    const auto gr = testing::Grads({ref}, {gy}, {gate.ref, up.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "dgate";
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "dup";
    if (dev.is_cuda()) {
      const at::Tensor gb = gate.dev.detach().requires_grad_(true), ub = up.dev.detach().requires_grad_(true);
      const at::Tensor hf = at::silu(gb) * ub;
      ExpectHfBf16(y, hf, "y vs bf16 HF");
      const auto gh = testing::Grads({hf}, {gy.to(dev, at::kBFloat16)}, {gb, ub});
      ExpectHfBf16(g[0], gh[0], "dgate vs bf16 HF");
      ExpectHfBf16(g[1], gh[1], "dup vs bf16 HF");
    }
  }
}

TEST_P(FusedOpsTest, RejectsBadArgumentsWithErrors) {
  const at::Device dev = GetParam();
  const auto opts = at::TensorOptions().device(dev).dtype(testing::DataType(dev));
  const at::Tensor x = at::zeros({4, 8}, opts), w = at::zeros({8}, opts);
  EXPECT_THROW(RmsNorm(x.to(at::kDouble), w, 1e-6), c10::Error);
  EXPECT_THROW(RmsNorm(x, at::zeros({7}, opts), 1e-6), c10::Error);
  EXPECT_THROW(RmsNorm(at::zeros({4, 7}, opts), at::zeros({7}, opts), 1e-6), c10::Error);  // odd width
  EXPECT_THROW(AddRmsNorm(x, at::zeros({4, 6}, opts), w, 1e-6), c10::Error);
  const at::Tensor q = at::zeros({3, 2, 8}, opts), tab = at::zeros({3, 8}, opts);
  EXPECT_THROW(QkNormRotary(q, w, tab, at::zeros({2, 8}, opts), 1e-6), c10::Error);
  EXPECT_THROW(QkNormRotary(q.view({3, 16}), w, tab, tab, 1e-6), c10::Error);
  EXPECT_THROW(QkNormRotary(at::zeros({3, 2, 6}, opts), at::zeros({6}, opts), at::zeros({3, 6}, opts),
                            at::zeros({3, 6}, opts), 1e-6),
               c10::Error);  // head_dim not a multiple of 4
  EXPECT_THROW(Swiglu(x, at::zeros({4, 7}, opts)), c10::Error);
  EXPECT_THROW(Swiglu(x, x.to(at::kDouble)), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedOpsTest, ::testing::ValuesIn(testing::TestDevices()), testing::DeviceName);

TEST(FusedOpsCpuTest, GradientsMatchFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const at::Tensor v = testing::Random(rng, {6, 2, 8}).to(at::kFloat);
  auto [cos64, sin64] = Angles(rng, 6, 8);
  const at::Tensor cos = cos64.to(at::kFloat), sin = sin64.to(at::kFloat);
  auto loss = [&](const std::vector<at::Tensor>& in) {
    const AddRmsNormOutput a = AddRmsNorm(in[0], in[1], in[2], 1e-6);
    const at::Tensor q = QkNormRotary(Swiglu(a.normed, a.sum).view({6, 2, 8}), in[3], cos, sin, 1e-6);
    return (q * v).sum().item<double>() + (RmsNorm(a.sum, in[2], 1e-6) * v.view({6, 16})).sum().item<double>();
  };
  std::vector<at::Tensor> in = {testing::Random(rng, {6, 16}).to(at::kFloat), testing::Random(rng, {6, 16}).to(at::kFloat),
                                testing::Random(rng, {16}, 0.5, 1.5).to(at::kFloat),
                                testing::Random(rng, {8}, 0.5, 1.5).to(at::kFloat)};
  for (auto& t : in) t.requires_grad_(true);
  const AddRmsNormOutput a = AddRmsNorm(in[0], in[1], in[2], 1e-6);
  const at::Tensor q = QkNormRotary(Swiglu(a.normed, a.sum).view({6, 2, 8}), in[3], cos, sin, 1e-6);
  const at::Tensor l = (q * v).sum() + (RmsNorm(a.sum, in[2], 1e-6) * v.view({6, 16})).sum();
  const auto g = testing::Grads({l}, {at::ones({}, l.options())}, in);
  testing::CheckFiniteDifferences(loss, in, g, rng);
}

}  // namespace
}  // namespace tandem::ops

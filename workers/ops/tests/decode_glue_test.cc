// The decode step's fused glue (decode_glue.h) against the ops it replaces,
// run on the same inputs on the same device: on CUDA the one kernel must
// equal QkNormRotary + PagedKvWrite and Swiglu bit for bit (same roundings,
// same math); on the CPU it is those ops. Strided qkv rows (a slice of a
// wider output), padded rows (negative slots) left unwritten, poisoned
// outputs, argument errors. NormLinear and DecodeLinear against the norm,
// at::linear and SwiGLU they replace: equal on the CPU and past the decode
// GEMV's rows; at its 1-8 rows on CUDA the sum equal and the outputs within
// the roundings of fp32 sums in another order.
#include "workers/ops/decode_glue.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <tuple>
#include <utility>

#include "workers/ops/fused_ops.h"
#include "workers/ops/paged_attention_op.h"
#include "workers/ops/tests/torch_test_util.h"

namespace tandem::ops {
namespace {

std::string Thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "no error";
}

class DecodeGlueTest : public ::testing::TestWithParam<at::Device> {};

TEST_P(DecodeGlueTest, QkvRotaryKvWriteEqualsTheOpsItReplaces) {
  const at::Device dev = GetParam();
  const at::ScalarType dt = testing::DataType(dev);
  testing::PoisonOutputs poison;
  std::mt19937_64 rng(7);
  struct Case {
    int64_t t, hq, hkv, d, pad;  // pad: extra columns after q/k/v (a strided slice)
  };
  for (const Case c : {Case{5, 4, 2, 64, 0}, Case{1, 16, 8, 64, 0}, Case{7, 8, 2, 128, 6}, Case{3, 2, 2, 12, 2}}) {
    SCOPED_TRACE("T " + std::to_string(c.t) + " Hq " + std::to_string(c.hq) + " Hkv " + std::to_string(c.hkv) +
                 " D " + std::to_string(c.d) + " pad " + std::to_string(c.pad));
    const int64_t width = (c.hq + 2 * c.hkv) * c.d, blocks = 6, bs = 4;
    const at::Tensor wide = testing::Random(rng, {c.t, width + c.pad}, -3, 3).to(dev, dt);
    const at::Tensor qkv = wide.narrow(1, 0, width);
    const at::Tensor qw = testing::Random(rng, {c.d}, 0.5, 1.5).to(dev, dt);
    const at::Tensor kw = testing::Random(rng, {c.d}, 0.5, 1.5).to(dev, dt);
    const at::Tensor pos = testing::Random(rng, {c.t, c.d / 2}, 0, 4000).floor();
    const at::Tensor emb = at::cat({pos, pos}, -1);
    const at::Tensor cos = emb.cos().to(dev, dt), sin = emb.sin().to(dev, dt);
    std::vector<int64_t> slot_list;
    for (int64_t i = 0; i < c.t; ++i) slot_list.push_back(i == 1 ? -1 : (i * 5 + 3) % (blocks * bs));  // row 1 padded
    const at::Tensor slots = at::tensor(slot_list, at::TensorOptions().dtype(at::kLong)).to(dev);
    const at::Tensor garbage = testing::Random(rng, {blocks, bs, c.hkv, c.d}, -50, 50).to(dev, dt);
    at::Tensor kb = garbage.clone(), vb = garbage.clone() * 2;
    at::Tensor kb_ref = kb.clone(), vb_ref = vb.clone();

    const at::Tensor q = QkvRotaryKvWrite(qkv, qw, kw, cos, sin, kb, vb, slots, c.hq, 1e-6);
    const auto view = [&](int64_t from, int64_t heads) {
      return qkv.narrow(1, from * c.d, heads * c.d).reshape({c.t, heads, c.d});
    };
    const at::Tensor q_ref = QkNormRotary(view(0, c.hq), qw, cos, sin, 1e-6);
    PagedKvWrite(QkNormRotary(view(c.hq, c.hkv), kw, cos, sin, 1e-6), view(c.hq + c.hkv, c.hkv), kb_ref, vb_ref,
                 slots);
    EXPECT_TRUE(at::equal(q, q_ref)) << "q";
    EXPECT_TRUE(at::equal(kb, kb_ref)) << "key pool";
    EXPECT_TRUE(at::equal(vb, vb_ref)) << "value pool";
    EXPECT_EQ(q.sizes(), (std::vector<int64_t>{c.t, c.hq, c.d}));
  }
}

TEST_P(DecodeGlueTest, SwigluPackedEqualsSwiglu) {
  const at::Device dev = GetParam();
  const at::ScalarType dt = testing::DataType(dev);
  testing::PoisonOutputs poison;
  std::mt19937_64 rng(8);
  for (const int64_t inter : {2, 96, 1408, 11}) {
    SCOPED_TRACE("I " + std::to_string(inter));
    const at::Tensor gu = testing::Random(rng, {5, 2 * inter}, -6, 6).to(dev, dt);
    const at::Tensor y = SwigluPacked(gu);
    EXPECT_TRUE(at::equal(y, Swiglu(gu.narrow(1, 0, inter).contiguous(), gu.narrow(1, inter, inter).contiguous())));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, inter}));
  }
}

// The largest error of `got` against `ref` relative to ref's largest
// magnitude, and their relative L2 distance.
std::pair<double, double> Errors(const at::Tensor& got, const at::Tensor& ref) {
  const at::Tensor g = got.to(at::kDouble).cpu(), r = ref.to(at::kDouble).cpu();
  const double scale = r.abs().max().item<double>() + 1e-12;
  const double l2 = (g - r).norm().item<double>() / (r.norm().item<double>() + 1e-12);
  return {(g - r).abs().max().item<double>() / scale, l2};
}

TEST_P(DecodeGlueTest, NormLinearAndDecodeLinearMatchTheOpsTheyReplace) {
  const at::Device dev = GetParam();
  const at::ScalarType dt = testing::DataType(dev);
  testing::PoisonOutputs poison;
  std::mt19937_64 rng(9);
  for (const int64_t rows : {1, 3, 8, 9})
    for (const int64_t in : {64, 1024})
      for (const int64_t out : {6, 1030})
        for (const bool with_delta : {false, true})
          for (const bool swiglu : {false, true}) {
            SCOPED_TRACE("rows " + std::to_string(rows) + " in " + std::to_string(in) + " out " + std::to_string(out) +
                         " delta " + std::to_string(with_delta) + " swiglu " + std::to_string(swiglu));
            const at::Tensor x = testing::Random(rng, {rows, in}, -3, 3).to(dev, dt);
            const at::Tensor delta = with_delta ? testing::Random(rng, {rows, in}).to(dev, dt) : at::Tensor();
            const at::Tensor nw = testing::Random(rng, {in}, 0.5, 1.5).to(dev, dt);
            const at::Tensor w = testing::Random(rng, {out, in}, -0.1, 0.1).to(dev, dt);
            const NormLinearOutput got = NormLinear(x, delta, nw, 1e-6, w, swiglu);
            const AddRmsNormOutput n =
                with_delta ? AddRmsNorm(x, delta, nw, 1e-6) : AddRmsNormOutput{x, RmsNorm(x, nw, 1e-6)};
            at::Tensor ref = at::linear(n.normed, w);
            if (swiglu) ref = SwigluPacked(ref);
            const at::Tensor linear = DecodeLinear(x, w), linear_ref = at::linear(x, w);
            EXPECT_TRUE(at::equal(got.sum, n.sum)) << "sum";
            ASSERT_EQ(got.y.sizes(), ref.sizes());
            if (!dev.is_cuda() || rows > 8) {
              EXPECT_TRUE(at::equal(got.y, ref)) << "y";
              EXPECT_TRUE(at::equal(linear, linear_ref)) << "linear";
              continue;
            }
            for (const auto& [g, r, what] : {std::tuple{got.y, ref, "y"}, std::tuple{linear, linear_ref, "linear"}}) {
              const auto [max_err, l2] = Errors(g, r);
              EXPECT_LT(max_err, 3e-2) << what;
              EXPECT_LT(l2, 1e-2) << what;
            }
          }
}

TEST_P(DecodeGlueTest, RejectsBadArgumentsWithErrors) {
  const at::Device dev = GetParam();
  const at::ScalarType dt = testing::DataType(dev);
  const auto on = at::TensorOptions().device(dev).dtype(dt);
  const at::Tensor qkv = at::zeros({2, 8 * 16}, on), w = at::ones({16}, on), tab = at::zeros({2, 16}, on);
  at::Tensor kb = at::zeros({2, 4, 2, 16}, on), vb = at::zeros({2, 4, 2, 16}, on);
  const at::Tensor slots = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(dev));
  EXPECT_EQ(Thrown([&] { QkvRotaryKvWrite(qkv, w, w, tab, tab, kb, vb, slots, 4, 1e-6); }), "no error");
  EXPECT_NE(Thrown([&] { QkvRotaryKvWrite(qkv, w, w, tab, tab, kb, vb, slots, 5, 1e-6); }).find("qkv must be [T, (5"),
            std::string::npos);
  const at::Tensor grad = qkv.clone().requires_grad_(true);
  EXPECT_NE(Thrown([&] { QkvRotaryKvWrite(grad, w, w, tab, tab, kb, vb, slots, 4, 1e-6); }).find("forward only"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { QkvRotaryKvWrite(qkv, w, w, tab.narrow(0, 0, 1), tab, kb, vb, slots, 4, 1e-6); }).find("cos"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { SwigluPacked(at::zeros({2, 7}, on)); }).find("gate_up must be [T, 2I]"), std::string::npos);
  EXPECT_NE(Thrown([&] { SwigluPacked(at::zeros({2, 8}, on.dtype(at::kDouble))); }).find("gate_up must be"),
            std::string::npos);

  const at::Tensor x = at::ones({2, 16}, on), nw = at::ones({16}, on), proj = at::ones({6, 16}, on);
  EXPECT_EQ(Thrown([&] { NormLinear(x, x, nw, 1e-6, proj, true); }), "no error");
  EXPECT_NE(Thrown([&] { NormLinear(x, x, nw, 1e-6, at::ones({6, 8}, on), false); }).find("weight must be [O, 16]"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { NormLinear(x, x, at::ones({8}, on), 1e-6, proj, false); }).find("norm_weight must be [16]"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { NormLinear(x, at::ones({1, 16}, on), nw, 1e-6, proj, false); }).find("delta must be"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { NormLinear(x, x, nw, 1e-6, at::ones({5, 16}, on), true); }).find("even number of rows"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { NormLinear(x, x, nw, 1e-6, proj.clone().requires_grad_(true), false); }).find("forward only"),
            std::string::npos);
  EXPECT_NE(Thrown([&] { DecodeLinear(x, at::ones({6, 8}, on)); }).find("weight must be [O, 16]"), std::string::npos);
  EXPECT_NE(Thrown([&] { DecodeLinear(x.to(at::kDouble), proj); }).find("x must be"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Devices, DecodeGlueTest, ::testing::ValuesIn(testing::TestDevices()), testing::DeviceName);

}  // namespace
}  // namespace tandem::ops

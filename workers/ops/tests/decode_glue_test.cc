// The decode step's fused glue (decode_glue.h) against the ops it replaces,
// run on the same inputs on the same device: on CUDA the one kernel must
// equal QkNormRotary + PagedKvWrite and Swiglu bit for bit (same roundings,
// same math); on the CPU it is those ops. Strided qkv rows (a slice of a
// wider output), padded rows (negative slots) left unwritten, poisoned
// outputs, argument errors.
#include "workers/ops/decode_glue.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <string>

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
}

INSTANTIATE_TEST_SUITE_P(Devices, DecodeGlueTest, ::testing::ValuesIn(testing::TestDevices()), testing::DeviceName);

}  // namespace
}  // namespace tandem::ops

// LM-head loss glue (lm_head_loss_op.h): log-probs, entropies and gradients
// for hidden and weight against a float64 reference written with ordinary
// LibTorch ops (full logits, test-only), rows in several pairs or in none,
// vocabularies not multiple of the chunk, either output alone; finite
// differences; poisoned outputs; argument errors. CPU always, CUDA (bf16)
// when present.
#include "workers/ops/lm_head_loss_op.h"

#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include <cmath>

#include "workers/ops/tests/torch_test_util.h"

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)
namespace {

using testing::Close;
using testing::GradTol;
using testing::MakeInput;
using testing::OutputTol;

struct Ref {
  at::Tensor logprob, entropy;
};
Ref Reference(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& rows, const at::Tensor& labels,
              double temperature) {
  const at::Tensor logp = (hidden.matmul(weight.t()) / temperature).log_softmax(-1);
  const at::Tensor lp = logp.index_select(0, rows.to(at::kLong)).gather(1, labels.to(at::kLong).unsqueeze(1));
  return {lp.squeeze(1), -(logp.exp() * logp).sum(1)};
}

struct Case {
  int64_t rows, hidden, vocab, pairs, chunk;
  double temperature;
};

class LmHeadLossOpTest : public ::testing::TestWithParam<at::Device> {};

TEST_P(LmHeadLossOpTest, OutputsAndGradientsMatchReference) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const Case cases[] = {{37, 64, 1000, 50, 16, 1.0},   // V and N not multiples of the chunk
                        {20, 128, 515, 7, 8, 0.7},     // most rows in no pair
                        {1, 64, 129, 3, 1024, 1.3},    // one row in three pairs
                        {9, 64, 300, 0, 4, 1.0}};      // no pairs: entropy only
  for (const Case& c : cases) {
    const uint64_t seed = kernels::testing::FreshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " N=" + std::to_string(c.rows) + " V=" + std::to_string(c.vocab));
    std::mt19937_64 rng(seed);
    auto hidden = MakeInput(testing::Random(rng, {c.rows, c.hidden}), dev);
    auto weight = MakeInput(testing::Random(rng, {c.vocab, c.hidden}, -0.2, 0.2), dev);
    std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(c.rows - 1)), lab(0, c.vocab - 1);
    std::vector<int32_t> rv, lv;
    for (int64_t i = 0; i < c.pairs; ++i) rv.push_back(row(rng)), lv.push_back(lab(rng));
    if (c.pairs > 0) lv.back() = c.vocab - 1;  // the last column of the last chunk
    const at::Tensor rows = testing::IntTensor(rv), labels = testing::IntTensor(lv);

    // int64 indices on the CPU, int32 on CUDA: both are accepted.
    const at::Tensor drows = dev.is_cpu() ? rows.to(at::kLong) : rows.to(dev);
    const at::Tensor dlabels = dev.is_cpu() ? labels.to(at::kLong) : labels.to(dev);
    const LmHeadLossOutput out = LmHeadLoss(hidden.dev, weight.dev, drows, dlabels, c.temperature, c.chunk);
    const Ref ref = Reference(hidden.ref, weight.ref, rows, labels, c.temperature);
    EXPECT_EQ(out.logprob.scalar_type(), at::kFloat);
    EXPECT_EQ(Close(out.logprob, ref.logprob, OutputTol(dev, ref.logprob)), "");
    EXPECT_EQ(Close(out.entropy, ref.entropy, OutputTol(dev, ref.entropy)), "");

    const at::Tensor glp = testing::Random(rng, {c.pairs}), gent = testing::Random(rng, {c.rows});
    const auto g = testing::Grads({out.logprob, out.entropy}, {glp.to(dev, at::kFloat), gent.to(dev, at::kFloat)},
                                  {hidden.dev, weight.dev});
    const auto gr = testing::Grads({ref.logprob, ref.entropy}, {glp, gent}, {hidden.ref, weight.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "dhidden";
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "dweight";
  }
}

TEST_P(LmHeadLossOpTest, EitherOutputAloneHasItsOwnGradient) {
  const at::Device dev = GetParam();
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto hidden = MakeInput(testing::Random(rng, {11, 64}), dev);
  auto weight = MakeInput(testing::Random(rng, {70, 64}, -0.2, 0.2), dev);
  const at::Tensor rows = testing::IntTensor({0, 0, 3, 10}), labels = testing::IntTensor({1, 69, 5, 0});
  for (int which = 0; which < 2; ++which) {
    const Ref ref = Reference(hidden.ref, weight.ref, rows, labels, 1.0);
    const LmHeadLossOutput out = LmHeadLoss(hidden.dev, weight.dev, rows.to(dev), labels.to(dev), 1.0, 4);
    const at::Tensor o = which == 0 ? out.logprob : out.entropy;
    const at::Tensor r = which == 0 ? ref.logprob : ref.entropy;
    const at::Tensor go = testing::Random(rng, {o.numel()});
    const auto g = testing::Grads({o}, {go.to(dev, at::kFloat)}, {hidden.dev, weight.dev});
    const auto gr = testing::Grads({r}, {go}, {hidden.ref, weight.ref});
    EXPECT_EQ(Close(g[0], gr[0], GradTol(dev, gr[0])), "") << "output " << which;
    EXPECT_EQ(Close(g[1], gr[1], GradTol(dev, gr[1])), "") << "output " << which;
  }
}

TEST_P(LmHeadLossOpTest, RejectsBadArgumentsWithErrors) {
  const at::Device dev = GetParam();
  const auto opts = at::TensorOptions().device(dev).dtype(testing::DataType(dev));
  const at::Tensor h = at::zeros({4, 8}, opts), w = at::zeros({10, 8}, opts);
  const at::Tensor rows = testing::IntTensor({0, 3}).to(dev), labels = testing::IntTensor({1, 9}).to(dev);
  EXPECT_THROW(LmHeadLoss(h.to(at::kDouble), w, rows, labels, 1.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, at::zeros({10, 7}, opts), rows, labels, 1.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows.to(at::kFloat), labels, 1.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows.narrow(0, 0, 1), labels, 1.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows.view({1, 2}), labels.view({1, 2}), 1.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows, labels, 0.0, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows, labels, INFINITY, 4), c10::Error);
  EXPECT_THROW(LmHeadLoss(h, w, rows, labels, 1.0, 0), c10::Error);
  const at::Tensor bad_labels = testing::IntTensor({1, 10}).to(dev);
  if (dev.is_cpu()) {
    EXPECT_THROW(LmHeadLoss(h, w, rows, bad_labels, 1.0, 4), c10::Error);
    EXPECT_THROW(LmHeadLoss(h, w, testing::IntTensor({0, 4}), labels, 1.0, 4), c10::Error);
  } else {
    EXPECT_THROW(LmHeadLoss(h, w, rows.cpu(), labels, 1.0, 4), c10::Error);  // indices on another device
    // Out of range on CUDA: a NaN log-prob for that pair, no memory fault.
    const LmHeadLossOutput out = LmHeadLoss(h, w, rows, bad_labels, 1.0, 4);
    EXPECT_TRUE(std::isnan(out.logprob.cpu().data_ptr<float>()[1]));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, LmHeadLossOpTest, ::testing::ValuesIn(testing::TestDevices()), testing::DeviceName);

TEST(LmHeadLossOpCpuTest, GradientsMatchFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<at::Tensor> in = {testing::Random(rng, {5, 6}).to(at::kFloat),
                                testing::Random(rng, {13, 6}).to(at::kFloat)};
  const at::Tensor rows = testing::IntTensor({0, 0, 2, 4}), labels = testing::IntTensor({3, 12, 0, 7});
  const at::Tensor glp = testing::Random(rng, {4}), gent = testing::Random(rng, {5});
  for (auto& t : in) t.requires_grad_(true);
  const LmHeadLossOutput out = LmHeadLoss(in[0], in[1], rows, labels, 0.8, 2);
  const auto g = testing::Grads({out.logprob, out.entropy}, {glp.to(at::kFloat), gent.to(at::kFloat)}, in);
  auto loss = [&](const std::vector<at::Tensor>& x) {
    const LmHeadLossOutput o = LmHeadLoss(x[0], x[1], rows, labels, 0.8, 2);
    return ((o.logprob.to(at::kDouble) * glp).sum() + (o.entropy.to(at::kDouble) * gent).sum()).item<double>();
  };
  for (auto& t : in) t = t.detach();
  testing::CheckFiniteDifferences(loss, in, g, rng);
}

}  // namespace
}  // namespace tandem::ops

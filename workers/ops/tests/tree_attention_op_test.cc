// Tree attention glue (tree_attention_op.h): outputs and gradients against a
// float64 reference written with ordinary LibTorch ops (a dense ancestor mask,
// built here in the test only, on small shapes), finite differences, poisoned
// outputs, and argument errors. Runs on the CPU, and on CUDA (bf16) when the
// glue has its CUDA path and a GPU is present.
#include "workers/ops/tree_attention_op.h"

#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>

#include "workers/ops/tests/torch_test_util.h"
#include "kernels/tree_attention/forest_builder.h"
#include "kernels/tree_attention/tests/random_forest.h"

namespace tandem::ops {

// The kernels this glue wraps (their types and launchers).
using namespace ::tandem::kernels;  // NOLINT(google-build-using-namespace)
namespace {

using testing::Close;
using testing::GradTol;
using testing::MakeInput;
using testing::OutputTol;

// Sequences sharing prefixes: G responses after one prompt, tokens drawn from
// a tiny vocabulary so that responses fork at random depths (one-token
// segments included), plus plain sequences (one of one token).
std::vector<std::vector<int32_t>> RandomSequences(std::mt19937_64& rng, int prompt, int responses, int max_len) {
  std::uniform_int_distribution<int32_t> tok(0, 2);
  std::uniform_int_distribution<int> len(1, max_len);
  std::vector<int32_t> p(prompt);
  for (auto& t : p) t = 100 + tok(rng);
  std::vector<std::vector<int32_t>> seqs;
  for (int g = 0; g < responses; ++g) {
    auto s = p;
    for (int i = len(rng); i > 0; --i) s.push_back(tok(rng));
    seqs.push_back(s);
  }
  seqs.push_back({7});                          // a one-token sequence
  seqs.push_back(std::vector<int32_t>(67, 9));  // a plain sequence past one tile
  return seqs;
}

// out = softmax(q k^T * scale + mask) v per head, float64, GQA by repetition.
at::Tensor DenseReference(const Forest& forest, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          double scale) {
  const int64_t T = q.size(0), group = q.size(1) / k.size(1);
  const std::vector<int32_t> kend = KeyVisibleEnd(forest);
  at::Tensor visible = at::zeros({T, T}, at::TensorOptions().dtype(at::kBool));
  bool* m = visible.data_ptr<bool>();
  for (int64_t qi = 0; qi < T; ++qi) {
    for (int64_t ki = 0; ki <= qi; ++ki) m[qi * T + ki] = qi < kend[ki];
  }
  const at::Tensor kr = k.repeat_interleave(group, 1).permute({1, 2, 0});  // [H, D, T]
  const at::Tensor vr = v.repeat_interleave(group, 1).permute({1, 0, 2});  // [H, T, D]
  at::Tensor s = q.permute({1, 0, 2}).matmul(kr) * scale;                   // [H, T, T]
  s = s.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return s.softmax(-1).matmul(vr).permute({1, 0, 2});
}

// Random q, k, v (4 query heads, 2 kv heads, head dim D) on `dev`: the
// output and the gradients of `impl` against DenseReference.
void ExpectMatchesDenseReference(std::mt19937_64& rng, const at::Device& dev,
                                 const c10::intrusive_ptr<TreeForest>& forest, int64_t D, TreeAttentionImpl impl) {
  const int64_t T = forest->num_tokens(), Hq = 4, Hkv = 2;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto q = MakeInput(testing::Random(rng, {T, Hq, D}), dev);
  auto k = MakeInput(testing::Random(rng, {T, Hkv, D}), dev);
  auto v = MakeInput(testing::Random(rng, {T, Hkv, D}), dev);
  const at::Tensor dout = testing::Random(rng, {T, Hq, D});
  const at::Tensor out = TreeAttention(q.dev, k.dev, v.dev, forest, scale, impl);
  const at::Tensor ref = DenseReference(forest->forest(), q.ref, k.ref, v.ref, scale);
  EXPECT_EQ(out.device(), dev);
  EXPECT_EQ(out.scalar_type(), testing::DataType(dev));
  EXPECT_EQ(Close(out, ref, OutputTol(dev, ref)), "");
  const auto g = testing::Grads({out}, {dout.to(dev, out.scalar_type())}, {q.dev, k.dev, v.dev});
  const auto gr = testing::Grads({ref}, {dout}, {q.ref, k.ref, v.ref});
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Close(g[i], gr[i], GradTol(dev, gr[i])), "") << names[i];
}

class TreeAttentionOpTest : public ::testing::TestWithParam<at::Device> {};

TEST_P(TreeAttentionOpTest, OutputAndGradientsMatchDenseReference) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  for (int64_t D : {64, 128}) {
    const uint64_t seed = kernels::testing::FreshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " head dim " + std::to_string(D));
    std::mt19937_64 rng(seed);
    auto packed = BuildPackedForest(RandomSequences(rng, 70, 5, 40));
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    ExpectMatchesDenseReference(rng, dev, TreeForest::Create(packed->forest), D, TreeAttentionImpl::kDefault);
  }
}

// The varlen implementations (tree_attention_varlen.h), both forms, against
// the same float64 reference: the reference kernel on every device,
// FlashAttention-2 on CUDA (head dim 48 too, which the tree kernels do not
// take); forests
// with deep chains of 1-3-token segments and many leaves; a chunk budget of
// 7 keys cuts them into many calls.
TEST_P(TreeAttentionOpTest, VarlenMatchesDenseReference) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  std::vector<TreeAttentionImpl> impls = {TreeAttentionImpl::kVarlenReference, TreeAttentionImpl::kVarlenSplitReference};
  if (dev.is_cuda()) impls.insert(impls.end(), {TreeAttentionImpl::kVarlenFlash, TreeAttentionImpl::kVarlenSplitFlash});
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const kernels::testing::ForestParams chain{.max_depth = 40, .max_fanout = 1, .max_seg_len = 3, .max_tokens = 120};
  const kernels::testing::ForestParams leaves{.max_depth = 3, .max_fanout = 9, .max_seg_len = 3, .roots = 2,
                                              .max_tokens = 200};
  auto group = BuildPackedForest(RandomSequences(rng, 70, 5, 40));
  ASSERT_TRUE(group.ok());
  const Forest forests[] = {group->forest, kernels::testing::RandomForest(rng, chain),
                            kernels::testing::RandomForest(rng, leaves)};
  for (const Forest& f : forests) {
    for (int64_t budget : {TreeForest::kVarlenChunkKeys, int64_t{7}}) {
      auto forest = TreeForest::Create(f, budget);
      for (int64_t D : dev.is_cuda() ? std::vector<int64_t>{48, 128} : std::vector<int64_t>{16}) {
        for (TreeAttentionImpl impl : impls) {
          SCOPED_TRACE("tokens " + std::to_string(f.num_tokens) + " budget " + std::to_string(budget) + " D " +
                       std::to_string(D) + " impl " + std::to_string(static_cast<int>(impl)));
          ExpectMatchesDenseReference(rng, dev, forest, D, impl);
        }
      }
    }
  }
}

TEST_P(TreeAttentionOpTest, ForestReusedAcrossCallsGivesSameResult) {
  const at::Device dev = GetParam();
  std::mt19937_64 rng(kernels::testing::FreshSeed());
  auto packed = BuildPackedForest({{1, 2, 3, 4}, {1, 2, 5}, {1, 6}, {8}});
  ASSERT_TRUE(packed.ok());
  auto forest = TreeForest::Create(packed->forest);
  const int64_t T = forest->num_tokens();
  const at::Tensor q = testing::Random(rng, {T, 2, 64}).to(dev, testing::DataType(dev));
  const at::Tensor kv = testing::Random(rng, {T, 1, 64}).to(dev, testing::DataType(dev));
  const at::Tensor a = TreeAttention(q, kv, kv, forest, 0.125);
  const at::Tensor b = TreeAttention(q, kv, kv, forest, 0.125);
  EXPECT_TRUE(a.equal(b));
  // A root token sees only itself: its output is its own value row.
  EXPECT_EQ(Close(a.select(0, 0), kv.select(0, 0).expand({2, 64}), OutputTol(dev, a)), "");
}

TEST_P(TreeAttentionOpTest, RejectsBadArgumentsWithErrors) {
  const at::Device dev = GetParam();
  const at::ScalarType dt = testing::DataType(dev);
  auto packed = BuildPackedForest({{1, 2, 3}, {1, 4}});
  ASSERT_TRUE(packed.ok());
  auto forest = TreeForest::Create(packed->forest);
  const int64_t T = forest->num_tokens();
  auto opts = at::TensorOptions().device(dev).dtype(dt);
  const at::Tensor q = at::zeros({T, 4, 64}, opts), kv = at::zeros({T, 2, 64}, opts);
  EXPECT_THROW(TreeAttention(q.to(at::kDouble), kv, kv, forest, 0.1), c10::Error);              // dtype
  EXPECT_THROW(TreeAttention(q, kv.to(at::kDouble), kv, forest, 0.1), c10::Error);              // mixed dtypes
  EXPECT_THROW(TreeAttention(q.narrow(0, 0, T - 1), kv, kv, forest, 0.1), c10::Error);          // tokens
  EXPECT_THROW(TreeAttention(q, at::zeros({T, 3, 64}, opts), kv, forest, 0.1), c10::Error);     // GQA / k != v
  EXPECT_THROW(TreeAttention(q, at::zeros({T, 3, 64}, opts), at::zeros({T, 3, 64}, opts), forest, 0.1),
               c10::Error);                                                                     // 4 % 3
  EXPECT_THROW(TreeAttention(q, kv, kv, forest, 0.0), c10::Error);                              // scale
  EXPECT_THROW(TreeAttention(q, kv, kv, forest, std::nan("")), c10::Error);
  EXPECT_THROW(TreeAttention(q.view({T, 256}), kv, kv, forest, 0.1), c10::Error);               // rank
  EXPECT_THROW(TreeAttention(q, kv, kv, c10::intrusive_ptr<TreeForest>(), 0.1), c10::Error);    // no forest
  EXPECT_THROW(TreeForest::Create(packed->forest, 0), c10::Error);                              // chunk budget
  if (dev.is_cuda()) {
    EXPECT_THROW(TreeAttention(q.cpu(), kv, kv, forest, 0.1), c10::Error);                     // mixed devices
    const at::Tensor q48 = at::zeros({T, 4, 48}, opts), kv48 = at::zeros({T, 2, 48}, opts);
    EXPECT_THROW(TreeAttention(q48, kv48, kv48, forest, 0.1), c10::Error);                     // head dim
  }
}

TEST(TreeAttentionOpCpuTest, VarlenAgreesWithTheTilesAndRefusesFlashOnTheCpu) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto packed = BuildPackedForest(RandomSequences(rng, 90, 6, 50));
  ASSERT_TRUE(packed.ok());
  auto forest = TreeForest::Create(packed->forest, 100);
  const int64_t T = forest->num_tokens();
  std::vector<at::Tensor> in = {testing::Random(rng, {T, 4, 32}).to(at::kFloat),
                                testing::Random(rng, {T, 1, 32}).to(at::kFloat),
                                testing::Random(rng, {T, 1, 32}).to(at::kFloat)};
  for (auto& t : in) t.requires_grad_(true);
  const at::Tensor w = testing::Random(rng, {T, 4, 32}).to(at::kFloat);
  const at::Tensor tiles = TreeAttention(in[0], in[1], in[2], forest, 0.2, TreeAttentionImpl::kTiles);
  const auto gt = testing::Grads({tiles}, {w}, in);
  for (TreeAttentionImpl impl : {TreeAttentionImpl::kVarlenReference, TreeAttentionImpl::kVarlenSplitReference}) {
    const at::Tensor varlen = TreeAttention(in[0], in[1], in[2], forest, 0.2, impl);
    EXPECT_EQ(Close(varlen, tiles, OutputTol(at::Device(at::kCPU), tiles)), "");
    const auto gv = testing::Grads({varlen}, {w}, in);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(Close(gv[i], gt[i], GradTol(at::Device(at::kCPU), gt[i])), "") << i;
  }
  for (TreeAttentionImpl impl : {TreeAttentionImpl::kVarlenFlash, TreeAttentionImpl::kVarlenSplitFlash}) {
    try {
      TreeAttention(in[0], in[1], in[2], forest, 0.2, impl);
      ADD_FAILURE() << "varlen-flash ran on the CPU";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA only"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TreeAttentionOpTest, ::testing::ValuesIn(testing::TestDevices()),
                         testing::DeviceName);

TEST(TreeAttentionOpCpuTest, PositionIdsAreTrieDepths) {
  auto packed = BuildPackedForest({{1, 2, 3, 4}, {1, 2, 5}, {1, 6}, {8}, {8, 9}});
  ASSERT_TRUE(packed.ok());
  auto forest = TreeForest::Create(packed->forest);
  const at::Tensor pos = forest->position_ids();
  ASSERT_EQ(pos.numel(), forest->num_tokens());
  EXPECT_EQ(pos.scalar_type(), at::kLong);
  for (int64_t i = 0; i < pos.numel(); ++i) EXPECT_EQ(pos.data_ptr<int64_t>()[i], packed->position_ids[i]) << i;
}

TEST(TreeAttentionOpCpuTest, InvalidForestIsAnError) {
  Forest bad;
  bad.num_tokens = 4;
  bad.segments = {{0, 2, -1}, {2, 3, 0}};  // runs past num_tokens
  EXPECT_THROW(TreeForest::Create(bad), c10::Error);
  bad.segments = {{0, 2, 1}, {2, 2, -1}};  // parent after child
  EXPECT_THROW(TreeForest::Create(bad), c10::Error);
}

TEST(TreeAttentionOpCpuTest, GradientsMatchFiniteDifferences) {
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto packed = BuildPackedForest({{1, 2, 3, 4, 5}, {1, 2, 6}, {1, 2, 6, 7}, {9}});
  ASSERT_TRUE(packed.ok());
  auto forest = TreeForest::Create(packed->forest);
  const int64_t T = forest->num_tokens();
  std::vector<at::Tensor> in = {testing::Random(rng, {T, 2, 8}).to(at::kFloat),
                                testing::Random(rng, {T, 1, 8}).to(at::kFloat),
                                testing::Random(rng, {T, 1, 8}).to(at::kFloat)};
  const at::Tensor w = testing::Random(rng, {T, 2, 8});
  for (auto& t : in) t.requires_grad_(true);
  const at::Tensor out = TreeAttention(in[0], in[1], in[2], forest, 0.5);
  const auto g = testing::Grads({out}, {w.to(at::kFloat)}, in);
  auto loss = [&](const std::vector<at::Tensor>& x) {
    return (TreeAttention(x[0], x[1], x[2], forest, 0.5).to(at::kDouble) * w).sum().item<double>();
  };
  testing::CheckFiniteDifferences(loss, in, g, rng);
}

}  // namespace
}  // namespace tandem::ops

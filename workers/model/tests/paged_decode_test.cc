// Transformer::DecodePaged on the CPU (fp32), dense and MoE: decoding
// sequences step by step over a paged cache of shuffled blocks (pools
// filled with garbage, so a read out of place shows) gives, at every new
// token, the logits of Transformer::Decode over a contiguous KvCache of that
// sequence alone — with steps of several new tokens per sequence, sequences
// leaving the batch, all_logits or last-token logits; a chunked prefill
// through DecodePaged gives Forward's log-probs; a sequence whose leading
// blocks are another's (a shared prompt) decodes as if it held them itself.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "workers/model/paged_kv.h"
#include "workers/model/tests/model_test_util.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tandem::model::testing {
namespace {

Tolerance OutTol(const at::Tensor& ref) { return {1e-4 * Rms(ref) + 1e-6, 1e-3}; }

// Logits [L, V] at every position of `seq`, decoded alone over a contiguous cache.
at::Tensor ContiguousLogits(const Transformer& m, const std::vector<int32_t>& seq) {
  KvCache cache = KvCache::Empty(m.config(), 1, m.device(), m.dtype());
  std::vector<at::Tensor> rows;
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(m.device());
  for (size_t t = 0; t < seq.size(); ++t) {
    const DecodeOutput d = m.Decode(at::tensor(std::vector<int64_t>{seq[t]}, i64),
                                    at::full({1}, static_cast<int64_t>(t), i64), cache);
    rows.push_back(d.logits[0]);
    cache.Append(d.new_keys, d.new_values);
  }
  return at::stack(rows);
}

struct PagedSeq {
  std::vector<int32_t> tokens;
  int64_t done = 0;             // tokens already in the cache
  std::vector<int32_t> blocks;  // its block table
};

// The engine's side, for the tests: per-layer pools of garbage, blocks handed
// out from a shuffled list, and the PagedKv of a step.
class TestPagedCache {
 public:
  TestPagedCache(const ModelConfig& c, int64_t num_blocks, int64_t block_size, std::mt19937_64& rng,
                 at::Device device = at::Device(at::kCPU), at::ScalarType dtype = at::kFloat)
      : bs_(block_size), device_(device), free_(static_cast<size_t>(num_blocks)) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::vector<int64_t> sizes{num_blocks, block_size, c.num_key_value_heads, c.head_dim};
      keys_.push_back((at::randn(sizes) * 100).to(device, dtype));
      values_.push_back((at::randn(sizes) * 100).to(device, dtype));
    }
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), rng);
  }

  struct Step {
    at::Tensor tokens, positions;
    PagedKv kv;
  };
  // Sequences `seqs` each feed their next q_lens[i] tokens (blocks allocated
  // as needed); the caller advances `done` after the call.
  Step Prepare(const std::vector<PagedSeq*>& seqs, const std::vector<int64_t>& q_lens) {
    std::vector<int64_t> tokens, positions, slots;
    std::vector<int32_t> ctx, ql;
    size_t width = 1;
    for (size_t i = 0; i < seqs.size(); ++i) {
      PagedSeq& s = *seqs[i];
      const int64_t end = s.done + q_lens[i];
      while (static_cast<int64_t>(s.blocks.size()) * bs_ < end) {
        EXPECT_FALSE(free_.empty()) << "test pool too small";
        s.blocks.push_back(free_.back());
        free_.pop_back();
      }
      for (int64_t t = s.done; t < end; ++t) {
        tokens.push_back(s.tokens[static_cast<size_t>(t)]);
        positions.push_back(t);
        slots.push_back(int64_t{s.blocks[static_cast<size_t>(t / bs_)]} * bs_ + t % bs_);
      }
      ctx.push_back(static_cast<int32_t>(end));
      ql.push_back(static_cast<int32_t>(q_lens[i]));
      width = std::max(width, s.blocks.size());
    }
    at::Tensor table = at::full({static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width) + 1}, 987654,
                                at::TensorOptions().dtype(at::kInt));  // unused entries: never read
    for (size_t i = 0; i < seqs.size(); ++i)
      for (size_t j = 0; j < seqs[i]->blocks.size(); ++j)
        table[static_cast<int64_t>(i)][static_cast<int64_t>(j)] = seqs[i]->blocks[j];
    const auto i32 = at::TensorOptions().dtype(at::kInt);
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    Step st;
    st.tokens = at::tensor(tokens, i64).to(device_);
    st.positions = at::tensor(positions, i64).to(device_);
    st.kv.key_blocks = keys_;
    st.kv.value_blocks = values_;
    st.kv.block_table = table.to(device_);
    st.kv.context_lens = at::tensor(ctx, i32).to(device_);
    st.kv.q_lens = at::tensor(ql, i32).to(device_);
    st.kv.slot_mapping = at::tensor(slots, i64).to(device_);
    return st;
  }

 private:
  int64_t bs_;
  at::Device device_;
  std::vector<int32_t> free_;
  std::vector<at::Tensor> keys_, values_;
};

class PagedDecodeTest : public ::testing::TestWithParam<bool> {};

TEST_P(PagedDecodeTest, StepByStepEqualsContiguousDecode) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  const auto toks = RandomSequences(rng, {9, 14, 6}, c.vocab_size);
  std::vector<PagedSeq> seqs(3);
  std::vector<at::Tensor> ref;
  for (size_t s = 0; s < 3; ++s) {
    seqs[s].tokens = toks[s];
    ref.push_back(ContiguousLogits(*model, toks[s]));
  }
  TestPagedCache cache(c, 16, 4, rng);
  for (int step = 0;; ++step) {
    std::vector<PagedSeq*> live;
    std::vector<int64_t> q_lens;
    for (size_t s = 0; s < 3; ++s) {
      const int64_t left = static_cast<int64_t>(seqs[s].tokens.size()) - seqs[s].done;
      if (left == 0) continue;  // finished: leaves the batch
      // A chunked prefill first (3, 4, 1 tokens), then 1 token, with 2 for sequence 1 every third step.
      int64_t q = step == 0 ? std::vector<int64_t>{3, 4, 1}[s] : (s == 1 && step % 3 == 0 ? 2 : 1);
      live.push_back(&seqs[s]);
      q_lens.push_back(std::min(q, left));
    }
    if (live.empty()) break;
    const bool all = step % 2 == 0;
    SCOPED_TRACE("step " + std::to_string(step) + (all ? " all_logits" : " last logits"));
    const TestPagedCache::Step st = cache.Prepare(live, q_lens);
    const DecodeOutput d = model->DecodePaged(st.tokens, st.positions, st.kv, all);
    ASSERT_EQ(d.logits.size(0), all ? st.tokens.size(0) : static_cast<int64_t>(live.size()));
    size_t moe_layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
    EXPECT_EQ(d.router.size(), moe_layers);
    int64_t row = 0;
    for (size_t i = 0; i < live.size(); ++i) {
      const size_t s = static_cast<size_t>(live[i] - seqs.data());
      for (int64_t j = all ? 0 : q_lens[i] - 1; j < q_lens[i]; ++j) {
        const at::Tensor want = ref[s][live[i]->done + j];
        EXPECT_EQ(Close(d.logits[row++], want, OutTol(want)), "") << "sequence " << s << " position " << live[i]->done + j;
      }
      live[i]->done += q_lens[i];
    }
  }
}

TEST_P(PagedDecodeTest, ChunkedPrefillEqualsForwardLogProbs) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  const auto toks = RandomSequences(rng, {13, 7}, c.vocab_size);
  auto batch = BuildForestBatch(toks, {}, c.vocab_size, at::Device(at::kCPU));
  ASSERT_TRUE(batch.ok());
  const ForestOutput scored = model->Forward(*batch);
  std::vector<PagedSeq> seqs(2);
  for (size_t s = 0; s < 2; ++s) seqs[s].tokens = toks[s];
  TestPagedCache cache(c, 12, 4, rng);
  const std::vector<std::vector<int64_t>> chunks{{5, 4}, {5, 3}, {3, 0}};
  for (const auto& q : chunks) {
    std::vector<PagedSeq*> live;
    std::vector<int64_t> q_lens;
    for (size_t s = 0; s < 2; ++s)
      if (q[s] > 0) live.push_back(&seqs[s]), q_lens.push_back(q[s]);
    const TestPagedCache::Step st = cache.Prepare(live, q_lens);
    const at::Tensor logp = at::log_softmax(model->DecodePaged(st.tokens, st.positions, st.kv, true).logits, 1);
    int64_t row = 0;
    for (size_t i = 0; i < live.size(); ++i) {
      const size_t s = static_cast<size_t>(live[i] - seqs.data());
      for (int64_t j = 0; j < q_lens[i]; ++j, ++row) {
        const int64_t pos = live[i]->done + j;
        if (pos + 1 >= static_cast<int64_t>(toks[s].size())) continue;  // the last token predicts nothing scored
        const int64_t pair = batch->pair_offsets[s] + pos;
        EXPECT_NEAR(logp[row][toks[s][static_cast<size_t>(pos + 1)]].item<double>(), scored.logprob[pair].item<double>(),
                    1e-4)
            << "sequence " << s << " position " << pos;
      }
      live[i]->done += q_lens[i];
    }
  }
  EXPECT_EQ(seqs[0].done, 13);
  EXPECT_EQ(seqs[1].done, 7);
}

// Sequence B's first 8 tokens are A's: B's table starts with A's two full
// blocks (block size 4) and B prefills only the rest.
TEST_P(PagedDecodeTest, SharedPrefixBlocksDecodeAsOwn) {
  const ModelConfig c = TinyConfig(GetParam(), 2);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  const uint64_t seed = kernels::testing::FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  RandomizeParameters(*model, seed);
  c10::NoGradGuard no_grad;
  const auto toks = RandomSequences(rng, {14, 5}, c.vocab_size);
  std::vector<PagedSeq> seqs(2);
  seqs[0].tokens = toks[0];
  seqs[1].tokens.assign(toks[0].begin(), toks[0].begin() + 8);
  seqs[1].tokens.insert(seqs[1].tokens.end(), toks[1].begin(), toks[1].end());  // 13 tokens
  const at::Tensor ref_a = ContiguousLogits(*model, seqs[0].tokens), ref_b = ContiguousLogits(*model, seqs[1].tokens);
  TestPagedCache cache(c, 12, 4, rng);
  {
    const TestPagedCache::Step st = cache.Prepare({&seqs[0]}, {12});
    const DecodeOutput d = model->DecodePaged(st.tokens, st.positions, st.kv);
    EXPECT_EQ(Close(d.logits[0], ref_a[11], OutTol(ref_a[11])), "");
    seqs[0].done = 12;
  }
  seqs[1].blocks = {seqs[0].blocks[0], seqs[0].blocks[1]};
  seqs[1].done = 8;
  const std::vector<std::vector<int64_t>> steps{{1, 3}, {1, 2}};
  for (const auto& q : steps) {
    const TestPagedCache::Step st = cache.Prepare({&seqs[0], &seqs[1]}, q);
    const DecodeOutput d = model->DecodePaged(st.tokens, st.positions, st.kv);
    const at::Tensor want_a = ref_a[seqs[0].done + q[0] - 1], want_b = ref_b[seqs[1].done + q[1] - 1];
    EXPECT_EQ(Close(d.logits[0], want_a, OutTol(want_a)), "") << "A at " << seqs[0].done;
    EXPECT_EQ(Close(d.logits[1], want_b, OutTol(want_b)), "") << "B at " << seqs[1].done;
    seqs[0].done += q[0];
    seqs[1].done += q[1];
  }
  EXPECT_EQ(seqs[1].done, 13);
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, PagedDecodeTest, ::testing::Bool(),
                         [](const auto& param_info) { return std::string(param_info.param ? "moe" : "dense"); });

TEST(PagedDecodeContract, BadInputsThrow) {
  const ModelConfig c = TinyConfig(false, 1);
  auto model = MakeModel(c);
  ASSERT_TRUE(model);
  model->InitRandom(1);
  c10::NoGradGuard no_grad;
  std::mt19937_64 rng(2);
  TestPagedCache cache(c, 4, 4, rng);
  PagedSeq s;
  s.tokens = {1, 2, 3};
  TestPagedCache::Step st = cache.Prepare({&s}, {3});
  EXPECT_NO_THROW(model->DecodePaged(st.tokens, st.positions, st.kv));
  PagedKv two_layers = st.kv;
  two_layers.key_blocks.push_back(two_layers.key_blocks[0]);
  two_layers.value_blocks.push_back(two_layers.value_blocks[0]);
  EXPECT_THROW(model->DecodePaged(st.tokens, st.positions, two_layers), c10::Error);
  PagedKv short_slots = st.kv;
  short_slots.slot_mapping = st.kv.slot_mapping.narrow(0, 0, 2);
  EXPECT_THROW(model->DecodePaged(st.tokens, st.positions, short_slots), c10::Error);
  PagedKv bad_ctx = st.kv;
  bad_ctx.context_lens = at::tensor(std::vector<int32_t>{2}, at::TensorOptions().dtype(at::kInt));  // < q_len
  EXPECT_THROW(model->DecodePaged(st.tokens, st.positions, bad_ctx), c10::Error);
  EXPECT_THROW(model->DecodePaged(st.tokens, st.positions.to(at::kInt), st.kv), c10::Error);
}

#ifdef TANDEM_TORCH_CUDA
// On the GPU (bf16), the paged kernels against the contiguous decode path:
// a chunked prefill then single-token steps, with a sequence leaving.
TEST(PagedDecodeCuda, MatchesContiguousDecodeBf16) {
  if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  for (bool moe : {false, true}) {
    ModelConfig c = TinyConfig(moe, 2);
    c.head_dim = 64;  // the CUDA kernels take 64 or 128
    const at::Device dev(at::kCUDA, 0);
    auto created = Transformer::Create(c, dev, at::kBFloat16);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    std::unique_ptr<Transformer> model = std::move(created).value();
    const uint64_t seed = kernels::testing::FreshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + (moe ? " moe" : " dense"));
    model->InitRandom(seed, 0.1);
    c10::NoGradGuard no_grad;
    std::mt19937_64 rng(seed);
    const auto toks = RandomSequences(rng, {40, 23}, c.vocab_size);
    std::vector<PagedSeq> seqs(2);
    std::vector<at::Tensor> ref;
    for (size_t s = 0; s < 2; ++s) {
      seqs[s].tokens = toks[s];
      ref.push_back(ContiguousLogits(*model, toks[s]).to(at::kCPU));
    }
    TestPagedCache cache(c, 8, 16, rng, dev, at::kBFloat16);
    for (int step = 0;; ++step) {
      std::vector<PagedSeq*> live;
      std::vector<int64_t> q_lens;
      for (size_t s = 0; s < 2; ++s) {
        const int64_t left = static_cast<int64_t>(seqs[s].tokens.size()) - seqs[s].done;
        if (left == 0) continue;
        live.push_back(&seqs[s]);
        q_lens.push_back(std::min<int64_t>(step == 0 ? 20 : 1, left));
      }
      if (live.empty()) break;
      const TestPagedCache::Step st = cache.Prepare(live, q_lens);
      const at::Tensor logits = model->DecodePaged(st.tokens, st.positions, st.kv).logits.to(at::kCPU);
      for (size_t i = 0; i < live.size(); ++i) {
        const size_t s = static_cast<size_t>(live[i] - seqs.data());
        const at::Tensor want = ref[s][live[i]->done + q_lens[i] - 1];
        EXPECT_EQ(Close(logits[static_cast<int64_t>(i)], want, {5e-2 * Rms(want) + 1e-3, 5e-2}), "")
            << "step " << step << " sequence " << s;
        live[i]->done += q_lens[i];
      }
    }
  }
}
#endif

}  // namespace
}  // namespace tandem::model::testing

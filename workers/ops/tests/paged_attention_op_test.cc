// Paged attention glue (paged_attention_op.h): write the step's new K/V into
// their slots (PagedKvWrite), then attend (PagedAttention), against a
// float64 reference written with ordinary LibTorch ops (each sequence's keys
// gathered through its block table, a causal mask over the new tokens);
// shuffled blocks, one shared between two sequences, 1..3 new tokens per
// sequence, GQA; poisoned outputs; argument errors. CPU always, CUDA (bf16)
// when present.
#include "workers/ops/paged_attention_op.h"

#include <gtest/gtest.h>

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "workers/ops/tests/torch_test_util.h"

namespace tandem::ops {
namespace {

using testing::Close;
using testing::OutputTol;

// The step: per sequence its context length after the step and its new tokens.
struct Step {
  std::vector<int32_t> context_lens, q_lens;
};

struct Problem {
  at::Tensor q, k, v;                  // [T, Hq, D], [T, Hkv, D] float64 (the rounded values)
  at::Tensor key_blocks, value_blocks; // [N, bs, Hkv, D] float64 (before the write)
  at::Tensor block_table;              // [B, M] int32
  at::Tensor slots;                    // [T] int64
};

// out rows per sequence: softmax over the first ctx - q_len + j + 1 keys.
at::Tensor Reference(const Problem& p, const Step& st, double scale) {
  const int64_t bs = p.key_blocks.size(1), hkv = p.key_blocks.size(2), d = p.key_blocks.size(3);
  const int64_t group = p.q.size(1) / hkv;
  at::Tensor kc = p.key_blocks.reshape({-1, hkv, d}).clone(), vc = p.value_blocks.reshape({-1, hkv, d}).clone();
  kc.index_copy_(0, p.slots, p.k);
  vc.index_copy_(0, p.slots, p.v);
  std::vector<at::Tensor> rows;
  int64_t t0 = 0;
  for (size_t b = 0; b < st.context_lens.size(); ++b) {
    const int64_t ctx = st.context_lens[b], ql = st.q_lens[b];
    std::vector<int64_t> slot_v;
    for (int64_t t = 0; t < ctx; ++t) {
      slot_v.push_back(int64_t{p.block_table[static_cast<int64_t>(b)][t / bs].item<int32_t>()} * bs + t % bs);
    }
    const at::Tensor slot = at::tensor(slot_v, at::TensorOptions().dtype(at::kLong));
    const at::Tensor t = at::arange(ctx, at::TensorOptions().dtype(at::kLong));
    const at::Tensor keys = kc.index_select(0, slot).repeat_interleave(group, 1).permute({1, 2, 0});  // [Hq, D, ctx]
    const at::Tensor vals = vc.index_select(0, slot).repeat_interleave(group, 1).permute({1, 0, 2});  // [Hq, ctx, D]
    const at::Tensor q = p.q.narrow(0, t0, ql).permute({1, 0, 2});                                   // [Hq, ql, D]
    at::Tensor s = q.matmul(keys) * scale;                                                            // [Hq, ql, ctx]
    const at::Tensor j = at::arange(ql, t.options()).unsqueeze(1);
    s = s.masked_fill(t.unsqueeze(0).ge(j + (ctx - ql + 1)).unsqueeze(0), -std::numeric_limits<double>::infinity());
    rows.push_back(at::softmax(s, -1).matmul(vals).permute({1, 0, 2}));  // [ql, Hq, D]
    t0 += ql;
  }
  return at::cat(rows, 0);
}

// Blocks of each sequence from a shuffled pool; sequence 1 shares sequence
// 0's first block (both contexts hold it full); the new tokens' slots are
// the last q_len positions of each context.
Problem MakeProblem(std::mt19937_64& rng, const Step& st, int64_t hq, int64_t hkv, int64_t d, int64_t bs,
                    const at::Device& dev) {
  const int64_t B = static_cast<int64_t>(st.context_lens.size());
  int64_t width = 0, need = 0;
  for (int32_t c : st.context_lens) width = std::max<int64_t>(width, (c + bs - 1) / bs), need += (c + bs - 1) / bs;
  const int64_t N = need + 3;
  const at::Tensor perm = at::randperm(N, at::TensorOptions().dtype(at::kLong));
  at::Tensor table = at::full({B, width + 1}, 1 << 20, at::TensorOptions().dtype(at::kInt));  // past the end: garbage
  std::vector<int64_t> slots;
  int64_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t nb = (st.context_lens[static_cast<size_t>(b)] + bs - 1) / bs;
    for (int64_t i = 0; i < nb; ++i) {
      const bool share = b == 1 && i == 0;
      table[b][i] = share ? table[0][0].item<int32_t>() : static_cast<int32_t>(perm[next++].item<int64_t>());
    }
    const int64_t ctx = st.context_lens[static_cast<size_t>(b)], ql = st.q_lens[static_cast<size_t>(b)];
    for (int64_t t = ctx - ql; t < ctx; ++t) slots.push_back(int64_t{table[b][t / bs].item<int32_t>()} * bs + t % bs);
  }
  const int64_t T = static_cast<int64_t>(slots.size());
  auto rounded = [&](at::IntArrayRef sizes) {
    return testing::Random(rng, sizes).to(dev, testing::DataType(dev)).to(at::kCPU, at::kDouble);
  };
  Problem p;
  p.q = rounded({T, hq, d});
  p.k = rounded({T, hkv, d});
  p.v = rounded({T, hkv, d});
  p.key_blocks = rounded({N, bs, hkv, d});
  p.value_blocks = rounded({N, bs, hkv, d});
  p.block_table = table;
  p.slots = at::tensor(slots, at::TensorOptions().dtype(at::kLong));
  return p;
}

class PagedAttentionOpTest : public ::testing::TestWithParam<at::Device> {};

TEST_P(PagedAttentionOpTest, WriteThenAttendMatchesReference) {
  const at::Device dev = GetParam();
  testing::PoisonOutputs poison;
  const at::ScalarType dt = testing::DataType(dev);
  struct Case {
    Step step;
    int64_t hq, hkv, d, bs;
  };
  // Sequence 1 shares sequence 0's first block, so both hold it full (>= bs keys) and write past it.
  const Case cases[] = {{{{40, 19, 7, 300}, {1, 1, 1, 1}}, 8, 2, 64, 16},
                        {{{33, 17, 3}, {3, 1, 1}}, 4, 4, 128, 16},
                        {{{70, 66}, {2, 3}}, 16, 2, 64, 32}};
  for (const Case& c : cases) {
    const uint64_t seed = kernels::testing::FreshSeed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " Hq=" + std::to_string(c.hq) + " D=" + std::to_string(c.d));
    std::mt19937_64 rng(seed);
    const Problem p = MakeProblem(rng, c.step, c.hq, c.hkv, c.d, c.bs, dev);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    at::Tensor kb = p.key_blocks.to(dev, dt), vb = p.value_blocks.to(dev, dt);
    const auto i32 = at::TensorOptions().dtype(at::kInt);
    const at::Tensor ctx = at::tensor(c.step.context_lens, i32).to(dev), qs = QueryStarts(at::tensor(c.step.q_lens, i32).to(dev));
    PagedKvWrite(p.k.to(dev, dt), p.v.to(dev, dt), kb, vb, p.slots.to(dev));
    EXPECT_EQ(Close(kb.reshape({-1, c.hkv, c.d}).index_select(0, p.slots.to(dev)), p.k, {0, 0}), "") << "written keys";
    EXPECT_EQ(Close(vb.reshape({-1, c.hkv, c.d}).index_select(0, p.slots.to(dev)), p.v, {0, 0}), "") << "written values";
    const at::Tensor out = PagedAttention(p.q.to(dev, dt), kb, vb, p.block_table.to(dev), ctx, qs, scale);
    EXPECT_EQ(out.scalar_type(), dt);
    const at::Tensor ref = Reference(p, c.step, scale);
    EXPECT_EQ(Close(out, ref, OutputTol(dev, ref)), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PagedAttentionOpTest, ::testing::ValuesIn(testing::TestDevices()),
                         testing::DeviceName);

TEST(PagedAttentionOpCpuTest, BadArgumentsThrow) {
  std::mt19937_64 rng(11);
  const at::Device cpu(at::kCPU);
  const Step st{{20, 10}, {1, 2}};
  const Problem p = MakeProblem(rng, st, 4, 2, 16, 8, cpu);
  const at::Tensor kb = p.key_blocks.to(at::kFloat), vb = p.value_blocks.to(at::kFloat), q = p.q.to(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  const at::Tensor ctx = at::tensor(st.context_lens, i32), qs = QueryStarts(at::tensor(st.q_lens, i32));
  EXPECT_NO_THROW(PagedAttention(q, kb, vb, p.block_table, ctx, qs, 0.25));
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const c10::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { PagedAttention(p.q, kb, vb, p.block_table, ctx, qs, 0.25); }).find("q must be Float"),
            std::string::npos);  // fp64 q
  at::Tensor bad_table = p.block_table.clone();
  bad_table[1][0] = static_cast<int32_t>(kb.size(0));
  EXPECT_NE(message([&] { PagedAttention(q, kb, vb, bad_table, ctx, qs, 0.25); }).find("sequence 1: block_table[0]"),
            std::string::npos);
  EXPECT_NE(message([&] { PagedAttention(q, kb, vb, p.block_table, ctx, qs.to(at::kLong), 0.25); }).find("q_starts"),
            std::string::npos);
  EXPECT_NE(message([&] { PagedAttention(q, kb, vb, p.block_table, at::tensor(std::vector<int32_t>{20, 1}, i32), qs,
                                         0.25); })
                .find("context_len 1"),
            std::string::npos);
  EXPECT_NE(message([&] { PagedAttention(q, kb.transpose(0, 1), vb.transpose(0, 1), p.block_table, ctx, qs, 0.25); })
                .find("contiguous"),
            std::string::npos);
  EXPECT_NE(message([&] { PagedAttention(q, kb, vb, p.block_table, ctx, qs, 0.0); }).find("scale"),
            std::string::npos);
  const at::Tensor k = p.k.to(at::kFloat), v = p.v.to(at::kFloat);
  at::Tensor bad_slots = p.slots.clone();
  bad_slots[0] = kb.size(0) * kb.size(1);
  at::Tensor kb2 = kb.clone();
  EXPECT_NE(message([&] { PagedKvWrite(k, v, kb2, vb.clone(), bad_slots); }).find("slot_mapping[0]"),
            std::string::npos);
  EXPECT_TRUE(kb2.equal(kb));  // nothing written
  EXPECT_NE(message([&] { PagedKvWrite(k, v, kb2, vb.clone(), p.slots.to(at::kInt)); }).find("slot_mapping"),
            std::string::npos);
  EXPECT_NE(message([&] { PagedKvWrite(k.narrow(0, 0, 1), v, kb2, vb.clone(), p.slots); }).find("k and v"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::ops

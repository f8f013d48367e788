// Paged attention on the GPU against the CPU implementation (fp32, the
// oracle here) on the same bf16-rounded inputs: random block tables with
// shared blocks and NaN in every slot that must not be read, contexts
// 1..3000, 1..4 new tokens, head dims 64 and 128, group sizes 1..8 (so the
// tiles kernel's 4-, 8- and 16-row tiles and the tiles and mma kernels'
// row-group loops all run, and the warps kernel's 1-, 2- and 4-row
// instances wherever a shape has at most 4 rows per kv head), block sizes
// 1 to 64, without splits, with the device plan's splits and with 64-key
// splits, merged by the combine kernel or in a cluster (the warps and mma
// kernels, up to 16 rows per kv head); a bad block id or length gives NaN
// rows for that sequence only; the slot write equals the CPU's bit for bit.
// Outputs poisoned (finite) before each launch.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/paged_attention/tests/random_paged.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using testing::DeviceBuffer;
using testing::PagedCase;
using testing::PagedProblem;

// bf16 rounding of the inputs, keeping NaN (unreadable slots).
void Round(PagedProblem& p) {
  testing::RoundToBf16(p.q);
  testing::RoundToBf16(p.key_blocks);
  testing::RoundToBf16(p.value_blocks);
}

struct Device {
  DeviceBuffer<__nv_bfloat16> q, kb, vb, out;
  DeviceBuffer<int32_t> table, ctx, starts;
  explicit Device(const PagedProblem& p)
      : q(p.q.size()), kb(p.key_blocks.size()), vb(p.value_blocks.size()), out(p.q.size()),
        table(p.block_table.size()), ctx(p.context_lens.size()), starts(p.q_starts.size()) {}
};

// Runs the CUDA kernels on `p` with `plan`; returns out as floats.
std::vector<float> RunGpu(const PagedProblem& p, const PagedAttentionPlan& plan,
                          PagedKernel kernel = PagedKernel::kAuto) {
  Device d(p);
  std::vector<float> result;
  auto upload = [&]() -> cudaError_t {
    cudaError_t e;
    if ((e = d.q.Upload(testing::ToBf16(p.q))) != cudaSuccess) return e;
    if ((e = d.kb.Upload(testing::ToBf16(p.key_blocks))) != cudaSuccess) return e;
    if ((e = d.vb.Upload(testing::ToBf16(p.value_blocks))) != cudaSuccess) return e;
    if ((e = d.table.Upload(p.block_table)) != cudaSuccess) return e;
    if ((e = d.ctx.Upload(p.context_lens)) != cudaSuccess) return e;
    if ((e = d.starts.Upload(p.q_starts)) != cudaSuccess) return e;
    // A finite poison (bf16 0x7f7f, about 3.4e38): an element a kernel
    // leaves unwritten fails the comparisons, and the NaN checks below see
    // only NaN a kernel wrote.
    return cudaMemset(d.out.get(), 0x7f, d.out.size() * sizeof(__nv_bfloat16));
  };
  EXPECT_EQ(upload(), cudaSuccess);
  DeviceBuffer<char> ws(PagedAttentionWorkspaceBytes(p.s, plan));
  EXPECT_EQ(ws.Poison(), cudaSuccess);
  const Status st = PagedAttentionCuda(p.s, plan, d.q.get(), d.kb.get(), d.vb.get(), d.table.get(), d.ctx.get(),
                                       d.starts.get(), d.out.get(), ws.get(), ws.size(), nullptr, kernel);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<__nv_bfloat16> out;
  EXPECT_EQ(d.out.Download(out), cudaSuccess);
  return testing::ToFloat(out);
}

std::vector<float> RunCpu(const PagedProblem& p) {
  std::vector<float> out(p.q.size(), testing::kPoison);
  const Status st = PagedAttentionCpu(p.s, SingleSplitPlan(), p.q.data(), p.key_blocks.data(),
                                      p.value_blocks.data(), p.block_table.data(), p.context_lens.data(),
                                      p.q_starts.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

struct Config {
  int32_t heads, kv_heads, head_dim, block_size, batch, max_ctx, max_q;
};

// The kernels that can run `s`.
std::vector<PagedKernel> Kernels(const PagedAttentionShape& s) {
  if (PagedWarpsFit(s)) return {PagedKernel::kTiles, PagedKernel::kWarps, PagedKernel::kMma};
  return {PagedKernel::kTiles, PagedKernel::kMma};
}

std::string Name(PagedKernel k) {
  return k == PagedKernel::kWarps ? "warps" : k == PagedKernel::kMma ? "mma" : "tiles";
}

// Whether `k` runs `plan` on `s` (a clustered plan: not the tiles kernel,
// at most 16 rows per kv head).
bool Runs(PagedKernel k, const PagedAttentionPlan& plan, const PagedAttentionShape& s) {
  return !plan.cluster || (k != PagedKernel::kTiles && PagedClusterFits(s));
}

std::string PlanName(const PagedAttentionPlan& plan) {
  return "splits=" + std::to_string(plan.num_splits) + " of >= " + std::to_string(plan.min_split_tokens) +
         (plan.cluster ? " in a cluster" : "");
}

TEST(PagedAttentionGpu, MatchesCpuOverShapesAndPlans) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int sms = 132;
  if (auto s = CurrentDeviceSmCount(); s.ok()) sms = *s;
  for (const Config& c : {Config{16, 8, 128, 16, 6, 2000, 1}, Config{32, 4, 128, 16, 5, 2000, 4},
                          Config{8, 8, 64, 16, 4, 1800, 4}, Config{16, 2, 64, 32, 7, 1200, 3},
                          Config{4, 2, 128, 1, 3, 300, 2}, Config{12, 4, 64, 64, 40, 600, 1},
                          Config{16, 2, 128, 16, 8, 1000, 1}, Config{8, 8, 128, 16, 6, 1500, 1},
                          Config{32, 8, 128, 16, 5, 2000, 1}, Config{8, 4, 64, 16, 30, 3000, 1},
                          Config{16, 2, 128, 8, 5, 900, 2}, Config{16, 2, 64, 4, 9, 700, 1}}) {
    SCOPED_TRACE("Hq=" + std::to_string(c.heads) + " Hkv=" + std::to_string(c.kv_heads) + " D=" +
                 std::to_string(c.head_dim) + " bs=" + std::to_string(c.block_size) + " B=" +
                 std::to_string(c.batch) + " max_q=" + std::to_string(c.max_q));
    PagedProblem p = testing::MakePagedProblem(
        rng, testing::RandomPagedCase(rng, c.heads, c.kv_heads, c.head_dim, c.block_size, c.batch, c.max_ctx, c.max_q));
    Round(p);
    const std::vector<float> ref = RunCpu(p);
    for (const PagedAttentionPlan& plan :
         {SingleSplitPlan(), PlanPagedAttention(p.s, sms), PagedAttentionPlan{kPagedMaxSplits, kPagedTileTokens},
          PlanPagedAttention(p.s, sms, kPagedTileTokens, true),
          PagedAttentionPlan{kPagedMaxClusterSplits, kPagedTileTokens, true}, PagedAttentionPlan{3, 128, true}}) {
      SCOPED_TRACE(PlanName(plan));
      for (PagedKernel k : Kernels(p.s)) {
        if (!Runs(k, plan, p.s)) continue;
        SCOPED_TRACE("kernel=" + Name(k));
        EXPECT_EQ(testing::CheckClose(RunGpu(p, plan, k), ref, testing::kBf16), "");
      }
    }
  }
}

// A block id out of range, or a context shorter than the new tokens: that
// sequence's rows are NaN, the others' unchanged.
TEST(PagedAttentionGpu, BadMetadataGivesNanRowsOfThatSequence) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (const std::vector<int32_t>& q_lens : {std::vector<int32_t>{1, 2, 1}, std::vector<int32_t>{1, 1, 1}}) {
    PagedProblem p = testing::MakePagedProblem(rng, PagedCase{8, 2, 128, 16, {700, 300, 40}, q_lens, 1.f});
    Round(p);
    const std::vector<float> ref = RunCpu(p);
    const int64_t row = int64_t{8} * 128;
    p.block_table[static_cast<size_t>(p.s.max_blocks_per_seq * 1 + 5)] = p.s.num_blocks + 3;  // sequence 1
    p.context_lens[2] = 0;                                                                      // sequence 2
    for (const PagedAttentionPlan& plan :
         {SingleSplitPlan(), PlanPagedAttention(p.s, 132), PagedAttentionPlan{4, 128, true}}) {
      for (PagedKernel k : Kernels(p.s)) {
        if (!Runs(k, plan, p.s)) continue;
        SCOPED_TRACE("q_len[1]=" + std::to_string(q_lens[1]) + " " + PlanName(plan) + " kernel=" + Name(k));
        const std::vector<float> out = RunGpu(p, plan, k);
        EXPECT_EQ(testing::CheckClose(out.data(), ref.data(), static_cast<size_t>(row), testing::kBf16), "");  // seq 0
        for (int64_t i = row; i < static_cast<int64_t>(out.size()); ++i) {
          ASSERT_TRUE(std::isnan(out[static_cast<size_t>(i)])) << "element " << i;
        }
      }
    }
  }
}

TEST(PagedAttentionGpu, RefusesOtherHeadDimsAndSmallWorkspace) {
  std::mt19937_64 rng(5);
  PagedProblem p = testing::MakePagedProblem(rng, PagedCase{4, 2, 96, 16, {600}, {1}, 1.f});
  Device d(p);
  DeviceBuffer<char> ws(1 << 20);
  const Status st = PagedAttentionCuda(p.s, SingleSplitPlan(), d.q.get(), d.kb.get(), d.vb.get(), d.table.get(),
                                       d.ctx.get(), d.starts.get(), d.out.get(), ws.get(), ws.size(), nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("head_dim must be 64 or 128"), std::string::npos) << st.message();
  p.s.head_dim = 64;
  const PagedAttentionPlan split{4, 192};
  EXPECT_FALSE(PagedAttentionCuda(p.s, split, d.q.get(), d.kb.get(), d.vb.get(), d.table.get(), d.ctx.get(),
                                  d.starts.get(), d.out.get(), ws.get(), PagedAttentionWorkspaceBytes(p.s, split) - 1,
                                  nullptr)
                   .ok());
}

TEST(PagedAttentionGpu, WarpsKernelRefusesMoreThanFourRowsPerKvHead) {
  std::mt19937_64 rng(7);
  PagedProblem p = testing::MakePagedProblem(rng, PagedCase{16, 2, 128, 16, {300}, {1}, 1.f});  // 8 rows
  Device d(p);
  const Status st = PagedAttentionCuda(p.s, SingleSplitPlan(), d.q.get(), d.kb.get(), d.vb.get(), d.table.get(),
                                       d.ctx.get(), d.starts.get(), d.out.get(), nullptr, 0, nullptr,
                                       PagedKernel::kWarps);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at most 4 rows per kv head"), std::string::npos) << st.message();
}

// Device q_starts that give a sequence more rows than the host's bound
// (max_rows, from T and B) promised: the warps kernel, whose registers hold
// that many rows, must not read or write past them (a fault would fail the
// launch's sync); it writes the sequence's rows as NaN.
TEST(PagedAttentionGpu, WarpsKernelSurvivesMoreRowsThanPromised) {
  std::mt19937_64 rng(testing::FreshSeed());
  PagedProblem p = testing::MakePagedProblem(rng, PagedCase{8, 4, 128, 16, {300, 200}, {1, 1}, 1.f});  // 2 rows
  Round(p);
  p.q_starts = {0, 2, 2};  // sequence 0 claims both tokens (4 rows); sequence 1 is empty (skipped)
  for (const PagedAttentionPlan& plan :
       {SingleSplitPlan(), PagedAttentionPlan{3, 128}, PagedAttentionPlan{3, 128, true}}) {
    SCOPED_TRACE(PlanName(plan));
    const std::vector<float> out = RunGpu(p, plan, PagedKernel::kWarps);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << "element " << i;
  }
}

// The same for a cluster on the mma kernel, whose blocks keep one row
// group's partial (16 rows) for the merge: 24 rows give NaN rows, no fault.
TEST(PagedAttentionGpu, ClusterSurvivesMoreRowsThanPromised) {
  std::mt19937_64 rng(testing::FreshSeed());
  PagedProblem p = testing::MakePagedProblem(rng, PagedCase{16, 2, 128, 16, {300, 200, 100}, {1, 1, 1}, 1.f});
  Round(p);
  p.q_starts = {0, 3, 3, 3};  // sequence 0 claims all three tokens (24 rows); the others are skipped
  const std::vector<float> out = RunGpu(p, PagedAttentionPlan{4, 128, true}, PagedKernel::kMma);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << "element " << i;
}

// A clustered plan is refused on the tiles kernel and past 16 rows per kv head.
TEST(PagedAttentionGpu, ClusterRefusesTilesAndManyRows) {
  std::mt19937_64 rng(9);
  for (const auto& [kernel, q_len] : {std::pair{PagedKernel::kTiles, 1}, std::pair{PagedKernel::kMma, 3}}) {
    PagedProblem p = testing::MakePagedProblem(rng, PagedCase{16, 2, 128, 16, {300}, {q_len}, 1.f});
    Device d(p);
    const Status st = PagedAttentionCuda(p.s, PagedAttentionPlan{4, 128, true}, d.q.get(), d.kb.get(), d.vb.get(),
                                         d.table.get(), d.ctx.get(), d.starts.get(), d.out.get(), nullptr, 0,
                                         nullptr, kernel);
    EXPECT_FALSE(st.ok()) << Name(kernel);
    EXPECT_NE(st.message().find("a clustered plan runs the warps or mma kernel"), std::string::npos) << st.message();
  }
}

TEST(PagedKvWriteGpu, EqualsCpuAndSkipsNegativeOrOutOfRangeSlots) {
  std::mt19937_64 rng(testing::FreshSeed());
  const PagedKvWriteShape s{5, 8, 128, 64};
  std::vector<float> k = testing::RandomVector(rng, 5 * 8 * 128), v = testing::RandomVector(rng, 5 * 8 * 128);
  testing::RoundToBf16(k);
  testing::RoundToBf16(v);
  std::vector<float> kb = testing::RandomVector(rng, 64 * 8 * 128), vb = testing::RandomVector(rng, 64 * 8 * 128);
  testing::RoundToBf16(kb);
  testing::RoundToBf16(vb);
  const std::vector<int64_t> slots{63, -1, 0, 17, 64};  // 64: out of range, skipped on the device
  DeviceBuffer<__nv_bfloat16> dk(k.size()), dv(v.size()), dkb(kb.size()), dvb(vb.size());
  DeviceBuffer<int64_t> dslots(slots.size());
  TANDEM_CUDA_OK(dk.Upload(testing::ToBf16(k)));
  TANDEM_CUDA_OK(dv.Upload(testing::ToBf16(v)));
  TANDEM_CUDA_OK(dkb.Upload(testing::ToBf16(kb)));
  TANDEM_CUDA_OK(dvb.Upload(testing::ToBf16(vb)));
  TANDEM_CUDA_OK(dslots.Upload(slots));
  const Status st = PagedKvWriteCuda(s, dk.get(), dv.get(), dslots.get(), dkb.get(), dvb.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  TANDEM_CUDA_OK(cudaDeviceSynchronize());
  std::vector<int64_t> cpu_slots = slots;
  cpu_slots[4] = -1;  // the CPU rejects 64; the device skips it
  ASSERT_TRUE(PagedKvWriteCpu(s, k.data(), v.data(), cpu_slots.data(), kb.data(), vb.data()).ok());
  std::vector<__nv_bfloat16> got;
  TANDEM_CUDA_OK(dkb.Download(got));
  EXPECT_EQ(testing::ToFloat(got), kb);
  TANDEM_CUDA_OK(dvb.Download(got));
  EXPECT_EQ(testing::ToFloat(got), vb);
}

}  // namespace
}  // namespace tandem::kernels

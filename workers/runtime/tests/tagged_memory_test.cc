// The CPU path of tagged memory (tagged_memory.h): release gives pages back,
// resume restores backed-up bytes exactly at the same addresses, discarded
// tags come back zeroed, repeated commands are no-ops.
#include "workers/runtime/tagged_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

namespace tandem::memory {
namespace {

// Pages of [p, p+n) the kernel reports as resident (mincore), in bytes.
size_t KernelResidentBytes(void* p, size_t n) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((n + page - 1) / page);
  if (mincore(p, n, vec.data()) != 0) return 0;
  size_t pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return pages * page;
}

std::unique_ptr<TaggedMemory> Make(std::vector<TagSpec> tags) {
  auto tm = TaggedMemory::Create(MakeCpuBackend(1ull << 34), tags);
  EXPECT_TRUE(tm.ok()) << tm.status().ToString();
  return std::move(tm).value();
}

std::vector<unsigned char> RandomBytes(size_t n) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(TaggedMemory, ReleaseLowersResidentBytesAndFreesPages) {
  auto tm = Make({{"weights", 8 << 20, true}, {"kv_cache", 16 << 20, false}});
  void* kv = *tm->Base("kv_cache");
  std::memset(kv, 0x5a, 16 << 20);
  EXPECT_EQ(tm->ResidentBytes(), 24u << 20);
  EXPECT_GE(KernelResidentBytes(kv, 16 << 20), 15u << 20);

  auto moved = tm->Release("kv_cache");
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->freed_bytes, 16u << 20);
  EXPECT_EQ(moved->copied_bytes, 0u);
  EXPECT_EQ(tm->ResidentBytes(), 8u << 20);
  EXPECT_EQ(tm->ResidentPerTag()["kv_cache"], 0u);
  EXPECT_EQ(KernelResidentBytes(kv, 16 << 20), 0u) << "the kernel still holds the released pages";
  auto r = tm->Residency();
  EXPECT_EQ(r.device.used, 8u << 20);
  EXPECT_EQ(r.device.total, 1ull << 34);
  EXPECT_EQ(r.device.source, "pool");
}

TEST(TaggedMemory, ResumeRestoresBackedUpBytesExactlyAtTheSameAddress) {
  const size_t n = (4 << 20) + 123;  // not a page multiple
  auto tm = Make({{"weights", n, true}});
  auto* p = static_cast<unsigned char*>(*tm->Base("weights"));
  auto data = RandomBytes(n);
  std::memcpy(p, data.data(), n);

  auto rel = tm->Release("weights");
  ASSERT_TRUE(rel.ok());
  EXPECT_GE(rel->copied_bytes, n);
  EXPECT_FALSE(tm->Resident("weights"));
  auto res = tm->Resume("weights");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_GE(res->copied_bytes, n);
  EXPECT_EQ(*tm->Base("weights"), p) << "pointers must stay valid";
  EXPECT_EQ(std::memcmp(p, data.data(), n), 0);
}

TEST(TaggedMemory, DiscardedTagComesBackZeroed) {
  auto tm = Make({{"kv_cache", 1 << 20, false}});
  auto* p = static_cast<unsigned char*>(*tm->Base("kv_cache"));
  std::memset(p, 0xff, 1 << 20);
  ASSERT_TRUE(tm->Release("kv_cache").ok());
  ASSERT_TRUE(tm->Resume("kv_cache").ok());
  EXPECT_EQ(*tm->Base("kv_cache"), p);
  std::vector<unsigned char> zeros(1 << 20, 0);
  EXPECT_EQ(std::memcmp(p, zeros.data(), zeros.size()), 0);
}

TEST(TaggedMemory, RepeatedReleaseAndResumeAreNoOps) {
  auto tm = Make({{"weights", 1 << 20, true}});
  auto* p = static_cast<unsigned char*>(*tm->Base("weights"));
  auto data = RandomBytes(1 << 20);
  std::memcpy(p, data.data(), data.size());
  ASSERT_TRUE(tm->Release("weights").ok());
  auto again = tm->Release("weights");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->no_op);
  EXPECT_EQ(again->freed_bytes, 0u);
  ASSERT_TRUE(tm->Resume("weights").ok());
  p[0] ^= 1;  // a change after resume must survive a repeated resume
  auto res = tm->Resume("weights");
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->no_op);
  EXPECT_EQ(p[0], data[0] ^ 1);
}

TEST(TaggedMemory, AllocationsComeFromThePoolAndSurviveACycle) {
  auto tm = Make({{"params", 1 << 20, true}});
  auto a = tm->Allocate("params", 1000);
  auto b = tm->Allocate("params", 1000, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *tm->Base("params"));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % 4096, 0u);
  std::memset(*b, 7, 1000);
  ASSERT_TRUE(tm->Release("params").ok());
  EXPECT_EQ(tm->Allocate("params", 10).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(tm->Resume("params").ok());
  EXPECT_EQ(static_cast<unsigned char*>(*b)[999], 7);
  EXPECT_EQ(tm->Allocate("params", 2 << 20).status().code(), StatusCode::kResourceExhausted);
}

TEST(TaggedMemory, GrowTagMapsOnlyWhatItHandsOutAndRemapsItAtTheSameAddresses) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  TagSpec grow{"cuda_graph", 64 << 20, false, true};
  auto tm = Make({grow, {"weights", 1 << 20, true}});
  EXPECT_EQ(tm->ResidentPerTag()["cuda_graph"], 0u) << "a grow tag starts with nothing mapped";
  void* base = *tm->Base("cuda_graph");
  auto a = tm->Allocate("cuda_graph", 3 * page + 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, base);
  EXPECT_EQ(tm->ResidentPerTag()["cuda_graph"], 4 * page);
  auto b = tm->Allocate("cuda_graph", 10, page);  // within the mapped chunk: nothing new
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(tm->ResidentPerTag()["cuda_graph"], 5 * page);
  auto c = tm->Allocate("cuda_graph", 2 << 20, page);
  ASSERT_TRUE(c.ok());
  const uint64_t mapped = tm->ResidentPerTag()["cuda_graph"];
  EXPECT_EQ(mapped, 5 * page + (2u << 20));
  EXPECT_EQ(*tm->Footprint("cuda_graph"), mapped) << "a grow tag declares what it mapped, not its reservation";
  EXPECT_EQ(*tm->Footprint("weights"), 1u << 20);
  EXPECT_EQ(tm->ResidentBytes(), mapped + (1u << 20));
  std::memset(*c, 0x33, 2 << 20);
  EXPECT_GE(KernelResidentBytes(*c, 2 << 20), 2u << 20);
  EXPECT_EQ(KernelResidentBytes(static_cast<char*>(base) + mapped, 1 << 20), 0u) << "mapped past what was handed out";

  auto released = tm->Release("cuda_graph");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->freed_bytes, mapped);
  EXPECT_EQ(tm->ResidentPerTag()["cuda_graph"], 0u);
  EXPECT_EQ(*tm->Footprint("cuda_graph"), mapped) << "what a resume will map";
  EXPECT_EQ(KernelResidentBytes(base, mapped), 0u) << "the kernel still holds the released chunks";
  EXPECT_EQ(tm->Write("cuda_graph", 0, "x", 1).code(), StatusCode::kFailedPrecondition);
  auto resumed = tm->Resume("cuda_graph");
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->mapped_bytes, mapped);
  EXPECT_EQ(resumed->copied_bytes, 0u) << "a grow tag is discarded, never backed up";
  EXPECT_EQ(static_cast<unsigned char*>(*c)[100], 0) << "the chunks come back zeroed at the same addresses";
  std::memset(*c, 0x44, 2 << 20);  // writable again
  EXPECT_EQ(tm->Write("cuda_graph", mapped - 1, "x", 1).code(), StatusCode::kOk);
  EXPECT_EQ(tm->Write("cuda_graph", mapped, "x", 1).code(), StatusCode::kInvalidArgument) << "past the mapped chunks";
  EXPECT_EQ(tm->Allocate("cuda_graph", 64 << 20).status().code(), StatusCode::kResourceExhausted);

  auto spec = ParseTagSpec("cuda_graph=8GiB:grow");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->grow);
  EXPECT_FALSE(spec->backup);
  TagSpec both{"x", 1 << 20, true, true};
  EXPECT_EQ(TaggedMemory::Create(MakeCpuBackend(), {both}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TaggedMemory, UnknownTagsAndBadSpecsAreErrors) {
  auto tm = Make({{"weights", 4096, false}});
  EXPECT_EQ(tm->Release("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tm->Resume("nope").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(TaggedMemory::Create(MakeCpuBackend(), {{"a", 4096, false}, {"a", 4096, false}}).ok());

  auto spec = ParseTagSpec("weights=64MiB:backup");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->bytes, 64ull << 20);
  EXPECT_TRUE(spec->backup);
  auto plain = ParseTagSpec("kv_cache=128MiB");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->backup);
  EXPECT_EQ(ParseTagSpec("kv_cache=12XB").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTagSpec("=1MiB").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTagSpec("Weights=1MiB").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTagSpec("w=1MiB:keep").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTagSpec("w=0").status().code(), StatusCode::kInvalidArgument);
}

TEST(TaggedMemory, CudaBackendIsUnavailableWithoutAGpu) {
  auto cuda = MakeCudaBackend(0);
  if (cuda.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable) << cuda.status().ToString();
}

}  // namespace
}  // namespace tandem::memory

// Tagged memory on a real GPU (tagged_memory.h, CUDA backend; issue #3 part
// 4): backed-up tags come back byte-exact at the same virtual addresses,
// discarded tags come back mapped and writable, repeated commands are no-ops,
// pointers and a captured CUDA graph that reads and writes tags keep working
// across release/resume, the device's used memory (cuMemGetInfo) falls on
// release and rises on resume, a release waits for kernels still queued on
// the worker's own streams, and a resume that does not fit fails cleanly.
//
// Built and registered only with -DTANDEM_GPU_TESTS=ON (CI has no GPU);
// scripts/gpu/run_tagged_memory.sh runs it on the H200 (docs/testing.md).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "workers/runtime/tagged_memory.h"
#include "workers/runtime/tests/tagged_memory_gpu_kernels.h"

namespace tandem::memory {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
// Slack for the device reading: the context's own allocations (module loads,
// graph upload) may move used memory a little between two readings.
constexpr uint64_t kSlack = 64 * kMiB;

#define ASSERT_CUDA(expr)                                                           \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);          \
  } while (0)

std::vector<uint32_t> RandomWords(size_t n) {
  std::vector<uint32_t> v(n);
  uint64_t x = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  for (auto& w : v) {  // splitmix64: fast enough for a GiB, fresh every run
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    w = static_cast<uint32_t>(z ^ (z >> 31));
  }
  return v;
}

std::unique_ptr<TaggedMemory> Make(std::vector<TagSpec> tags) {
  auto backend = MakeCudaBackend(0);
  EXPECT_TRUE(backend.ok()) << "this test needs a CUDA device: " << backend.status().ToString();
  if (!backend.ok()) return nullptr;
  auto tm = TaggedMemory::Create(std::move(*backend), tags);
  EXPECT_TRUE(tm.ok()) << tm.status().ToString();
  return tm.ok() ? std::move(*tm) : nullptr;
}

uint64_t Used(const TaggedMemory& tm) { return tm.Residency().device.used; }

// First byte offset in [0, bytes) where got != want, or -1.
long long FirstDiff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want, size_t bytes = 0) {
  if (bytes == 0) bytes = want.size() * 4;
  if (got.size() * 4 < bytes || want.size() * 4 < bytes) return 0;
  if (std::memcmp(got.data(), want.data(), bytes) == 0) return -1;
  const auto* g = reinterpret_cast<const unsigned char*>(got.data());
  const auto* w = reinterpret_cast<const unsigned char*>(want.data());
  for (size_t i = 0; i < bytes; ++i)
    if (g[i] != w[i]) return static_cast<long long>(i);
  return -1;
}

TEST(TaggedMemoryGpu, BackedUpTagsComeBackByteExactAtTheSameAddresses) {
  const size_t big = kGiB + 12345;  // many copy chunks, not a granularity multiple
  const size_t small = 4096 + 3;
  auto tm = Make({{"weights", big, true}, {"norms", small, true}});
  ASSERT_TRUE(tm);
  EXPECT_EQ(tm->backend().name(), "cuda");
  void* wbase = *tm->Base("weights");
  void* nbase = *tm->Base("norms");
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    auto w = RandomWords((big + 3) / 4);
    auto nb = RandomWords((small + 3) / 4);
    ASSERT_TRUE(tm->Write("weights", 0, w.data(), big).ok());
    ASSERT_TRUE(tm->Write("norms", 0, nb.data(), small).ok());
    for (const char* tag : {"weights", "norms"}) {
      auto rel = tm->Release(tag);
      ASSERT_TRUE(rel.ok()) << rel.status().ToString();
      EXPECT_FALSE(rel->no_op);
      EXPECT_GE(rel->copied_bytes, *tm->Size(tag));
      EXPECT_FALSE(tm->Resident(tag));
    }
    uint32_t probe = 0;
    EXPECT_EQ(tm->Read("weights", 0, &probe, 4).code(), StatusCode::kFailedPrecondition);
    for (const char* tag : {"norms", "weights"}) {
      auto res = tm->Resume(tag);
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      EXPECT_GE(res->copied_bytes, *tm->Size(tag));
    }
    EXPECT_EQ(*tm->Base("weights"), wbase) << "the virtual address moved";
    EXPECT_EQ(*tm->Base("norms"), nbase) << "the virtual address moved";
    std::vector<uint32_t> got(w.size(), 0);
    ASSERT_TRUE(tm->Read("weights", 0, got.data(), big).ok());
    EXPECT_EQ(FirstDiff(got, w, big), -1) << "weights differ after resume";
    std::vector<uint32_t> gotn(nb.size(), 0);
    ASSERT_TRUE(tm->Read("norms", 0, gotn.data(), small).ok());
    EXPECT_EQ(FirstDiff(gotn, nb, small), -1) << "norms differ after resume";
  }
}

TEST(TaggedMemoryGpu, ReleaseLowersTheDevicesUsedMemoryAndResumeRaisesIt) {
  auto tm = Make({{"kv_cache", 2 * kGiB, false}, {"weights", kGiB, true}});
  ASSERT_TRUE(tm);
  const uint64_t before = Used(*tm);
  ASSERT_GT(before, 3 * kGiB);
  auto kv = tm->Release("kv_cache");
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->freed_bytes, 2 * kGiB);
  EXPECT_EQ(kv->copied_bytes, 0u) << "a discardable tag is not copied";
  const uint64_t after_kv = Used(*tm);
  EXPECT_GE(before - after_kv + kSlack, 2 * kGiB) << "used " << before << " -> " << after_kv;
  ASSERT_TRUE(tm->Release("weights").ok());
  const uint64_t after_all = Used(*tm);
  EXPECT_GE(after_kv - after_all + kSlack, kGiB);
  auto per_tag = tm->Residency().tags;
  EXPECT_EQ(per_tag["kv_cache"], 0u);
  EXPECT_EQ(per_tag["weights"], 0u);

  auto again = tm->Release("kv_cache");  // the protocol retries: a no-op
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->no_op);
  EXPECT_LE(Used(*tm), after_all + kSlack);

  ASSERT_TRUE(tm->Resume("kv_cache").ok());
  ASSERT_TRUE(tm->Resume("weights").ok());
  const uint64_t resumed = Used(*tm);
  EXPECT_GE(resumed + kSlack, before);
  EXPECT_LE(resumed, before + kSlack);
  EXPECT_EQ(tm->Residency().tags["kv_cache"], 2 * kGiB);
}

TEST(TaggedMemoryGpu, DiscardedTagComesBackMappedAndWritable) {
  const size_t n = 256 * kMiB;
  auto tm = Make({{"kv_cache", n, false}});
  ASSERT_TRUE(tm);
  void* base = *tm->Base("kv_cache");
  auto a = RandomWords(n / 4);
  ASSERT_TRUE(tm->Write("kv_cache", 0, a.data(), n).ok());
  auto rel = tm->Release("kv_cache");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(rel->copied_bytes, 0u);
  auto res = tm->Resume("kv_cache");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->copied_bytes, 0u);
  EXPECT_EQ(res->mapped_bytes, n);
  EXPECT_EQ(*tm->Base("kv_cache"), base);
  // Contents are undefined now; the worker rebuilds them, from host and GPU.
  auto b = RandomWords(n / 4);
  ASSERT_TRUE(tm->Write("kv_cache", 0, b.data(), n).ok());
  std::vector<uint32_t> got(n / 4);
  ASSERT_TRUE(tm->Read("kv_cache", 0, got.data(), n).ok());
  EXPECT_EQ(FirstDiff(got, b), -1);
  auto* p = static_cast<uint32_t*>(base);
  ASSERT_CUDA(gputest::LaunchAffine(p, p, n / 4, 5, 1, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_TRUE(tm->Read("kv_cache", 0, got.data(), n).ok());
  for (auto& x : b) x = x * 5 + 1;
  EXPECT_EQ(FirstDiff(got, b), -1);
}

TEST(TaggedMemoryGpu, RepeatedReleaseAndResumeAreNoOps) {
  const size_t n = 8 * kMiB;
  auto tm = Make({{"weights", n, true}});
  ASSERT_TRUE(tm);
  auto data = RandomWords(n / 4);
  ASSERT_TRUE(tm->Write("weights", 0, data.data(), n).ok());
  ASSERT_TRUE(tm->Release("weights").ok());
  auto again = tm->Release("weights");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->no_op);
  EXPECT_EQ(again->freed_bytes, 0u);
  EXPECT_EQ(again->copied_bytes, 0u);
  ASSERT_TRUE(tm->Resume("weights").ok());
  data[7] ^= 0x10101010u;  // a change after resume must survive a repeated resume
  ASSERT_TRUE(tm->Write("weights", 28, &data[7], 4).ok());
  auto res = tm->Resume("weights");
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->no_op);
  EXPECT_EQ(res->copied_bytes, 0u);
  std::vector<uint32_t> got(n / 4);
  ASSERT_TRUE(tm->Read("weights", 0, got.data(), n).ok());
  EXPECT_EQ(FirstDiff(got, data), -1);
}

TEST(TaggedMemoryGpu, AllocatedPointersStayValidForKernels) {
  auto tm = Make({{"params", 64 * kMiB, true}});
  ASSERT_TRUE(tm);
  const size_t words = 4 * kMiB;
  auto a = tm->Allocate("params", words * 4);
  auto b = tm->Allocate("params", words * 4, 1 << 16);
  ASSERT_TRUE(a.ok() && b.ok());
  auto* pa = static_cast<uint32_t*>(*a);
  auto* pb = static_cast<uint32_t*>(*b);
  auto src = RandomWords(words);
  ASSERT_TRUE(tm->Write("params", 0, src.data(), words * 4).ok());
  ASSERT_CUDA(gputest::LaunchAffine(pa, pb, words, 3, 1, nullptr));
  ASSERT_TRUE(tm->Release("params").ok());  // waits for the kernel, then backs up
  EXPECT_EQ(tm->Allocate("params", 16).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(tm->Resume("params").ok());
  // Same pointers, kept by the "worker" across the cycle.
  ASSERT_CUDA(gputest::LaunchAffine(pb, pb, words, 7, 2, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint32_t> got(words);
  ASSERT_CUDA(cudaMemcpy(got.data(), pb, words * 4, cudaMemcpyDeviceToHost));
  for (auto& x : src) x = (x * 3 + 1) * 7 + 2;
  EXPECT_EQ(FirstDiff(got, src), -1);
}

// The point: a graph captured once over tag addresses replays
// correctly after its tags were released and resumed, reading the restored
// weights and writing both a discarded tag and a backed-up one.
TEST(TaggedMemoryGpu, CapturedGraphStillWorksAfterReleaseAndResume) {
  const size_t words = 16 * kMiB;  // 64 MiB per tag
  auto tm = Make({{"weights", words * 4, true}, {"kv_cache", words * 4, false}});
  ASSERT_TRUE(tm);
  auto* w = static_cast<uint32_t*>(*tm->Base("weights"));
  auto* kv = static_cast<uint32_t*>(*tm->Base("kv_cache"));
  auto host_w = RandomWords(words);
  ASSERT_TRUE(tm->Write("weights", 0, host_w.data(), words * 4).ok());

  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Graph: kv = w*3 + 7, then w = w*5 + 11 (in place, on the backed-up tag).
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ASSERT_CUDA(gputest::LaunchAffine(w, kv, words, 3, 7, s));
  ASSERT_CUDA(gputest::LaunchAffine(w, w, words, 5, 11, s));
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<uint32_t> got(words);
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    ASSERT_CUDA(cudaGraphLaunch(exec, s));
    ASSERT_CUDA(cudaStreamSynchronize(s));
    std::vector<uint32_t> want_kv(words);
    for (size_t i = 0; i < words; ++i) {
      want_kv[i] = host_w[i] * 3 + 7;
      host_w[i] = host_w[i] * 5 + 11;
    }
    ASSERT_TRUE(tm->Read("kv_cache", 0, got.data(), words * 4).ok());
    EXPECT_EQ(FirstDiff(got, want_kv), -1) << "graph output in kv_cache";

    ASSERT_TRUE(tm->Release("kv_cache").ok());
    ASSERT_TRUE(tm->Release("weights").ok());
    ASSERT_TRUE(tm->Resume("weights").ok());
    ASSERT_TRUE(tm->Resume("kv_cache").ok());
    ASSERT_EQ(static_cast<void*>(w), *tm->Base("weights"));
    ASSERT_EQ(static_cast<void*>(kv), *tm->Base("kv_cache"));
    ASSERT_CUDA(cudaMemset(kv, 0xee, words * 4));  // poison: the next replay must write it
    ASSERT_TRUE(tm->Read("weights", 0, got.data(), words * 4).ok());
    EXPECT_EQ(FirstDiff(got, host_w), -1) << "weights after resume";
  }
  ASSERT_CUDA(cudaGraphLaunch(exec, s));
  ASSERT_CUDA(cudaStreamSynchronize(s));
  ASSERT_TRUE(tm->Read("kv_cache", 0, got.data(), words * 4).ok());
  for (size_t i = 0; i < words; ++i) ASSERT_EQ(got[i], host_w[i] * 3 + 7) << "kv_cache word " << i;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// A kernel still queued on the worker's own stream when release arrives must
// finish before the backup is taken, or the backup holds stale bytes.
TEST(TaggedMemoryGpu, ReleaseWaitsForKernelsQueuedOnOtherStreams) {
  const size_t words = 64 * kMiB / 4;
  auto tm = Make({{"weights", words * 4, true}});
  ASSERT_TRUE(tm);
  auto* w = static_cast<uint32_t*>(*tm->Base("weights"));
  auto old = RandomWords(words);
  ASSERT_TRUE(tm->Write("weights", 0, old.data(), words * 4).ok());
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const uint32_t value = 0xabcd1234u;
  ASSERT_CUDA(gputest::LaunchSlowFill(w, words, value, 400'000'000, s));  // ~0.2 s at 2 GHz
  ASSERT_TRUE(tm->Release("weights").ok());  // no sync by the caller
  ASSERT_TRUE(tm->Resume("weights").ok());
  std::vector<uint32_t> got(words);
  ASSERT_TRUE(tm->Read("weights", 0, got.data(), words * 4).ok());
  EXPECT_EQ(FirstDiff(got, std::vector<uint32_t>(words, value)), -1) << "the backup overtook the kernel";
  // Read, likewise, sees a queued writer's result.
  ASSERT_CUDA(gputest::LaunchSlowFill(w, words, value + 1, 400'000'000, s));
  ASSERT_TRUE(tm->Read("weights", 0, got.data(), words * 4).ok());
  EXPECT_EQ(FirstDiff(got, std::vector<uint32_t>(words, value + 1)), -1) << "Read overtook the kernel";
  cudaStreamDestroy(s);
}

// A resume that does not fit on the device fails with kResourceExhausted,
// leaves the tag released with its backup, and succeeds once there is room.
TEST(TaggedMemoryGpu, ResumeWithoutRoomFailsCleanlyAndSucceedsLater) {
  const size_t n = kGiB;
  auto tm = Make({{"weights", n, true}});
  ASSERT_TRUE(tm);
  auto data = RandomWords(n / 4);
  ASSERT_TRUE(tm->Write("weights", 0, data.data(), n).ok());
  ASSERT_TRUE(tm->Release("weights").ok());
  size_t free_b = 0, total_b = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free_b, &total_b));
  // Another process's memory, in effect: leave less than the tag needs.
  void* hog = nullptr;
  size_t hog_bytes = free_b > n / 2 ? free_b - n / 2 : 0;
  while (hog_bytes > 0 && cudaMalloc(&hog, hog_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    hog_bytes -= 256 * kMiB;
  }
  ASSERT_NE(hog, nullptr);
  auto res = tm->Resume("weights");
  EXPECT_EQ(res.status().code(), StatusCode::kResourceExhausted) << res.status().ToString();
  EXPECT_FALSE(tm->Resident("weights"));
  ASSERT_CUDA(cudaFree(hog));
  res = tm->Resume("weights");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_GE(res->copied_bytes, n);
  std::vector<uint32_t> got(n / 4);
  ASSERT_TRUE(tm->Read("weights", 0, got.data(), n).ok());
  EXPECT_EQ(FirstDiff(got, data), -1);
}

}  // namespace
}  // namespace tandem::memory

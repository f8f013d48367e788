// ParallelFor (parallel_for.h): every index runs exactly once, from one
// caller, from several callers at once (one uses the pool, the others their
// own threads), nested, after an exception, and with the default thread
// count; the pool's threads are made once, not per call.
#include "kernels/common/parallel_for.h"

#include <dirent.h>

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tandem::kernels {
namespace {

int ThreadsOfThisProcess() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

void ExpectEachIndexOnce(int64_t n, int threads) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  ParallelFor(n, threads, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ParallelForTest, EveryIndexOnceAtAnyThreadCount) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {0, 1, 2, 7, 1000}) ExpectEachIndexOnce(n, threads);
}

TEST(ParallelForTest, ThePoolsThreadsAreMadeOnce) {
  ExpectEachIndexOnce(64, 4);  // grows the pool to 3 helpers
  const int before = ThreadsOfThisProcess();
  std::atomic<int> peak{0};
  for (int call = 0; call < 200; ++call)
    ParallelFor(64, 4, [&](int64_t) { peak.store(std::max(peak.load(), ThreadsOfThisProcess())); });
  EXPECT_EQ(ThreadsOfThisProcess(), before);
  EXPECT_EQ(peak.load(), before) << "a call made threads of its own while the pool was free";
}

TEST(ParallelForTest, CallersAtOnceAndNestedLoopsAllFinish) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> sum{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int k = 0; k < 50; ++k)
        ParallelFor(16, 3, [&](int64_t i) {
          ParallelFor(4, 2, [&](int64_t j) { sum.fetch_add(i * 4 + j); });  // nested: never waits on the pool
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4 * 50 * (63 * 64 / 2));
}

TEST(ParallelForTest, AnExceptionReachesTheCallerAndThePoolStillWorks) {
  EXPECT_THROW(ParallelFor(1000, 3, [](int64_t i) { if (i == 0) throw std::runtime_error("x"); }),
               std::runtime_error);
  ExpectEachIndexOnce(100, 3);
}

TEST(ParallelForTest, TheDefaultThreadCountIsTheWorkersSetting) {
  SetParallelForThreads(1);
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  ParallelFor(100, 0, [&](int64_t) { elsewhere += std::this_thread::get_id() != me; });
  EXPECT_EQ(elsewhere.load(), 0) << "--threads 1 runs the loop on the caller alone";
  SetParallelForThreads(0);
  ExpectEachIndexOnce(100, 0);
}

}  // namespace
}  // namespace tandem::kernels

// ParallelFor: the CPU implementations' one work-sharing loop. Runs fn(i) for
// i in [0, n) on `threads` threads (<= 0: one per hardware thread), handing
// out indices dynamically; serial when one thread suffices. Header-only so
// the standalone CUDA build (kernels/standalone) needs nothing extra.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tandem::kernels {

inline void ParallelFor(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&] {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace tandem::kernels

// ParallelFor: the CPU implementations' one work-sharing loop. Runs fn(i) for
// i in [0, n) on `threads` threads (the caller among them), handing out
// indices dynamically; serial when one thread suffices. An exception from fn
// stops the loop and is rethrown to the caller. threads <= 0 means
// the process default: SetParallelForThreads (a worker's --threads), else
// one per hardware thread.
//
// The helper threads are made once and kept (a process-wide pool, grown to
// the most ever asked for): a kernel runs once per layer and step, and a
// thread made and joined per call cost more than the work at decode sizes,
// above all under the sanitizers, whose thread start and exit map and unmap
// shadow memory (docs/testing.md). One loop uses the pool at a time; a
// caller that finds it busy (another thread's loop) makes its own threads as
// before. A forked child makes a new pool. Header-only so the standalone
// CUDA build (kernels/standalone) needs nothing extra.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::kernels {

namespace parallel_for_detail {

inline std::atomic<int>& DefaultThreads() {
  static std::atomic<int> threads{0};
  return threads;
}

// Runs the indices of one loop until none is left. An exception ends the
// loop (no index starts after it) and is kept for the caller to rethrow.
struct Loop {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;
  void Drain() noexcept {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;) (*fn)(i);
    } catch (...) {
      next.store(n);
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }
  void RethrowIfFailed() {
    if (error) std::rethrow_exception(error);
  }
};

class Pool {
 public:
  // The pool of this process (a child after fork gets its own; the parent's
  // threads are not in it). Never destroyed: its threads wait to the end.
  static Pool& Get() {
    static std::mutex mu;
    static Pool* pool = nullptr;
    std::lock_guard<std::mutex> lock(mu);
    if (!pool || pool->pid_ != ::getpid()) pool = new Pool();  // NOLINT: lives as long as the process
    return *pool;
  }

  // fn over [0, n) on the caller and `helpers` pool threads; false (nothing
  // run) when another loop holds the pool.
  bool TryRun(int64_t n, int helpers, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    Loop loop;
    loop.fn = &fn;
    loop.n = n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this] { Serve(); });
      loop_ = &loop;
      wanted_ = helpers;
      joined_ = 0;
      left_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    loop.Drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return left_ == 0; });
    loop_ = nullptr;
    lock.unlock();
    busy.unlock();
    loop.RethrowIfFailed();
    return true;
  }

 private:
  Pool() : pid_(::getpid()) {}

  void Serve() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen && joined_ < wanted_; });
      seen = generation_;
      ++joined_;
      Loop* loop = loop_;
      lock.unlock();
      loop->Drain();
      lock.lock();
      if (--left_ == 0) done_.notify_one();
    }
  }

  const pid_t pid_;
  std::mutex run_mu_;  // held by the loop that uses the pool
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  Loop* loop_ = nullptr;
  uint64_t generation_ = 0;
  int wanted_ = 0, joined_ = 0, left_ = 0;
};

}  // namespace parallel_for_detail

// The threads a ParallelFor with threads <= 0 uses (<= 0: one per hardware
// thread). Workers set it from --threads, beside LibTorch's.
inline void SetParallelForThreads(int threads) { parallel_for_detail::DefaultThreads().store(threads); }

inline void ParallelFor(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (threads <= 0) threads = parallel_for_detail::DefaultThreads().load();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (parallel_for_detail::Pool::Get().TryRun(n, threads - 1, fn)) return;
  // The pool runs another thread's loop: threads of this call's own.
  parallel_for_detail::Loop loop;
  loop.fn = &fn;
  loop.n = n;
  std::vector<std::thread> own;
  for (int w = 1; w < threads; ++w) own.emplace_back([&] { loop.Drain(); });
  loop.Drain();
  for (auto& t : own) t.join();
  loop.RethrowIfFailed();
}

}  // namespace tandem::kernels

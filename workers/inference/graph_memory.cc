// The decode graphs' memory in a tagged pool (graph_memory.h).
#include "workers/inference/graph_memory.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "common/log.h"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <type_traits>
#if __has_include(<ATen/cuda/MemPool.h>)
#include <ATen/cuda/MemPool.h>
using TorchMemPool = at::cuda::MemPool;
#else
using TorchMemPool = c10::cuda::MemPool;
#endif
#endif

namespace tandem::inference {

#ifdef TANDEM_TORCH_CUDA
namespace {
using CudaAllocator = c10::cuda::CUDACachingAllocator::CUDAAllocator;

// MemPool takes its allocator as a shared_ptr in newer LibTorch, a raw
// pointer in older ones (the caller keeps it alive either way).
std::unique_ptr<TorchMemPool> MakePool(const std::shared_ptr<CudaAllocator>& allocator) {
  if constexpr (std::is_constructible_v<TorchMemPool, std::shared_ptr<CudaAllocator>, bool>) {
    return std::make_unique<TorchMemPool>(allocator, true);
  } else {
    return std::make_unique<TorchMemPool>(allocator.get(), true);
  }
}
}  // namespace

struct GraphMemory::State {
  memory::TaggedMemory* memory = nullptr;
  std::string tag;
  int device = 0;
  std::mutex mu;
  uint64_t bytes = 0;
  std::shared_ptr<CudaAllocator> allocator;
  std::unique_ptr<TorchMemPool> pool;
  cudaStream_t stream = nullptr;
};

StatusOr<std::unique_ptr<GraphMemory>> GraphMemory::Create(memory::TaggedMemory& memory, const std::string& tag,
                                                           int device) {
  const std::vector<memory::TagSpec> specs = memory.Specs();
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const memory::TagSpec& s) { return s.name == tag; });
  if (spec == specs.end() || !spec->grow)
    return FailedPrecondition("graph memory: " + tag + " is not a grow tag of the engine's memory");
  std::unique_ptr<GraphMemory> g(new GraphMemory());
  g->state_ = std::make_shared<State>();
  State& s = *g->state_;
  s.memory = &memory;
  s.tag = tag;
  s.device = device;
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    if (cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) != cudaSuccess)
      return Internal("graph memory: cudaStreamCreate failed");
    // Segments of the pool: from the tag, mapped as they are handed out.
    // Called during a capture too, where mapping is not a stream operation:
    // relaxed capture mode for the mapping calls.
    std::weak_ptr<State> weak = g->state_;
    auto alloc = [weak](size_t size, int, cudaStream_t) -> void* {
      const std::shared_ptr<State> st = weak.lock();
      if (!st) return nullptr;
      std::lock_guard<std::mutex> l(st->mu);
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      (void)cudaThreadExchangeStreamCaptureMode(&mode);
      StatusOr<void*> p = st->memory->Allocate(st->tag, size, 2u << 20);
      (void)cudaThreadExchangeStreamCaptureMode(&mode);
      if (!p.ok()) {
        log::Warn("rollout", "graph memory: {}", p.status().ToString());
        return nullptr;
      }
      st->bytes += size;
      return *p;
    };
    // The tag frees its chunks itself, on release and with it.
    auto free = [](void*, size_t, int, cudaStream_t) {};
    s.allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(alloc, free);
    s.pool = MakePool(s.allocator);
  } catch (const c10::Error& e) {
    if (s.stream) (void)cudaStreamDestroy(s.stream);
    s.stream = nullptr;
    return Internal(std::string("graph memory: ") + e.what_without_backtrace());
  }
  return g;
}

GraphMemory::~GraphMemory() {
  if (!state_) return;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(state_->device));
  if (state_->stream) (void)cudaStreamSynchronize(state_->stream);
  state_->pool.reset();
  if (state_->stream) (void)cudaStreamDestroy(state_->stream);
}

std::pair<unsigned long long, unsigned long long> GraphMemory::pool_id() const {
  const auto id = state_->pool->id();
  return {id.first, id.second};
}

void* GraphMemory::stream() const { return state_->stream; }

int GraphMemory::device() const { return state_->device; }

uint64_t GraphMemory::bytes() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->bytes;
}

GraphMemory::Routing::Routing(GraphMemory& m) : m_(m) {
  cudaStream_t stream = m.state_->stream;
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(static_cast<c10::DeviceIndex>(m.state_->device),
                                                       m.state_->pool->id(),
                                                       [stream](cudaStream_t s) { return s == stream; });
}

GraphMemory::Routing::~Routing() {
  c10::cuda::CUDACachingAllocator::endAllocateToPool(static_cast<c10::DeviceIndex>(m_.state_->device),
                                                     m_.state_->pool->id());
}

#else  // no CUDA in this build

struct GraphMemory::State {};

StatusOr<std::unique_ptr<GraphMemory>> GraphMemory::Create(memory::TaggedMemory&, const std::string&, int) {
  return Unavailable("graph memory: this build has no CUDA");
}
GraphMemory::~GraphMemory() = default;
std::pair<unsigned long long, unsigned long long> GraphMemory::pool_id() const { return {0, 0}; }
void* GraphMemory::stream() const { return nullptr; }
int GraphMemory::device() const { return 0; }
uint64_t GraphMemory::bytes() const { return 0; }
GraphMemory::Routing::Routing(GraphMemory& m) : m_(m) {}
GraphMemory::Routing::~Routing() { (void)m_; }

#endif

}  // namespace tandem::inference

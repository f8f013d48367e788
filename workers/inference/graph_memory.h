// The decode graphs' memory in a tagged pool (issue #14 item 2;
// docs/inference.md "CUDA-graph decode"): SGLang's `cuda_graph` tag.
//
// A LibTorch memory pool (c10's MemPool) whose segments the caching
// allocator takes, through a pluggable allocator, from a grow tag of
// TaggedMemory (tagged_memory.h): a release of the tag gives the graphs'
// memory back to the device, a resume maps it again at the same addresses,
// and the graphs replay over it unchanged — it holds what a replay writes
// before it reads (activations, the logits' staging, cuBLAS's workspace),
// never state kept between replays.
//
// The pool comes with its own CUDA stream: the graphs are captured on it,
// and while Route is in effect every allocation LibTorch makes on it goes
// to the pool, so that the warm-up before a capture puts cuBLAS's workspace
// for that stream there too. No other work may run on the stream (its
// workspace is gone while the tag is released). Segments go back to the tag
// only with it (bump allocation): the pool is for graphs captured once.
//
// Destroy the graphs first, then this, then the TaggedMemory. CUDA only:
// Create returns Unavailable in a build or on a device without it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::inference {

class GraphMemory {
 public:
  // `tag` must be a grow tag of `memory` (FailedPrecondition otherwise).
  static StatusOr<std::unique_ptr<GraphMemory>> Create(memory::TaggedMemory& memory, const std::string& tag,
                                                       int device);
  ~GraphMemory();
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;

  // c10::MempoolId_t of the pool, for CUDAGraph::capture_begin.
  std::pair<unsigned long long, unsigned long long> pool_id() const;
  void* stream() const;  // cudaStream_t
  int device() const;

  // While a Routing lives, LibTorch's allocations on stream() come from the
  // pool (outside a capture; a capture routes its own).
  class Routing {
   public:
    explicit Routing(GraphMemory& m);
    ~Routing();
    Routing(const Routing&) = delete;
    Routing& operator=(const Routing&) = delete;

   private:
    GraphMemory& m_;
  };

  // Bytes the pool took from the tag so far.
  uint64_t bytes() const;

  struct State;

 private:
  GraphMemory() = default;
  std::shared_ptr<State> state_;
};

}  // namespace tandem::inference

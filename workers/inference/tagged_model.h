// A model and its KV pool in tagged memory (docs/inference.md "Memory and
// the control protocol"): what the rollout serves from, so that the
// handoff can release and resume both at the same addresses.
//
// LoadTaggedModel reads DIR/config.json, sizes two pools — `weights` (the
// model's one parameter buffer, ParameterSet::BufferNumel; backed up to
// host on release) and, unless options.kv_cache is false, `kv_cache`
// (kv_blocks blocks of KvBlockBytes, or as many as kv_cache_bytes holds;
// discarded on release) — on the CUDA backend
// for a CUDA device, else the CPU one, creates the model over the first and
// loads DIR's weights into it (model::LoadWeights' rules); with
// cuda_graph_bytes, a third, `cuda_graph` (grow: nothing mapped until the
// decode graphs are captured into it; discarded on release). The KV buffer is
// what GeneratorOptions::kv_buffer takes. Errors name the file or the size
// that does not fit. Destroy the model and the engine before the memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/inference/handoff_engine.h"
#include "workers/model/transformer.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::inference {

struct TaggedModelOptions {
  int64_t kv_cache_bytes = 256ll << 20;
  int32_t kv_blocks = 0;   // > 0: overrides kv_cache_bytes
  int32_t block_size = 16;
  bool kv_cache = true;    // false: the `weights` pool only (the teacher)
  // > 0: a `cuda_graph` grow tag of this much address space, for the decode
  // graphs' memory (GeneratorOptions::graph_memory); mapped as they take it.
  int64_t cuda_graph_bytes = 0;
};

struct TaggedModel {
  std::unique_ptr<memory::TaggedMemory> memory;
  std::unique_ptr<model::Transformer> model;
  at::Tensor kv_buffer;    // flat, the model's dtype and device, over `kv_cache`
  int32_t kv_blocks = 0;
};

StatusOr<TaggedModel> LoadTaggedModel(const std::string& dir, at::Device device, at::ScalarType dtype,
                                      const TaggedModelOptions& options);

// The handoff of an engine's memory, tag by tag ("weights", "kv_cache",
// "cuda_graph";
// NotFound for a tag `memory` does not hold). Release:
// HandoffEngine::MarkAbsent (its refusals are FailedPrecondition),
// TaggedMemory::Release, and once all are out ReturnCachedDeviceMemory.
// Resume: TaggedMemory::Resume, MarkPresent. The bytes moved, summed over
// the tags. Used by the rollout and teacher roles and tandem-generate.
StatusOr<memory::TaggedMemory::Moved> ReleaseEngineMemory(HandoffEngine& engine, memory::TaggedMemory& memory,
                                                          const std::vector<std::string>& tags);
StatusOr<memory::TaggedMemory::Moved> ResumeEngineMemory(HandoffEngine& engine, memory::TaggedMemory& memory,
                                                         const std::vector<std::string>& tags);

// Gives LibTorch's cached, unused device blocks (a step's activations) and
// cuBLAS's workspaces (unless decode graphs hold them: AnyDecodeGraphs) back
// to the device, as SGLang's release does with
// torch.cuda.empty_cache():
// called after a release so that the device reading drops by what the
// worker held, not only by its pools. A no-op without CUDA.
void ReturnCachedDeviceMemory();
// Bytes LibTorch's CUDA allocator holds from the device now (live tensors and
// cached blocks: `reserved`) and of them in live tensors (`allocated`); 0
// without CUDA.
struct AllocatorBytes {
  int64_t reserved = 0, allocated = 0;
};
AllocatorBytes AllocatorDeviceBytes();

}  // namespace tandem::inference

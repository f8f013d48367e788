// The model and its KV pool in tagged memory (tagged_model.h).
#include "workers/inference/tagged_model.h"

#include <ATen/ATen.h>

#include <algorithm>

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "workers/inference/decode_graphs.h"
#include "workers/inference/generator.h"
#include "workers/model/checkpoint.h"
#include "workers/model/config.h"

namespace tandem::inference {
namespace {

at::Tensor Over(void* base, int64_t numel, at::ScalarType dtype, at::Device device) {
  return at::from_blob(base, {numel}, at::TensorOptions().dtype(dtype).device(device));
}

StatusOr<MemoryPart> PartOf(const std::string& tag, const memory::TaggedMemory& memory) {
  const std::vector<std::string> held = memory.TagNames();
  if (std::find(held.begin(), held.end(), tag) == held.end() ||
      (tag != "weights" && tag != "kv_cache" && tag != "cuda_graph")) {
    std::string names;
    for (const std::string& h : held) names += (names.empty() ? "" : ", ") + h;
    return NotFound("tag " + tag + " is not held by the engine (it holds " + names + ")");
  }
  return tag == "weights" ? MemoryPart::kWeights : tag == "kv_cache" ? MemoryPart::kKvCache : MemoryPart::kCudaGraph;
}

void Add(memory::TaggedMemory::Moved& sum, const memory::TaggedMemory::Moved& m) {
  sum.freed_bytes += m.freed_bytes;
  sum.mapped_bytes += m.mapped_bytes;
  sum.copied_bytes += m.copied_bytes;
}

}  // namespace

StatusOr<TaggedModel> LoadTaggedModel(const std::string& dir, at::Device device, at::ScalarType dtype,
                                      const TaggedModelOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(model::ModelConfig config, model::LoadModelConfig(dir + "/config.json"));
  if (o.block_size <= 0) return InvalidArgument("block_size: must be positive, got " + std::to_string(o.block_size));
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t weight_numel = model::ParameterSet::BufferNumel(config, dtype);
  const int64_t block_bytes = KvBlockBytes(config, o.block_size, dtype);
  TaggedModel p;
  p.kv_blocks = !o.kv_cache     ? 0
                : o.kv_blocks > 0 ? o.kv_blocks
                                  : static_cast<int32_t>(std::min<int64_t>(o.kv_cache_bytes / block_bytes, 1 << 30));
  if (o.kv_cache && p.kv_blocks <= 0)
    return InvalidArgument("kv cache: " + std::to_string(o.kv_cache_bytes) + " bytes hold no KV block of " +
                           std::to_string(block_bytes) + " bytes");
  const int64_t kv_bytes = block_bytes * p.kv_blocks;
  StatusOr<std::unique_ptr<memory::MemoryBackend>> backend =
      device.is_cuda() ? memory::MakeCudaBackend(device.index()) : memory::MakeCpuBackend();
  TANDEM_RETURN_IF_ERROR(backend.status(), "tagged memory");
  std::vector<memory::TagSpec> tags = {{"weights", static_cast<uint64_t>(weight_numel * elem), true}};
  if (o.kv_cache) tags.push_back({"kv_cache", static_cast<uint64_t>(kv_bytes), false});
  if (o.cuda_graph_bytes > 0) tags.push_back({"cuda_graph", static_cast<uint64_t>(o.cuda_graph_bytes), false, true});
  TANDEM_ASSIGN_OR_RETURN(p.memory, memory::TaggedMemory::Create(std::move(*backend), tags), "tagged memory");
  TANDEM_ASSIGN_OR_RETURN(void* weights, p.memory->Allocate("weights", static_cast<size_t>(weight_numel * elem)));
  TANDEM_ASSIGN_OR_RETURN(p.model,
                          model::Transformer::Create(config, device, dtype, Over(weights, weight_numel, dtype, device)),
                          dir);
  TANDEM_ASSIGN_OR_RETURN(model::SafetensorsCheckpoint ckpt, model::SafetensorsCheckpoint::Open(dir));
  TANDEM_RETURN_IF_ERROR(model::LoadWeights(*p.model, ckpt));
  if (o.kv_cache) {
    TANDEM_ASSIGN_OR_RETURN(void* kv, p.memory->Allocate("kv_cache", static_cast<size_t>(kv_bytes)));
    p.kv_buffer = Over(kv, kv_bytes / elem, dtype, device);
  }
  return p;
}

StatusOr<memory::TaggedMemory::Moved> ReleaseEngineMemory(HandoffEngine& engine, memory::TaggedMemory& memory,
                                                          const std::vector<std::string>& tags) {
  for (const std::string& t : tags) TANDEM_RETURN_IF_ERROR(PartOf(t, memory).status(), "release");
  memory::TaggedMemory::Moved sum;
  for (const std::string& t : tags) {
    TANDEM_RETURN_IF_ERROR(engine.MarkAbsent(*PartOf(t, memory)));
    TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, memory.Release(t), "release " + t);
    Add(sum, moved);
  }
  ReturnCachedDeviceMemory();
  return sum;
}

StatusOr<memory::TaggedMemory::Moved> ResumeEngineMemory(HandoffEngine& engine, memory::TaggedMemory& memory,
                                                         const std::vector<std::string>& tags) {
  for (const std::string& t : tags) TANDEM_RETURN_IF_ERROR(PartOf(t, memory).status(), "resume");
  memory::TaggedMemory::Moved sum;
  for (const std::string& t : tags) {
    TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, memory.Resume(t), "resume " + t);
    engine.MarkPresent(*PartOf(t, memory));
    Add(sum, moved);
  }
  return sum;
}

void ReturnCachedDeviceMemory() {
#ifdef TANDEM_TORCH_CUDA
  // Re-made by the next GEMM; but graphs captured outside the cuda_graph
  // tag write into theirs (in the tag, the freed workspace stays in the
  // graphs' pool: nothing else allocates there).
  if (!AnyDecodeGraphs()) at::cuda::clearCublasWorkspaces();
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

AllocatorBytes AllocatorDeviceBytes() {
#ifdef TANDEM_TORCH_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return {stats.reserved_bytes[0].current, stats.allocated_bytes[0].current};
#else
  return {};
#endif
}

}  // namespace tandem::inference

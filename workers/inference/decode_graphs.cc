// Decode steps at fixed batch sizes (decode_graphs.h).
#include "workers/inference/decode_graphs.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "workers/ops/moe_ops.h"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem::inference {

// One batch size's static inputs: int64 [tokens B | positions B | slots B]
// and int32 [block_table B*W | context_lens B | q_lens B], staged on the
// host (pinned on CUDA) and copied to the device in one copy each.
struct DecodeGraphs::Bucket {
  int64_t size = 0;
  at::Tensor host_i64, host_i32, dev_i64, dev_i32;
  at::Tensor tokens, positions, slots, block_table, context_lens, q_lens;
  at::Tensor logits;  // the graph's output: the head of DecodeGraphs::logits_ (CUDA)
#ifdef TANDEM_TORCH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

namespace {
std::atomic<int> captured_graph_sets{0};
}  // namespace

bool AnyDecodeGraphs() { return captured_graph_sets.load() > 0; }

StatusOr<std::vector<int64_t>> DecodeGraphBatches(std::string_view spec, bool cuda, int64_t max_running) {
  std::vector<int64_t> out;
  if (spec == "none") return out;
  if (spec == "auto") {
    if (!cuda) return out;
    for (int64_t b = 1; b <= 256 && b <= max_running; b += b < 8 ? b : b < 64 ? 8 : b < 128 ? 16 : 32) out.push_back(b);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item(spec.substr(start, end - start));
    char* stop = nullptr;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v <= 0 || v > 4096)
      return InvalidArgument("--cuda-graphs: '" + item.substr(0, 32) + "' is not a batch size in [1, 4096] (or say auto, none)");
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

DecodeGraphs::DecodeGraphs(std::shared_ptr<const model::Transformer> model, std::vector<at::Tensor> key_blocks,
                           std::vector<at::Tensor> value_blocks, DecodeGraphOptions options)
    : model_(std::move(model)),
      key_blocks_(std::move(key_blocks)),
      value_blocks_(std::move(value_blocks)),
      options_(std::move(options)) {}

DecodeGraphs::~DecodeGraphs() {
  if (captured_ && !graph_memory_) --captured_graph_sets;
}

StatusOr<std::unique_ptr<DecodeGraphs>> DecodeGraphs::Create(std::shared_ptr<const model::Transformer> model,
                                                             std::vector<at::Tensor> key_blocks,
                                                             std::vector<at::Tensor> value_blocks,
                                                             DecodeGraphOptions o) {
  if (!model || key_blocks.empty() || key_blocks.size() != value_blocks.size())
    return InvalidArgument("decode graphs: no model or no KV pool");
  const model::ModelConfig& c = model->config();
  TANDEM_RETURN_IF_ERROR(Supports(c));
  std::sort(o.batch_sizes.begin(), o.batch_sizes.end());
  o.batch_sizes.erase(std::unique(o.batch_sizes.begin(), o.batch_sizes.end()), o.batch_sizes.end());
  if (o.batch_sizes.empty() || o.batch_sizes.front() <= 0 || o.max_blocks_per_seq <= 0 || o.pad_block < 0 ||
      o.pad_block >= key_blocks[0].size(0))
    return InvalidArgument("decode graphs: batch sizes must be positive, max_blocks_per_seq positive and pad_block a "
                           "block of the pool");
  const at::Device device = model->device();
  std::unique_ptr<DecodeGraphs> g(new DecodeGraphs(std::move(model), std::move(key_blocks), std::move(value_blocks), o));
  const int64_t w = o.max_blocks_per_seq;
  for (const int64_t b : o.batch_sizes) {
    auto bucket = std::make_unique<Bucket>();
    bucket->size = b;
    const auto host = at::TensorOptions().pinned_memory(device.is_cuda());
    bucket->host_i64 = at::empty({3 * b}, host.dtype(at::kLong));
    bucket->host_i32 = at::empty({b * w + 2 * b}, host.dtype(at::kInt));
    bucket->dev_i64 = device.is_cuda() ? at::empty_like(bucket->host_i64, at::TensorOptions().device(device)) : bucket->host_i64;
    bucket->dev_i32 = device.is_cuda() ? at::empty_like(bucket->host_i32, at::TensorOptions().device(device)) : bucket->host_i32;
    bucket->tokens = bucket->dev_i64.narrow(0, 0, b);
    bucket->positions = bucket->dev_i64.narrow(0, b, b);
    bucket->slots = bucket->dev_i64.narrow(0, 2 * b, b);
    bucket->block_table = bucket->dev_i32.narrow(0, 0, b * w).view({b, w});
    bucket->context_lens = bucket->dev_i32.narrow(0, b * w, b);
    bucket->q_lens = bucket->dev_i32.narrow(0, b * w + b, b);
    g->buckets_.push_back(std::move(bucket));
  }
#ifdef TANDEM_TORCH_CUDA
  if (device.is_cuda()) {
    try {
      c10::NoGradGuard no_grad;
      c10::cuda::CUDAGuard guard(device);
      const auto reserved = [&] {
        return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).reserved_bytes[0].current;
      };
      const int64_t before = reserved();
      if (o.memory) {
        TANDEM_ASSIGN_OR_RETURN(g->graph_memory_, GraphMemory::Create(*o.memory, o.tag, device.index()),
                                "decode graphs");
      }
      const auto pool = g->graph_memory_ ? g->graph_memory_->pool_id() : at::cuda::graph_pool_handle();
      c10::cuda::CUDAStream stream =
          g->graph_memory_ ? c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(g->graph_memory_->stream()),
                                                              device.index())
                           : c10::cuda::getStreamFromPool();
      // One logits buffer for every graph (outside their pool): each graph
      // copies its [B, V] into its head, so that the outputs are not kept
      // once per size (19 sizes of Qwen3's vocabulary: 1.2 GiB).
      g->logits_ = at::empty({o.batch_sizes.back(), c.vocab_size},
                             at::TensorOptions().dtype(at::kFloat).device(device));
      // Largest first: the smaller graphs reuse its pool's blocks.
      for (auto it = g->buckets_.rbegin(); it != g->buckets_.rend(); ++it) {
        Bucket& bucket = **it;
        g->Load(bucket, nullptr);
        c10::cuda::device_synchronize();
        c10::cuda::CUDAStreamGuard on(stream);
        {
          // warm-up: cuBLAS handles and workspaces (in the tag's pool, when
          // there is one), lazy initialisation
          std::optional<GraphMemory::Routing> routed;
          if (g->graph_memory_) routed.emplace(*g->graph_memory_);
          (void)g->Eager(bucket);
          stream.synchronize();
        }
        bucket.graph = std::make_unique<at::cuda::CUDAGraph>();
        bucket.graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
        bucket.logits = g->logits_.narrow(0, 0, bucket.size);
        bucket.logits.copy_(g->Eager(bucket));
        bucket.graph->capture_end();
        stream.synchronize();
      }
      g->captured_bytes_ = reserved() - before;
      g->captured_ = true;
      if (!g->graph_memory_) ++captured_graph_sets;
    } catch (const c10::Error& e) {
      return Internal(std::string("decode graphs: capture failed: ") + e.what_without_backtrace());
    }
  }
#endif
  return g;
}

Status DecodeGraphs::Supports(const model::ModelConfig& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    // An MoE layer captures only on the experts that need no host offsets.
    try {
      if (ops::DefaultMoeExpertsImpl(at::Device(at::kCUDA)) == ops::MoeExpertsImpl::kGroupedMm) return Status::Ok();
    } catch (const c10::Error& e) {  // a bad TANDEM_MOE_EXPERTS
      return InvalidArgument(std::string("decode graphs: ") + e.what_without_backtrace());
    }
    return InvalidArgument("decode graphs: MoE layer " + std::to_string(l) +
                           " reads its expert offsets on the host (TANDEM_MOE_EXPERTS=grouped-mm does not)");
  }
  return Status::Ok();
}

bool DecodeGraphs::Fits(const StepPlan& plan) const {
  const auto rows = static_cast<int64_t>(plan.rows.size());
  if (rows == 0 || rows > options_.batch_sizes.back() || plan.block_table_width > options_.max_blocks_per_seq ||
      static_cast<int64_t>(plan.tokens.size()) != rows)
    return false;
  return std::all_of(plan.q_lens.begin(), plan.q_lens.end(), [](int32_t q) { return q == 1; });
}

void DecodeGraphs::Load(Bucket& bucket, const StepPlan* plan) {
  const int64_t b = bucket.size, w = options_.max_blocks_per_seq;
  const int64_t n = plan ? static_cast<int64_t>(plan->rows.size()) : 0;
  const int64_t pw = plan ? plan->block_table_width : 0;
  const int64_t pad_slot = static_cast<int64_t>(options_.pad_block) * key_blocks_[0].size(1);
  int64_t* i64 = bucket.host_i64.data_ptr<int64_t>();
  int32_t* i32 = bucket.host_i32.data_ptr<int32_t>();
  std::memset(i32, 0, sizeof(int32_t) * static_cast<size_t>(b * w));
  for (int64_t i = 0; i < b; ++i) {
    const bool real = i < n;
    const auto at = static_cast<size_t>(i);
    i64[i] = real ? plan->tokens[at] : 0;
    i64[b + i] = real ? plan->positions[at] : 0;
    i64[2 * b + i] = real ? plan->slot_mapping[at] : pad_slot;
    if (real) std::memcpy(i32 + i * w, plan->block_table.data() + i * pw, sizeof(int32_t) * static_cast<size_t>(pw));
    else i32[i * w] = options_.pad_block;
    i32[b * w + i] = real ? plan->context_lens[at] : 1;
    i32[b * w + b + i] = 1;
  }
  if (bucket.dev_i64.data_ptr() != bucket.host_i64.data_ptr()) {
    bucket.dev_i64.copy_(bucket.host_i64, /*non_blocking=*/true);
    bucket.dev_i32.copy_(bucket.host_i32, /*non_blocking=*/true);
  }
}

at::Tensor DecodeGraphs::Eager(Bucket& bucket) const {
  model::PagedKv kv;
  kv.key_blocks = key_blocks_;
  kv.value_blocks = value_blocks_;
  kv.block_table = bucket.block_table;
  kv.context_lens = bucket.context_lens;
  kv.q_lens = bucket.q_lens;
  kv.slot_mapping = bucket.slots;
  return model_->DecodePaged(bucket.tokens, bucket.positions, kv).logits;
}

at::Tensor DecodeGraphs::Run(const StepPlan& plan) {
  const auto rows = static_cast<int64_t>(plan.rows.size());
  Bucket& bucket = **std::find_if(buckets_.begin(), buckets_.end(), [&](const auto& b) { return b->size >= rows; });
  Load(bucket, &plan);
#ifdef TANDEM_TORCH_CUDA
  if (bucket.graph) {
    bucket.graph->replay();
    return bucket.logits.narrow(0, 0, rows);
  }
#endif
  return Eager(bucket).narrow(0, 0, rows);
}

}  // namespace tandem::inference

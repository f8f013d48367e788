#include "workers/inference/generator.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"
#include "workers/inference/device_copy.h"
#include "workers/inference/sampler.h"

namespace tandem::inference {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int64_t KvBlockBytes(const model::ModelConfig& c, int64_t block_size, at::ScalarType dtype) {
  return 2 * c.num_hidden_layers * block_size * c.num_key_value_heads * c.head_dim *
         static_cast<int64_t>(c10::elementSize(dtype));
}

StatusOr<std::unique_ptr<Generator>> Generator::Create(std::shared_ptr<const model::Transformer> model,
                                                       GeneratorOptions options) {
  if (!model) return InvalidArgument("generator: no model");
  const model::ModelConfig& c = model->config();
  SchedulerOptions& so = options.scheduler;
  so.max_model_len = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  if (so.max_model_len > c.max_position_embeddings)
    return InvalidArgument("generator: max_model_len " + std::to_string(so.max_model_len) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(c.max_position_embeddings));
  if (so.block_size <= 0) return InvalidArgument("generator: block_size must be positive");
  if (so.num_blocks <= 0) {
    const int64_t per_block = KvBlockBytes(c, so.block_size, model->dtype());
    if (options.kv_cache_bytes < per_block)
      return InvalidArgument("generator: kv_cache_bytes " + std::to_string(options.kv_cache_bytes) +
                             " holds no block of " + std::to_string(per_block) + " bytes");
    so.num_blocks = static_cast<int32_t>(std::min<int64_t>(options.kv_cache_bytes / per_block, 1 << 30));
  }
  // The graphs pad their batch into the pool's last block: no sequence gets it.
  const int32_t pool_blocks = so.num_blocks;
  bool graphs = !options.decode_graph_batches.empty();
  if (graphs) {
    if (const Status why = DecodeGraphs::Supports(c); !why.ok()) {  // the padding block stays the scheduler's
      log::Warn("rollout", "decoding eagerly: {}", why.ToString());
      graphs = false;
    }
  }
  if (graphs && pool_blocks < 2) return InvalidArgument("generator: decode graphs need a KV pool of 2 blocks or more");
  if (graphs) so.num_blocks = pool_blocks - 1;
  StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(so);
  TANDEM_RETURN_IF_ERROR(scheduler.status(), "generator");

  const int64_t layer_numel = static_cast<int64_t>(pool_blocks) * so.block_size * c.num_key_value_heads * c.head_dim;
  const int64_t pool_numel = 2 * c.num_hidden_layers * layer_numel;
  const at::Tensor given = options.kv_buffer;  // a handle, not a reference: `options` is moved below
  if (given.defined() && (given.dim() != 1 || !given.is_contiguous() || given.scalar_type() != model->dtype() ||
                          given.device() != model->device() || given.numel() < pool_numel))
    return InvalidArgument("generator: the KV buffer is not a flat " + std::string(c10::toString(model->dtype())) +
                           " tensor on " + model->device().str() + " of at least " + std::to_string(pool_numel) +
                           " elements (" + std::to_string(pool_blocks) + " blocks)");
  std::unique_ptr<Generator> g(new Generator(std::move(model), std::move(options)));
  g->scheduler_ = std::move(*scheduler);
  g->pool_blocks_ = pool_blocks;
  g->weight_version_ = g->options_.weight_version;
  g->scheduler_->set_weight_version(g->weight_version_);
  try {
    const model::ModelConfig& mc = g->model_->config();
    // A given buffer is not cleared: a step reads only the slots its
    // sequences wrote (and clearing would commit every page of a CPU pool).
    const at::Tensor pool =
        given.defined()
            ? given.narrow(0, 0, pool_numel)
            : at::zeros({pool_numel}, at::TensorOptions().dtype(g->model_->dtype()).device(g->model_->device()));
    const std::vector<int64_t> shape{pool_blocks, so.block_size, mc.num_key_value_heads, mc.head_dim};
    for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
      g->key_blocks_.push_back(pool.narrow(0, (2 * l) * layer_numel, layer_numel).view(shape));
      g->value_blocks_.push_back(pool.narrow(0, (2 * l + 1) * layer_numel, layer_numel).view(shape));
    }
  } catch (const c10::Error& e) {
    return ResourceExhausted(std::string("generator: the KV pool does not fit: ") + e.what_without_backtrace());
  }
  if (graphs) {
    DecodeGraphOptions go;
    go.batch_sizes = g->options_.decode_graph_batches;
    go.max_blocks_per_seq = static_cast<int32_t>((so.max_model_len + so.block_size - 1) / so.block_size);
    go.pad_block = pool_blocks - 1;
    go.memory = g->options_.graph_memory;
    StatusOr<std::unique_ptr<DecodeGraphs>> made = DecodeGraphs::Create(g->model_, g->key_blocks_, g->value_blocks_, go);
    if (made.ok()) {
      g->graphs_ = std::move(*made);
      std::string sizes;
      for (const int64_t b : g->graphs_->batch_sizes()) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
      log::Info("rollout", "decode graphs for batch sizes {} ({} MiB, {})", sizes, g->graphs_->captured_bytes() >> 20,
                g->graphs_->in_tag() ? "in the cuda_graph tag" : "LibTorch's memory");
    } else {
      log::Warn("rollout", "decoding eagerly: {}", made.status().ToString());
    }
  }
  g->thread_ = std::thread([raw = g.get()] { raw->Loop(); });
  return g;
}

Generator::Generator(std::shared_ptr<const model::Transformer> model, GeneratorOptions options)
    : model_(std::move(model)), options_(std::move(options)) {}

Generator::~Generator() {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, p] : pending_) (void)scheduler_->Abort(id);
    DeliverFinished();
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const void* Generator::kv_pool_data() const { return key_blocks_.front().data_ptr(); }

int64_t Generator::kv_pool_bytes() const {
  return KvBlockBytes(model_->config(), options_.scheduler.block_size, model_->dtype()) * pool_blocks_;
}

std::vector<int64_t> Generator::decode_graph_batches() const {
  return graphs_ ? graphs_->batch_sizes() : std::vector<int64_t>{};
}

int64_t Generator::decode_graph_bytes() const { return graphs_ ? graphs_->captured_bytes() : 0; }

int64_t Generator::decode_graph_tag_bytes() const { return graphs_ ? graphs_->tag_bytes() : 0; }

StatusOr<RequestId> Generator::Submit(GenerateRequest request, SampleCallback on_update) {
  if (!request.params.stop.empty() && options_.codec == nullptr)
    return InvalidArgument("sampling_params.stop: stop strings need a tokenizer, and this model directory has none");
  // The API checks this too; the engine also serves tools and roles that
  // submit directly, and an id past the embedding is a device fault on CUDA.
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < request.input_ids.size(); ++i)
    if (request.input_ids[i] < 0 || request.input_ids[i] >= vocab)
      return InvalidArgument("input_ids[" + std::to_string(i) + "]: token id " + std::to_string(request.input_ids[i]) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return Unavailable("the engine is shutting down");
  const size_t n = static_cast<size_t>(std::max<int64_t>(request.params.n, 1));
  const size_t prompt = request.input_ids.size();
  StatusOr<RequestId> id = scheduler_->Add(request);
  if (!id.ok()) return id.status();
  prompt_tokens_total_ += prompt * n;
  Pending& p = pending_[*id];
  p.on_update = std::move(on_update);
  p.request = std::move(request);
  p.outputs.resize(n);
  kick_ = true;
  wake_.notify_all();
  return *id;
}

void Generator::Abort(RequestId id) {
  std::lock_guard<std::mutex> l(mu_);
  (void)scheduler_->Abort(id);  // unknown or finished: ignored (the contract)
  DeliverFinished();
  kick_ = true;
  wake_.notify_all();
}

Status Generator::Pause(PauseMode mode) {
  std::lock_guard<std::mutex> l(mu_);
  TANDEM_RETURN_IF_ERROR(scheduler_->Pause(mode), "pause");
  DeliverFinished();
  kick_ = true;
  wake_.notify_all();
  return Status::Ok();
}

Status Generator::Continue() {
  std::lock_guard<std::mutex> l(mu_);
  if (weights_absent_ || kv_absent_)
    return FailedPrecondition(std::string("continue: the ") + (weights_absent_ ? "weights are" : "KV cache is") +
                              " released (resume the memory first)");
  scheduler_->Continue();
  kick_ = true;
  wake_.notify_all();
  return Status::Ok();
}

Status Generator::FlushCache() {
  std::lock_guard<std::mutex> l(mu_);
  const SchedulerStats s = scheduler_->stats();
  if (s.running_sequences + s.waiting_sequences > 0)
    return FailedPrecondition("flush_cache: " + std::to_string(s.running_sequences + s.waiting_sequences) +
                              " sequences are running or waiting");
  return scheduler_->FlushCache();
}

Status Generator::Health() const {
  std::lock_guard<std::mutex> l(mu_);
  return health_;
}

EngineInfo Generator::Info() const {
  EngineInfo info;
  info.model_path = options_.model_path;
  info.config_json = options_.config_json;
  info.max_context_length = options_.scheduler.max_model_len;
  info.vocab_size = model_->config().vocab_size;
  std::lock_guard<std::mutex> l(mu_);
  info.weight_version = weight_version_;
  return info;
}

EngineStats Generator::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  const SchedulerStats s = scheduler_->stats();
  EngineStats e;
  e.running_requests = s.running_requests;
  e.queued_requests = s.waiting_requests;
  e.generated_tokens_total = static_cast<uint64_t>(s.generated_tokens);
  e.prompt_tokens_total = prompt_tokens_total_;
  e.kv_blocks_used = s.num_blocks - s.free_blocks;
  e.kv_blocks_free = s.free_blocks;
  e.prefix_cache_hit_tokens_total = static_cast<uint64_t>(s.prefix_hit_tokens);
  e.prefix_cache_query_tokens_total = static_cast<uint64_t>(s.prefix_hit_tokens + s.prefix_miss_tokens);
  e.paused = s.paused;
  e.steps_total = steps_;
  e.graph_steps_total = graph_steps_.load();
  e.step_plan_seconds = plan_s_;
  e.step_launch_seconds = launch_s_;
  e.step_wait_seconds = wait_s_;
  e.step_commit_seconds = commit_s_;
  return e;
}

void Generator::Loop() {
  for (;;) {
    StepPlan plan;
    {
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait(l, [this] { return stop_ || (kick_ && !loading_ && !weights_absent_ && !kv_absent_); });
      if (stop_) return;
      const Clock::time_point planning = Clock::now();
      StatusOr<StepPlan> p = scheduler_->Plan();
      if (!p.ok()) {
        health_ = p.status();
        log::Error("rollout", "scheduler: {}", p.status().ToString());
        kick_ = false;
        continue;
      }
      if (p->empty()) {  // idle or paused: sleep until something changes
        kick_ = false;
        DeliverFinished();
        continue;
      }
      plan = std::move(*p);
      stepping_ = true;
      plan_s_ += Since(planning);
    }
    double launch_s = 0, wait_s = 0;
    StatusOr<std::vector<SampledToken>> sampled = RunStep(plan, launch_s, wait_s);
    std::lock_guard<std::mutex> l(mu_);
    const Clock::time_point committing = Clock::now();
    ++steps_;
    launch_s_ += launch_s;
    wait_s_ += wait_s;
    stepping_ = false;
    step_done_.notify_all();
    if (!sampled.ok()) {
      // The step's requests end (abort) rather than retrying a step that
      // may fail again; the engine stays up for the next ones.
      health_ = sampled.status();
      log::Error("rollout", "step failed, its requests are aborted: {}", sampled.status().ToString());
      (void)scheduler_->Discard(plan);
      for (const ScheduledRow& r : plan.rows) (void)scheduler_->Abort(r.request);
      DeliverFinished();
      continue;
    }
    StatusOr<std::vector<TokenEvent>> events = scheduler_->Commit(plan, *sampled);
    if (!events.ok()) {
      health_ = events.status();
      log::Error("rollout", "commit: {}", events.status().ToString());
      continue;
    }
    health_ = Status::Ok();
    Deliver(*events);
    DeliverFinished();
    commit_s_ += Since(committing);
  }
}

Status Generator::MarkAbsent(MemoryPart part) {
  std::unique_lock<std::mutex> l(mu_);
  const char* what = part == MemoryPart::kWeights ? "weights" : part == MemoryPart::kKvCache ? "kv_cache" : "cuda_graph";
  if (!scheduler_->paused())
    return FailedPrecondition(std::string("release ") + what + ": the engine is generating; pause it first");
  step_done_.wait(l, [this] { return !stepping_ && !loading_; });
  const SchedulerStats s = scheduler_->stats();
  if (part == MemoryPart::kKvCache && s.running_sequences > 0)
    return FailedPrecondition("release kv_cache: " + std::to_string(s.running_sequences) +
                              " sequences keep their KV (an in_place pause); pause with retract or abort to release it");
  if (part == MemoryPart::kWeights) {
    weights_absent_ = true;
    return Status::Ok();
  }
  if (part == MemoryPart::kCudaGraph) {  // the steps decode eagerly meanwhile
    graphs_absent_ = true;
    return Status::Ok();
  }
  TANDEM_RETURN_IF_ERROR(scheduler_->FlushCache(), "release kv_cache");
  const SchedulerStats after = scheduler_->stats();
  if (after.free_blocks != after.num_blocks)
    return Internal("release kv_cache: " + std::to_string(after.num_blocks - after.free_blocks) +
                    " KV blocks are still held with no sequence running");
  kv_absent_ = true;
  return Status::Ok();
}

void Generator::MarkPresent(MemoryPart part) {
  std::lock_guard<std::mutex> l(mu_);
  if (part == MemoryPart::kCudaGraph) graphs_absent_ = false;
  else (part == MemoryPart::kWeights ? weights_absent_ : kv_absent_) = false;
  kick_ = true;
  wake_.notify_all();
}

Status Generator::LoadWeights(int64_t version, const std::function<Status()>& load) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (weights_absent_) return FailedPrecondition("load_weights: the weights are released; resume them first");
    step_done_.wait(l, [this] { return !stepping_ && !loading_; });
    loading_ = true;
  }
  Status st;
  try {
    st = load();
  } catch (const std::exception& e) {
    st = Internal(std::string("load_weights: ") + e.what());
  }
  std::lock_guard<std::mutex> l(mu_);
  loading_ = false;
  // The prefix cache holds KV of the old weights: gone, even when the load
  // failed half-way (the parameters may be partly new).
  const Status flushed = scheduler_->InvalidateCache();
  if (st.ok()) st = flushed;
  if (st.ok()) {
    weight_version_ = version;
    scheduler_->set_weight_version(version);
  }
  step_done_.notify_all();
  kick_ = true;
  wake_.notify_all();
  return st;
}

StatusOr<std::vector<SampledToken>> Generator::RunStep(const StepPlan& plan, double& launch_s, double& wait_s) {
  c10::NoGradGuard no_grad;
  const Clock::time_point launching = Clock::now();
  const at::Device dev = model_->device();
  try {
    if (!plan.copies.empty()) {  // copy on write of shared partial blocks
      std::vector<int64_t> src, dst;
      for (const BlockCopy& c : plan.copies) {
        src.push_back(c.src);
        dst.push_back(c.dst);
      }
      const at::Tensor s = ToDevice(src, dev), d = ToDevice(dst, dev);
      for (size_t l = 0; l < key_blocks_.size(); ++l) {
        key_blocks_[l].index_copy_(0, d, key_blocks_[l].index_select(0, s));
        value_blocks_[l].index_copy_(0, d, value_blocks_[l].index_select(0, s));
      }
    }
    at::Tensor logits;
    if (graphs_ && !graphs_absent_ && graphs_->Fits(plan)) {
      logits = graphs_->Run(plan);
      ++graph_steps_;
    } else {
      const int64_t b = static_cast<int64_t>(plan.rows.size());
      model::PagedKv kv;
      kv.key_blocks = key_blocks_;
      kv.value_blocks = value_blocks_;
      kv.block_table = ToDevice(plan.block_table, dev).view({b, plan.block_table_width});
      kv.context_lens = ToDevice(plan.context_lens, dev);
      kv.q_lens = ToDevice(plan.q_lens, dev);
      kv.slot_mapping = ToDevice(plan.slot_mapping, dev);
      logits = model_->DecodePaged(ToDevice(plan.tokens, dev), ToDevice(plan.positions, dev), kv).logits;
    }
    if (plan.samples.empty()) {
      launch_s += Since(launching);
      return std::vector<SampledToken>{};
    }
    std::vector<int64_t> rows;
    std::vector<SampleSpec> specs;
    bool every_row = plan.samples.size() == static_cast<size_t>(logits.size(0));  // rows 0..B-1 in order
    for (const PlannedSample& s : plan.samples) {
      every_row = every_row && s.row == static_cast<int64_t>(rows.size());
      rows.push_back(s.row);
      specs.push_back(s.spec);
    }
    StatusOr<SamplerOutput> drawn = Sample(every_row ? logits : logits.index_select(0, ToDevice(rows, dev)), specs);
    TANDEM_RETURN_IF_ERROR(drawn.status(), "sampler");
    // One copy back, so one wait for the step (token ids are exact in double).
    const at::Tensor both = at::stack({drawn->tokens.to(at::kDouble), drawn->logprobs.to(at::kDouble)});
    launch_s += Since(launching);
    const Clock::time_point waiting = Clock::now();
    const at::Tensor host = both.to(at::kCPU).contiguous();
    wait_s += Since(waiting);
    const double* tokens = host.data_ptr<double>();
    const double* logprobs = tokens + rows.size();
    std::vector<SampledToken> result(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      result[i].token = static_cast<int32_t>(tokens[i]);
      result[i].logprob = static_cast<float>(logprobs[i]);
    }
    return result;
  } catch (const c10::Error& e) {
    return Internal(std::string("model step: ") + e.what_without_backtrace());
  }
}

void Generator::Deliver(const std::vector<TokenEvent>& events) {
  for (const TokenEvent& e : events) {
    auto it = pending_.find(e.request);
    if (it == pending_.end()) continue;
    Pending& p = it->second;
    SampleUpdate u;
    u.sample = e.sample_index;
    u.new_ids = {e.token};
    if (p.request.return_logprob) u.new_logprobs = {e.logprob};
    std::vector<int32_t>& out = p.outputs[static_cast<size_t>(e.sample_index)];
    out.push_back(e.token);
    p.on_update(std::move(u));
    if (e.finished || p.request.params.stop.empty()) continue;
    // A stop string of L bytes ends within the last L tokens (each decodes
    // to at least one byte, or to nothing); a few more cover a character
    // split across tokens.
    size_t longest = 0;
    for (const std::string& s : p.request.params.stop) longest = std::max(longest, s.size());
    const size_t tail = std::min(out.size(), longest + 4);
    StatusOr<std::string> text = options_.codec->Decode(std::span<const int32_t>(out).last(tail));
    if (!text.ok()) continue;
    for (const std::string& s : p.request.params.stop) {
      if (!s.empty() && text->find(s) != std::string::npos) {
        (void)scheduler_->FinishSequence(e.sequence, FinishReason::kStop, s);
        break;
      }
    }
  }
}

void Generator::DeliverFinished() {
  for (FinishedRequest& f : scheduler_->TakeFinished()) {
    auto it = pending_.find(f.id);
    if (it == pending_.end()) continue;
    for (size_t s = 0; s < f.samples.size(); ++s) {
      SampleUpdate u;
      u.sample = static_cast<int64_t>(s);
      u.finished = std::move(f.samples[s]);
      it->second.on_update(std::move(u));
    }
    pending_.erase(it);
  }
}

}  // namespace tandem::inference

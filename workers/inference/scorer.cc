// The teacher's engine (scorer.h).
#include "workers/inference/scorer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "workers/model/model_input.h"

namespace tandem::inference {

StatusOr<std::unique_ptr<Scorer>> Scorer::Create(std::shared_ptr<const model::Transformer> model,
                                                 ScorerOptions options) {
  if (!model) return InvalidArgument("scorer: no model");
  const int64_t context = model->config().max_position_embeddings;
  if (options.max_model_len <= 0) options.max_model_len = context;
  if (options.max_model_len > context)
    return InvalidArgument("scorer: max_model_len " + std::to_string(options.max_model_len) +
                           " exceeds the model's max_position_embeddings " + std::to_string(context));
  if (options.max_batch_tokens <= 0 || options.max_waiting <= 0 || options.chunk_rows <= 0)
    return InvalidArgument("scorer: max_batch_tokens, max_waiting and chunk_rows must be positive");
  std::unique_ptr<Scorer> s(new Scorer(std::move(model), std::move(options)));
  s->weight_version_ = s->options_.weight_version;
  s->thread_ = std::thread([raw = s.get()] { raw->Loop(); });
  return s;
}

Scorer::Scorer(std::shared_ptr<const model::Transformer> model, ScorerOptions options)
    : model_(std::move(model)), options_(std::move(options)) {}

Scorer::~Scorer() {
  std::vector<std::function<void()>> callbacks;
  {
    std::unique_lock<std::mutex> l(mu_);
    stop_ = true;
    std::vector<RequestId> ids;
    for (const auto& [id, job] : jobs_) ids.push_back(id);
    for (const RequestId id : ids) Fail(id, Unavailable("the teacher is shutting down"), callbacks);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& cb : callbacks) cb();
}

StatusOr<RequestId> Scorer::Submit(ScoreRequest request, ScoreCallback done) {
  if (request.sequences.empty() || request.score_from.size() != request.sequences.size())
    return InvalidArgument("score: no sequences, or a score_from per sequence missing");
  for (size_t i = 0; i < request.sequences.size(); ++i)
    if (static_cast<int64_t>(request.sequences[i].size()) > options_.max_model_len)
      return InvalidArgument("input_ids[" + std::to_string(i) + "]: " + std::to_string(request.sequences[i].size()) +
                             " tokens, the context is " + std::to_string(options_.max_model_len));
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return Unavailable("the teacher is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= options_.max_waiting)
    return ResourceExhausted("the teacher's queue is full (" + std::to_string(options_.max_waiting) +
                             " requests wait); retry later");
  const RequestId id = ++next_id_;
  Job& job = jobs_[id];
  job.result.sequences.resize(request.sequences.size());
  job.request = std::move(request);
  job.done = std::move(done);
  queue_.push_back(id);
  wake_.notify_all();
  return id;
}

void Scorer::Fail(RequestId id, const Status& why, std::vector<std::function<void()>>& out) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  out.push_back([done = std::move(it->second.done), why] { done(why); });
  jobs_.erase(it);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
}

void Scorer::Abort(RequestId id) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> l(mu_);
    Fail(id, Unavailable("score request " + std::to_string(id) + " was aborted"), callbacks);
  }
  for (auto& cb : callbacks) cb();
}

Status Scorer::Pause(PauseMode mode) {
  std::vector<std::function<void()>> callbacks;
  {
    std::unique_lock<std::mutex> l(mu_);
    paused_ = true;
    if (mode == PauseMode::kAbort) {
      std::vector<RequestId> ids;
      for (const auto& [id, job] : jobs_) ids.push_back(id);
      for (const RequestId id : ids) Fail(id, Unavailable("aborted: the teacher was paused (mode abort)"), callbacks);
    }
    idle_.wait(l, [this] { return !running_; });
  }
  for (auto& cb : callbacks) cb();
  return Status::Ok();
}

Status Scorer::Continue() {
  std::lock_guard<std::mutex> l(mu_);
  if (weights_absent_) return FailedPrecondition("continue: the weights are released (resume them first)");
  paused_ = false;
  wake_.notify_all();
  return Status::Ok();
}

Status Scorer::MarkAbsent(MemoryPart part) {
  if (part != MemoryPart::kWeights) return NotFound("the teacher holds only its weights");
  std::unique_lock<std::mutex> l(mu_);
  if (!paused_) return FailedPrecondition("release weights: the teacher is scoring; pause it first");
  idle_.wait(l, [this] { return !running_ && !loading_; });
  weights_absent_ = true;
  return Status::Ok();
}

void Scorer::MarkPresent(MemoryPart part) {
  if (part != MemoryPart::kWeights) return;
  std::lock_guard<std::mutex> l(mu_);
  weights_absent_ = false;
  wake_.notify_all();
}

Status Scorer::LoadWeights(int64_t version, const std::function<Status()>& load) {
  std::vector<std::function<void()>> callbacks;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (weights_absent_) return FailedPrecondition("load_weights: the weights are released; resume them first");
    idle_.wait(l, [this] { return !running_ && !loading_; });
    loading_ = true;
    std::vector<RequestId> half;
    for (const auto& [id, job] : jobs_)
      if (job.next > 0) half.push_back(id);
    for (const RequestId id : half)
      Fail(id, Unavailable("new weights (version " + std::to_string(version) + ") were loaded while request " +
                           std::to_string(id) + " was half scored; resubmit it"),
           callbacks);
  }
  for (auto& cb : callbacks) cb();
  Status st;
  try {
    st = load();
  } catch (const std::exception& e) {
    st = Internal(std::string("load_weights: ") + e.what());
  }
  std::lock_guard<std::mutex> l(mu_);
  loading_ = false;
  if (st.ok()) weight_version_ = version;
  idle_.notify_all();
  wake_.notify_all();
  return st;
}

Status Scorer::Health() const {
  std::lock_guard<std::mutex> l(mu_);
  return health_;
}

EngineInfo Scorer::Info() const {
  EngineInfo info;
  info.model_path = options_.model_path;
  info.config_json = options_.config_json;
  info.max_context_length = options_.max_model_len;
  info.vocab_size = model_->config().vocab_size;
  std::lock_guard<std::mutex> l(mu_);
  info.weight_version = weight_version_;
  return info;
}

ScoreStats Scorer::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  ScoreStats s = totals_;
  for (const auto& [id, job] : jobs_) ++(job.next > 0 ? s.running_requests : s.queued_requests);
  s.paused = paused_;
  return s;
}

Scorer::Forward Scorer::Take() {
  Forward f;
  int64_t tokens = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& job = jobs_.at(*it);
    if (f.pieces.empty()) {
      f.temperature = job.request.temperature;
      f.top_k = job.request.top_k;
    } else if (job.request.temperature != f.temperature || job.request.top_k != f.top_k) {
      break;  // FIFO: it starts the next forest
    }
    while (job.next < job.request.sequences.size()) {
      const auto len = static_cast<int64_t>(job.request.sequences[job.next].size());
      if (!f.pieces.empty() && tokens + len > options_.max_batch_tokens) return f;
      f.pieces.push_back({*it, job.next++});
      tokens += len;
    }
    it = queue_.erase(it);
  }
  return f;
}

void Scorer::Loop() {
  for (;;) {
    Forward f;
    int64_t version = 0;
    {
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait(l, [this] { return stop_ || (!paused_ && !weights_absent_ && !loading_ && !queue_.empty()); });
      if (stop_) return;
      f = Take();
      running_ = true;
      version = weight_version_;
    }
    int64_t packed = 0;
    StatusOr<std::vector<ScoredSequence>> scored = Run(f, &packed);
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> l(mu_);
      running_ = false;
      idle_.notify_all();
      ++totals_.forwards_total;
      if (!scored.ok()) {
        health_ = scored.status();
        log::Error("teacher", "forward failed, its requests end: {}", scored.status().ToString());
        for (const Piece& p : f.pieces) Fail(p.id, scored.status(), callbacks);
      } else {
        health_ = Status::Ok();
        totals_.packed_tokens_total += static_cast<uint64_t>(packed);
        for (size_t i = 0; i < f.pieces.size(); ++i) {
          auto it = jobs_.find(f.pieces[i].id);
          if (it == jobs_.end()) continue;  // aborted while it ran
          Job& job = it->second;
          totals_.input_tokens_total += job.request.sequences[f.pieces[i].sequence].size();
          totals_.scored_tokens_total += (*scored)[i].logprobs.size();
          ++totals_.sequences_total;
          job.result.sequences[f.pieces[i].sequence] = std::move((*scored)[i]);
          if (++job.finished < job.request.sequences.size()) continue;
          job.result.weight_version = version;
          ++totals_.requests_total;
          callbacks.push_back([done = std::move(job.done), r = std::move(job.result)]() mutable { done(std::move(r)); });
          jobs_.erase(it);
        }
      }
    }
    for (auto& cb : callbacks) cb();
  }
}

StatusOr<std::vector<ScoredSequence>> Scorer::Run(const Forward& f, int64_t* packed_tokens) {
  c10::NoGradGuard no_grad;
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int32_t> from;
  {
    // The sequences are read under the lock: Abort may erase their job meanwhile.
    std::lock_guard<std::mutex> l(mu_);
    for (const Piece& p : f.pieces) {
      auto it = jobs_.find(p.id);
      if (it == jobs_.end()) {  // aborted since Take: a placeholder scored for nothing
        seqs.push_back({0});
        from.push_back(1);
        continue;
      }
      seqs.push_back(it->second.request.sequences[p.sequence]);
      from.push_back(it->second.request.score_from[p.sequence]);
    }
  }
  try {
    TANDEM_ASSIGN_OR_RETURN(model::ForestBatch batch,
                            model::BuildForestBatch(seqs, from, model_->config().vocab_size, model_->device()),
                            "score");
    *packed_tokens = batch.num_tokens();
    model::ForwardOptions o;
    o.temperature = f.temperature;
    o.top_k = f.top_k;
    o.chunk_rows = options_.chunk_rows;
    const model::ForestOutput out = model_->Forward(batch, o);
    const at::Tensor logprob = out.logprob.to(at::kCPU).contiguous();
    at::Tensor top_lp, top_ids;
    if (f.top_k > 0) {
      top_lp = out.top_logprobs.to(at::kCPU).contiguous();
      top_ids = out.top_ids.to(at::kCPU).to(at::kInt).contiguous();
    }
    const auto k = static_cast<size_t>(f.top_k);
    std::vector<ScoredSequence> result(seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto begin = static_cast<size_t>(batch.pair_offsets[s]), end = static_cast<size_t>(batch.pair_offsets[s + 1]);
      const float* lp = logprob.data_ptr<float>();
      result[s].logprobs.assign(lp + begin, lp + end);
      if (k > 0) {
        result[s].top_logprobs.assign(top_lp.data_ptr<float>() + begin * k, top_lp.data_ptr<float>() + end * k);
        result[s].top_ids.assign(top_ids.data_ptr<int32_t>() + begin * k, top_ids.data_ptr<int32_t>() + end * k);
      }
    }
    return result;
  } catch (const c10::Error& e) {
    return Internal(std::string("forward: ") + e.what_without_backtrace());
  }
}

}  // namespace tandem::inference

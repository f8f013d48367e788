// The teacher's engine (issue #14 item 6; docs/inference.md "tandem-worker
// teacher"): the ScoreEngine over the model run forward-only. Sequences of
// the queued requests are packed into forests (a prefix shared by several
// sequences runs once: model::BuildForestBatch, tree attention) of at most
// max_batch_tokens input tokens — a longer sequence runs alone — and one
// Transformer::Forward per forest returns each scored token's log-prob and,
// when asked, the top-k of its position. Requests in one forest share its
// temperature and top_k: a request asking others waits for the next one.
//
// One engine thread runs the loop; Submit, Abort, Stats, Info and Health
// take the lock briefly. Pause, MarkAbsent and LoadWeights wait for the
// forward in flight (at most one). Memory handoff as the rollout's
// (generator.h): the role releases the weights' memory only after
// MarkAbsent said yes (the engine is paused) and calls MarkPresent once it
// is mapped again; no forward runs in between.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "workers/inference/generation.h"
#include "workers/inference/handoff_engine.h"
#include "workers/inference/score_engine.h"
#include "workers/model/transformer.h"

namespace tandem::inference {

struct ScorerOptions {
  int64_t max_batch_tokens = 16384;  // input tokens per forward (before prefix sharing)
  int64_t max_waiting = 1024;        // requests queued before ResourceExhausted
  int64_t max_model_len = 0;         // tokens per sequence; 0: the model's max_position_embeddings
  int64_t chunk_rows = 1024;         // LM-head rows per chunk (ForwardOptions::chunk_rows)
  int64_t weight_version = 0;
  std::string model_path;            // reported by Info
  std::string config_json;           // reported by Info
};

class Scorer final : public ScoreEngine, public HandoffEngine {
 public:
  // Starts the engine thread. InvalidArgument for options that do not fit
  // the model.
  static StatusOr<std::unique_ptr<Scorer>> Create(std::shared_ptr<const model::Transformer> model,
                                                  ScorerOptions options);
  ~Scorer() override;  // what waits gets Unavailable; joins the thread
  Scorer(const Scorer&) = delete;
  Scorer& operator=(const Scorer&) = delete;

  StatusOr<RequestId> Submit(ScoreRequest request, ScoreCallback done) override;
  void Abort(RequestId id) override;
  Status Health() const override;
  EngineInfo Info() const override;
  ScoreStats Stats() const override;

  // Stops starting forwards until Continue. kAbort also ends what waits
  // (Unavailable); kRetract and kInPlace keep it queued (a score holds no
  // memory between forwards). Returns once no forward runs.
  Status Pause(PauseMode mode) override;
  // FailedPrecondition while the weights are released.
  Status Continue() override;
  // Before the weights' memory is released: FailedPrecondition unless
  // paused; NotFound for kKvCache (a teacher keeps no KV between forwards).
  // Idempotent.
  Status MarkAbsent(MemoryPart part) override;
  void MarkPresent(MemoryPart part) override;
  // Runs `load` (rewrites the parameters in place) with no forward in
  // flight; `version` scores what starts after it. A request half scored
  // by then ends with Unavailable (its scores would mix two models).
  // FailedPrecondition while the weights are released.
  Status LoadWeights(int64_t version, const std::function<Status()>& load) override;

 private:
  struct Job {
    ScoreRequest request;
    ScoreCallback done;
    ScoreResult result;
    size_t next = 0;      // the first sequence not yet put in a forest
    size_t finished = 0;  // sequences scored
  };
  struct Piece {
    RequestId id;
    size_t sequence;
  };
  struct Forward {
    std::vector<Piece> pieces;
    double temperature = 1.0;
    int64_t top_k = 0;
  };

  Scorer(std::shared_ptr<const model::Transformer> model, ScorerOptions options);
  void Loop();
  Forward Take();  // under mu_
  StatusOr<std::vector<ScoredSequence>> Run(const Forward& f, int64_t* packed_tokens);
  // Under mu_: ends job `id` with `why`, its callback queued in `out`.
  void Fail(RequestId id, const Status& why, std::vector<std::function<void()>>& out);

  const std::shared_ptr<const model::Transformer> model_;
  const ScorerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;  // a forward ended
  std::map<RequestId, Job> jobs_;
  std::deque<RequestId> queue_;   // jobs with sequences not yet in a forest, FIFO
  RequestId next_id_ = 0;
  bool stop_ = false;
  bool paused_ = false;
  bool running_ = false;          // a forward is out
  bool loading_ = false;
  bool weights_absent_ = false;
  int64_t weight_version_ = 0;
  Status health_;
  ScoreStats totals_;
  std::thread thread_;
};

}  // namespace tandem::inference

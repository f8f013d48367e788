// Supervised fine-tuning steps on a Transformer (docs/model.md, "sft"):
// a batch of SftExamples is packed as one forest (workers/model/
// model_input.h; shared prompt prefixes stored once), scored through the
// chunked LM-head loss op on the response tokens only (full logits never
// exist), and the mean negative log-likelihood per response token is
// minimised with the chosen optimizer (optimizer.h: AdamW, weight decay on
// matrices, none on norms, or Muon on the hidden matrices), the gradient's
// global norm clipped, at the WarmupCosine rate.
//
// MoE models train too, without a load-balancing loss (not yet). Errors
// (a bad example, a non-finite loss, a LibTorch exception) are Status values;
// after a non-finite loss no update is applied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/transformer.h"
#include "workers/train/muon.h"
#include "workers/train/lr_schedule.h"
#include "workers/train/sft_example.h"

namespace tandem::train {

struct SftTrainerOptions {
  WarmupCosine schedule;
  OptimizerChoice optimizer;        // AdamW or Muon and their options (muon.h MakeOptimizer)
};

struct SftStepStats {
  double loss = 0;               // mean NLL per response token (nats)
  int64_t response_tokens = 0;   // tokens the loss is on
  int64_t sequence_tokens = 0;   // tokens of the examples, prompts included
  int64_t packed_tokens = 0;     // tokens after packing shared prefixes
  double lr = 0;
  double grad_norm = 0;          // before clipping
};

class SftTrainer {
 public:
  // `model` must outlive the trainer; its gradients are enabled here.
  static StatusOr<std::unique_ptr<SftTrainer>> Create(model::Transformer& model, const SftTrainerOptions& options);
  ~SftTrainer();

  // One optimizer step on `examples`; `progress` in [0, 1] drives the cosine.
  StatusOr<SftStepStats> Step(const std::vector<SftExample>& examples, double progress);
  // The same loss without gradients or an update (held-out loss).
  StatusOr<double> Loss(const std::vector<SftExample>& examples) const;
  int64_t steps() const { return opt_->steps(); }
  // The optimizer, for checkpoints (State / Restore; its step count is the
  // schedule's step).
  Optimizer& optimizer() { return *opt_; }
  const Optimizer& optimizer() const { return *opt_; }

 private:
  SftTrainer(model::Transformer& model, SftTrainerOptions options, std::unique_ptr<Optimizer> opt);

  model::Transformer& model_;
  SftTrainerOptions options_;
  std::unique_ptr<Optimizer> opt_;
};

}  // namespace tandem::train

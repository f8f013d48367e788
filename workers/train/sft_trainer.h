// Supervised fine-tuning steps on a Transformer (docs/model.md, "sft"):
// a batch of SftExamples is packed as one forest (workers/model/
// model_input.h; shared prompt prefixes stored once), scored through the
// chunked LM-head loss op on the response tokens only (full logits never
// exist), and the mean negative log-likelihood per response token is
// minimised with AdamW (LibTorch's; weight decay on matrices, none on norms),
// the gradient's global norm clipped, at the WarmupCosine rate.
//
// MoE models train too, without a load-balancing loss (not yet). Errors
// (a bad example, a non-finite loss, a LibTorch exception) are Status values;
// after a non-finite loss no update is applied.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/transformer.h"
#include "workers/train/lr_schedule.h"
#include "workers/train/sft_example.h"

namespace tandem::train {

struct SftTrainerOptions {
  WarmupCosine schedule;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
};

struct SftStepStats {
  double loss = 0;               // mean NLL per response token (nats)
  int64_t response_tokens = 0;   // tokens the loss is on
  int64_t sequence_tokens = 0;   // tokens of the examples, prompts included
  int64_t packed_tokens = 0;     // tokens after packing shared prefixes
  double lr = 0;
  double grad_norm = 0;          // before clipping
};

// What a checkpoint needs of a trainer besides the model's parameters
// (docs/weights.md "Checkpoints"): the step count and AdamW's moments by
// parameter slot (model::ParameterSet::Slot::name), "exp_avg/<slot>" and
// "exp_avg_sq/<slot>", each of its slot's shape and dtype. No tensors before
// the first step (AdamW makes its state lazily). A trainer over parameters
// equal to the saved ones that restores this state continues the run bit
// for bit: same losses, same updates.
struct SftTrainerState {
  int64_t steps = 0;  // optimizer steps taken: the schedule's step and AdamW's bias-correction step
  std::map<std::string, at::Tensor> tensors;
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
  int64_t steps() const { return steps_; }

  // The state above; the tensors alias the optimizer's (copy before the next Step).
  SftTrainerState State() const;
  // Replaces the optimizer's state by copies of `state`'s. Every slot must
  // have both moments with its slot's shape (dtype converted), or the map
  // must be empty with steps 0; nothing is changed when one is wrong
  // (InvalidArgument naming the tensor).
  Status Restore(const SftTrainerState& state);

 private:
  struct Optimizer;
  SftTrainer(model::Transformer& model, SftTrainerOptions options, std::unique_ptr<Optimizer> opt);

  model::Transformer& model_;
  SftTrainerOptions options_;
  std::unique_ptr<Optimizer> opt_;
  int64_t steps_ = 0;
};

}  // namespace tandem::train

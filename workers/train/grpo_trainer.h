// The actor's training step on trajectories (docs/rl.md "The actor's
// step"; issue #16 items 1-3): group advantages, tree-packed micro-batches,
// the registered algorithm's policy loss, one optimizer update.
//
// Step(trajectories, progress):
//   1. Each trajectory is checked (tokens in [0, vocab), a non-empty
//      response, one finite old log-prob per response token, a finite
//      reward; with MOPD, a route of K finite weights >= 0 or none, and a
//      finite teacher log-prob per response token where the weight is > 0);
//      a bad one is dropped with its reason (GrpoStepStats::dropped),
//      never a crash; its group goes on without it.
//   2. Rewards are shaped (overlong, when the algorithm says), advantages
//      computed per group (rl/advantages.h); with dynamic sampling, groups
//      whose rewards are all equal are dropped (their advantages are zero).
//   3. The groups are planned into micro-batches of at most
//      micro_batch_tokens compact tokens (data/microbatch_planner.h: a
//      group's trie is one item, split at forks when it is larger); each
//      micro-batch is one forest (shared prompts stored once; with
//      tree_packing off every sequence is whole, same losses) whose
//      response tokens are scored by the chunked LM-head op, and its loss is
//      the algorithm's (rl/algorithm_registry.h) with the whole batch's token
//      and sequence counts as normalisers, so the micro-batches' gradients
//      sum to the batch's. With the algorithm's kl_coef > 0 the reference
//      model scores the same forest (no gradient) for the KL term.
//      With the algorithm's distill term (MOPD, docs/mopd.md) the step's
//      loss is rl_coef * that + distill_coef * the distill loss over the
//      trajectories' routes and teacher log-probs (rl/distill_loss.h), whose
//      token mean is over the whole batch's routed tokens; with its top_k,
//      plus top_k_coef * the top-k term, the student's log-probs of each
//      teacher's top-k tokens scored in the same LM-head call.
//   4. One optimizer update (optimizer.h: AdamW, or Muon) at the schedule's rate.
// A batch with nothing left to train on (every group dropped) makes no
// update and says so (stats.updated false). Errors: Status values.
//
// Data parallel (options.data_parallel, docs/rl.md "Data parallel"): each
// replica steps on its own share of the groups (whole groups: advantages
// are per group). The normalisers (response tokens N, sequences S) are the
// GLOBAL batch's, summed over the replicas before any loss, so the sum of
// the replicas' gradients (one all-reduce of the flat gradient buffer after
// all micro-batches) is the whole batch's gradient; every replica then
// clips by the same global norm and applies the same update. The stats are
// the global batch's too (except `dropped`, this replica's reasons), so
// rank 0 logs them. Every replica calls Step the same number of times, even
// with nothing (valid) to train on: the collectives must match. A replica
// whose input is bad makes every replica's Step fail (its own error there,
// FailedPrecondition "another data-parallel replica failed" on the others);
// a dead or stuck peer fails the step within the group's timeout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/model/transformer.h"
#include "workers/rl/algorithm_registry.h"
#include "workers/train/muon.h"
#include "workers/collective/group.h"
#include "workers/train/lr_schedule.h"

namespace tandem::train {

struct Trajectory {
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;    // >= 1 token
  std::vector<float> old_logprobs;  // the behaviour policy's log-prob of each response token
  double reward = 0;
  int64_t group = 0;                // a prompt's samples share it and are contiguous
  // MOPD (the algorithm's distill term; docs/mopd.md), else ignored: the
  // sequence's weight per teacher (options.teachers of them; empty: routed
  // to none) and, for each teacher whose weight is > 0, its log-prob of
  // each response token (the others' may be empty).
  std::vector<float> route;
  std::vector<std::vector<float>> teacher_logprobs;
  // With the distill top-k term (DistillConfig::top_k = k > 0), for each
  // teacher whose weight is > 0: its k most likely tokens at each response
  // position and their log-probs, row-major [response.size() * k].
  std::vector<std::vector<int32_t>> teacher_top_ids;
  std::vector<std::vector<float>> teacher_top_logprobs;
  // Which response tokens the loss counts (1) and which it only reads as
  // context (0: environment, tool and user tokens between a multi-turn
  // episode's model turns, docs/agents.md); empty: every one. Masked tokens
  // add nothing to the loss, its normalisers or the token metrics; their old
  // (and teacher) log-probs are not looked at. At least one must be 1.
  std::vector<uint8_t> trained;
};

struct GrpoTrainerOptions {
  rl::Algorithm algorithm;          // rl::AlgorithmRegistry::Resolve, with WithJobLimits applied
  WarmupCosine schedule;
  OptimizerChoice optimizer;        // AdamW or Muon and their options (muon.h MakeOptimizer)
  int64_t micro_batch_tokens = 0;   // 0: the whole batch in one micro-batch
  bool tree_packing = true;
  // The rollouts' sampling temperature: log-probs, entropy and the KL term
  // are of softmax(logits / temperature), the distribution the responses
  // were drawn from (whose log-probs the rollout returns); > 0.
  double temperature = 1.0;
  // The frozen reference policy of the KL term (the starting model, as in
  // verl's ref worker); required when algorithm.config.loss.kl_coef > 0,
  // same config as the trained model; must outlive the trainer.
  const model::Transformer* reference = nullptr;
  // The replicas' group (data_parallel.h), or null: one process trains the
  // whole batch. Not owned; must outlive the trainer. Create checks that
  // every replica starts from the same parameters (same init seed, or the
  // same checkpoint).
  collective::Group* data_parallel = nullptr;
  // The teachers of the routes (K), >= 1 when the algorithm has a distill
  // term (rl::AlgorithmConfig::distill).
  int64_t teachers = 0;
};

// With data parallel, everything but `dropped` is the global batch's.
struct GrpoStepStats {
  bool updated = false;
  int64_t trajectories = 0;         // trained on
  int64_t groups = 0;               // trained on
  int64_t groups_all_equal = 0;     // groups whose rewards were all equal
  std::vector<std::string> dropped; // why each dropped trajectory (of this replica's share) was
  int64_t dropped_total = 0;        // dropped over all replicas
  int64_t response_tokens = 0;
  int64_t sequence_tokens = 0;      // prompts + responses, unpacked
  int64_t packed_tokens = 0;        // what the forests computed
  int64_t micro_batches = 0;        // summed over the replicas
  double reward_mean = 0, reward_std = 0;  // over every valid trajectory, shaped
  double lr = 0, grad_norm = 0;
  std::map<std::string, double> loss;      // the policy loss's metrics (rl::PolicyLossMetrics::ToHost), token-weighted
  std::map<std::string, double> distill;   // the distill loss's (rl::DistillLossMetrics::ToHost), over its tokens
};

class GrpoTrainer {
 public:
  // `model` must outlive the trainer.
  static StatusOr<std::unique_ptr<GrpoTrainer>> Create(model::Transformer& model, const GrpoTrainerOptions& options);
  ~GrpoTrainer();

  StatusOr<GrpoStepStats> Step(const std::vector<Trajectory>& trajectories, double progress);
  // With data parallel, the collectives of a checking step (every replica
  // at the same step): FailedPrecondition unless every replica holds the
  // same parameters now (exact sums; Create checks the start the same way);
  // then, when `for_checkpoint`, a sharded optimizer's state gathered for
  // rank 0's checkpoint (optimizer.h GatherState).
  Status CheckReplicasAgree(bool for_checkpoint);
  int64_t steps() const { return opt_->steps(); }
  Optimizer& optimizer() { return *opt_; }
  const Optimizer& optimizer() const { return *opt_; }

 private:
  struct Share;  // this replica's part of a step's batch (grpo_trainer.cc)
  GrpoTrainer(model::Transformer& model, GrpoTrainerOptions options, std::unique_ptr<Optimizer> opt);
  Status Prepare(const std::vector<Trajectory>& trajectories, const std::string& where, Share& share,
                 GrpoStepStats& st);
  struct Normalisers;  // the global batch's counts (grpo_trainer.cc)
  Status TrainMicroBatches(const Share& share, const Normalisers& global, const std::string& where, GrpoStepStats& st);

  model::Transformer& model_;
  GrpoTrainerOptions options_;
  std::unique_ptr<Optimizer> opt_;
};

}  // namespace tandem::train

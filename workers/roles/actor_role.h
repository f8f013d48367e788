// `tandem-worker actor`: the RL job's trainer and its controller loop
// (docs/rl.md "The actor"; issue #16 items 1 and 5; DESIGN.md "The data
// flow of one RL step").
//
// The actor joins tandemd (it must: the daemon runs the handoff and tells
// the rollouts to load each version) as the job's handoff.controller and
// drives every step itself:
//
//   sample prompts_per_step problems (the data set's prompt sampler)
//   -> request_phase rollout -> POST /generate to the rollouts (prompts
//      spread over them, group_size samples each, their log-probs)
//   -> rewards from the data set's verifier
//   -> request_phase train -> one GrpoTrainer step (train/grpo_trainer.h)
//   -> request_phase sync(v = step): the daemon sends this actor
//      publish_weights v, answered by publishing through shm (the ack
//      names the segment, detail.source) and the durable file: copy the
//      daemon asked for; the rollouts then load v from the segment
//   -> one metrics line.
//
// Held-out accuracy (greedy, temperature 0, one sample, through the
// rollouts) before the first step, every eval_every steps and after the
// last, in a rollout phase. Metrics: one JSON object per step in
// metrics_path ({"step", "reward/mean", "reward/std", "accuracy" (the
// share of samples rewarded >= 1), "response_length/mean", "loss/..." (the
// policy loss's metrics), "grad_norm", "lr", "tokens_per_s",
// "seconds/rollout", "seconds/train", "seconds/sync", "seconds/step",
// "groups/all_equal", "dropped", "weight_version/min" (the oldest version
// a sample was generated under), and "eval/accuracy" on eval steps), also
// sent to the daemon as a metrics line. With replicas > 1 (data parallel:
// actor_replicas.h) this is rank 0, and every replica trains its share of
// each step's groups. The actor's memory in the handoff is its optimizer's
// state (actor_tags.h: the `optimizer` tag, released for rollouts and
// SYNC, resumed for training); its parameters, gradients and activations
// are not tagged yet.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "workers/roles/actor_options.h"

namespace tandem::roles {

struct ActorResult {
  int64_t steps = 0;
  double accuracy_before = 0, accuracy_after = 0;  // held-out
  double reward_first = 0, reward_last = 0;        // the first and last step's reward mean
};

StatusOr<ActorResult> RunActor(const ActorOptions& options);

}  // namespace tandem::roles

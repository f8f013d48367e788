// The actor's checkpoints and its resume (docs/rl.md "Checkpoints and
// resume"; issue #16 item 5). One checkpoint is one training checkpoint
// (training_checkpoint.h: the model, AdamW's moments, the generators, the
// checks on restore) under --checkpoint-dir, whose progress is ActorProgress
// and which carries one file of the actor's own:
//
//   step-<N>/metrics.jsonl   metrics.jsonl as it was after step N's line
//
// A restarted actor (on_fault: restart, or the job run again over its run
// dir) restores the newest valid checkpoint, puts that metrics.jsonl back
// (the lines of steps after N, whose trajectories it trains again, are
// dropped: no step is counted twice), and goes on from step N+1 with the
// prompt stream where it was. The rollouts are not in the checkpoint: the
// actor publishes the restored weights before its first rollout.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/checkpoint/checkpoint_writer.h"
#include "workers/data/prompt_sampler.h"
#include "workers/model/transformer.h"
#include "workers/roles/actor_options.h"
#include "workers/roles/training_checkpoint.h"
#include "workers/train/optimizer.h"

namespace tandem::roles {

struct ActorProgress {
  int64_t step = 0;              // steps trained
  int64_t optimizer_steps = 0;   // of which made an update (a step whose groups were all dropped makes none)
  int64_t version = 0;           // the weight version the model is published as
  std::vector<data::SamplerCursor> cursors;  // each objective's prompt stream after them (objectives.h order)
  double accuracy_before = 0;    // held-out, before the first step
  double reward_first = 0, reward_last = 0;
};

nlohmann::json ActorProgressToJson(const ActorProgress& p);
// InvalidArgument naming the key that is missing or of the wrong type or range.
StatusOr<ActorProgress> ActorProgressFromJson(const nlohmann::json& j);

// The options that shape the run's trajectory (model, data, held-out set,
// algorithm, batch, sampling, schedule, rollouts, seed): a resume refuses a
// checkpoint written with others. Not in it: timeouts, --threads, the eval
// cadence, micro-batching and tree packing (same losses), the checkpoint
// options, --out.
nlohmann::json ActorRunFingerprint(const ActorOptions& o);

// Copies the tokenizer's files of model directory `from` (tokenizer.json,
// tokenizer_config.json, those that exist) into `to`.
Status CopyTokenizer(const std::string& from, const std::string& to);

struct ActorCheckpointInput {
  const model::Transformer* model = nullptr;
  const train::Optimizer* optimizer = nullptr;
  ActorProgress progress;
  nlohmann::json fingerprint;
  std::string model_dir;     // whose tokenizer goes into the checkpoint's model/
  std::string metrics_path;  // metrics.jsonl as it is now (after progress.step's line)
};

// Commits step progress.step through `writer`.
StatusOr<checkpoint::CommittedCheckpoint> SaveActorCheckpoint(checkpoint::CheckpointWriter& writer,
                                                              const ActorCheckpointInput& in);

struct RestoredActorCheckpoint {
  std::string path;
  ActorProgress progress;
  std::vector<checkpoint::SkippedCheckpoint> skipped;
};

// Restores the newest valid checkpoint under `root` (training_checkpoint.h:
// the checks, and nothing half-restored) into `model`, `optimizer` and the
// generators of `device`, then replaces `metrics_path` (unless empty: a
// data-parallel replica other than rank 0) with the checkpoint's
// metrics.jsonl (at most 256 MiB). nullopt when `root` holds
// no checkpoint (a first start).
StatusOr<std::optional<RestoredActorCheckpoint>> RestoreActorCheckpoint(const std::string& root,
                                                                        const nlohmann::json& fingerprint,
                                                                        model::Transformer& model, train::Optimizer& optimizer,
                                                                        at::Device device,
                                                                        const std::string& metrics_path);

}  // namespace tandem::roles

// The checkpoints of an sft run and its exact resume (docs/model.md "sft",
// "Checkpoints and resume"; docs/weights.md "Checkpoints"; issue #15 item 2).
// One checkpoint is one training checkpoint (training_checkpoint.h: the
// layout, the restore's checks) under --checkpoint-dir whose progress is
// SftProgress.
//
// Resuming restores the newest valid checkpoint, every byte's digest
// verified (a partial or corrupt newer one is skipped with its reason): the
// parameters into the model, the optimizer's state, the generators, the
// sampler's cursor and the loop's counters. A run on one device and thread
// count resumed from step k then computes the same losses and the same
// parameters, bit for bit, as the run that was never stopped, as long as
// its schedule is step-bound (--max-steps; a --time-limit schedule follows
// the wall clock, which no resume repeats).
//
// Everything read back is hostile: a checkpoint whose trainer_state.json or
// trainer.safetensors is malformed, whose tensors do not fit the model, or
// that another run wrote (a different fingerprint: data, model, schedule,
// seed) is refused with an error naming the file and the field; nothing
// is half-restored into a run that then continues.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/checkpoint/checkpoint_reader.h"
#include "workers/checkpoint/checkpoint_writer.h"
#include "workers/data/prompt_sampler.h"
#include "workers/model/transformer.h"
#include "workers/roles/sft_options.h"
#include "workers/roles/training_checkpoint.h"
#include "workers/train/sft_trainer.h"

namespace tandem::roles {

// The sft loop's counters, all it needs beyond the model, the optimizer and
// the generators to continue where it stopped.
struct SftProgress {
  int64_t step = 0;
  data::SamplerCursor cursor;
  double train_seconds = 0;    // time in optimizer steps so far
  double elapsed_seconds = 0;  // wall clock since the first step, evals included (the time limit's clock)
  int64_t total_tokens = 0;    // sequence tokens trained on
  double accuracy_before = 0;  // the eval before the first step
  // The log window not yet written (steps since the last step line).
  double window_seconds = 0, window_loss = 0;
  int64_t window_steps = 0, window_tokens = 0, window_response_tokens = 0;
  bool logged_a_window = false;
  double first_loss = 0, last_loss = 0;  // the first and the latest window's mean loss
};

nlohmann::json SftProgressToJson(const SftProgress& p);
// InvalidArgument naming the key that is missing or of the wrong type or range.
StatusOr<SftProgress> SftProgressFromJson(const nlohmann::json& j);

// The options that shape a run's trajectory (data, held-out set, model,
// schedule, limits of sequence length, seed, device): a resume refuses a
// checkpoint written with others. Not in it: --time-limit, --stop-at-step,
// --log, --threads, the eval cadence, the checkpoint options.
nlohmann::json SftRunFingerprint(const SftOptions& o);

struct SftCheckpointInput {
  const model::Transformer* model = nullptr;
  const train::SftTrainer* trainer = nullptr;
  SftProgress progress;
  nlohmann::json fingerprint;
  // Writes the tokenizer's files into the model directory it is given.
  std::function<Status(const std::string& dir)> write_tokenizer;
};

// Commits step progress.step (its weight version) through `writer`.
StatusOr<checkpoint::CommittedCheckpoint> SaveSftCheckpoint(checkpoint::CheckpointWriter& writer,
                                                            const SftCheckpointInput& in);

struct RestoredSftCheckpoint {
  std::string path;
  SftProgress progress;
  std::vector<checkpoint::SkippedCheckpoint> skipped;  // newer ones that were not valid
};

// Restores the newest valid checkpoint under `root` into `model` (its
// parameters), `trainer` and the generators of `device`, after checking it
// against `fingerprint`. nullopt when `root` holds no checkpoint at all (a
// first start); FailedPrecondition when it holds some and none is valid,
// or the newest valid one belongs to another run.
StatusOr<std::optional<RestoredSftCheckpoint>> RestoreLatestSftCheckpoint(const std::string& root,
                                                                          const nlohmann::json& fingerprint,
                                                                          model::Transformer& model,
                                                                          train::SftTrainer& trainer,
                                                                          at::Device device);

}  // namespace tandem::roles

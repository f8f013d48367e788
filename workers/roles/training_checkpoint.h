// The checkpoints of a training role (sft, the actor) and their exact
// restore (docs/model.md "Checkpoints and resume", docs/rl.md "Checkpoints
// and resume"; docs/weights.md "Checkpoints"). One checkpoint is one
// transaction of the store (workers/checkpoint/checkpoint_writer.h):
//
//   step-<N>/model/                config.json, model.safetensors, tokenizer.json,
//                                  tokenizer_config.json: an HF directory transformers loads
//   step-<N>/trainer.safetensors   AdamW's moments (and fp32 masters of bf16 parameters) by parameter slot
//                                  (train::OptimizerState) and the generators'
//                                  states (rng/cpu, rng/cuda:0; train/rng_state.h);
//                                  __metadata__ {"steps": "<N>"}
//   step-<N>/trainer_state.json    {"progress": the role's counters, "step" among
//                                  them, "run": the run's fingerprint}
//   step-<N>/<file>                the role's own files (the actor: metrics.jsonl)
//   step-<N>/manifest.json         written last: sizes and XXH64 digests of the above
//
// Restoring takes the newest valid checkpoint, every byte's digest verified
// (a partial or corrupt newer one is skipped with its reason), reads and
// checks all of it (fingerprint, the role's progress, step agreement, the
// tensors' fit) and only then writes into the model, the optimizer and the
// generators: nothing is half-restored into a run that then continues.
// Everything read back is hostile: errors name the file and the field.
#pragma once

#include <c10/core/Device.h>

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
#include "workers/model/transformer.h"
#include "workers/train/optimizer.h"

namespace tandem::roles {

// "batch_size 16 (this run: 32), seed 1 (this run: 2)": the keys of two
// fingerprints that differ.
std::string FingerprintDifferences(const nlohmann::json& saved, const nlohmann::json& now);

// A JSON object file of at most 1 MiB (a trainer_state.json), parsed with
// bounded depth; InvalidArgument naming the path otherwise.
StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path);

struct TrainingCheckpointInput {
  std::string kind;  // "sft", "actor": the manifest's kind, and the errors' prefix
  const model::Transformer* model = nullptr;
  const train::Optimizer* optimizer = nullptr;
  // The role's counters: an object with "step", the checkpoint's step, and
  // "optimizer_steps" when the optimizer's count may differ from it.
  nlohmann::json progress;
  nlohmann::json fingerprint;  // the options that shape the run (a restore refuses others)
  // Writes the tokenizer's files into the model directory it is given.
  std::function<Status(const std::string& dir)> write_tokenizer;
  std::map<std::string, std::string> files;  // the role's own files: name -> content
};

// Commits step progress["step"] (its weight version) through `writer`.
StatusOr<checkpoint::CommittedCheckpoint> SaveTrainingCheckpoint(checkpoint::CheckpointWriter& writer,
                                                                 const TrainingCheckpointInput& in);

struct RestoredTrainingCheckpoint {
  std::string path;  // the step-<N> directory (the role's own files are there)
  int64_t step = 0;
  std::vector<checkpoint::SkippedCheckpoint> skipped;  // newer ones that were not valid
};

struct TrainingCheckpointTarget {
  std::string what;  // "sft --resume", "actor resume": the errors' prefix
  nlohmann::json fingerprint;
  // Parses the role's progress (it keeps what it needs); called after the
  // fingerprint matched and before anything is written into the run.
  std::function<Status(const nlohmann::json& progress)> read_progress;
  model::Transformer* model = nullptr;
  train::Optimizer* optimizer = nullptr;
  at::Device device = at::Device(at::kCPU);  // whose generators are restored
};

// Restores the newest valid checkpoint under `root` into the target. nullopt
// when `root` holds no checkpoint at all (a first start); FailedPrecondition
// when it holds some and none is valid, or the newest valid one belongs to
// another run.
StatusOr<std::optional<RestoredTrainingCheckpoint>> RestoreLatestTrainingCheckpoint(const std::string& root,
                                                                                    const TrainingCheckpointTarget& target);

}  // namespace tandem::roles

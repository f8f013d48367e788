// The sft role (docs/model.md, "sft"): trains a model from scratch (a
// preset, the byte-level tokenizer) or continues an HF directory on a data
// set's reference solutions, with periodic greedy evaluation on held-out
// problems scored by the data set's verifier, JSON-line logs, and an HF
// directory at the end (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json, and trainer_state.json with the step and the
// sampler cursor).
//
// Log lines (one JSON object each, flushed): {"event": "start", params,
// config, dataset, eligible}, {"event": "step", step, loss, lr, grad_norm,
// tokens_per_s, response_tokens_per_s, elapsed_s} every log_every steps
// (loss averaged over the window, rates over its training time, evals
// excluded), {"event": "eval", step, accuracy, correct, problems, sample},
// {"event": "saved", dir, steps, elapsed_s} (or, with --reuse-out and an
// --out made with the same options, {"event": "reused", dir, steps,
// accuracy_after} and nothing else); with checkpoints
// (sft_checkpoint.h) {"event": "checkpoint", step, dir, bytes, seconds},
// {"event": "resumed", step, dir, skipped: [{dir, why}]} and, at
// --stop-at-step, {"event": "stopped", step, checkpoint} instead of "saved".
#pragma once

#include <cstdint>
#include <string>

#include <vector>

#include "common/status.h"
#include "workers/data/dataset.h"
#include "workers/data/prompt_filter.h"
#include "workers/roles/sft_options.h"

namespace tandem::roles {

struct SftResult {
  int64_t steps = 0;
  int64_t parameters = 0;
  double first_loss = 0;        // the first logged window's mean loss
  double last_loss = 0;         // the last window's
  double accuracy_before = 0;   // held-out greedy accuracy before training
  double accuracy_after = 0;    // and after
  double tokens_per_s = 0;      // sequence tokens per second of training time, whole run
  double train_seconds = 0;
  double elapsed_seconds = 0;
  std::string out_dir;                       // empty when the run stopped at --stop-at-step
  std::vector<std::string> final_responses;  // the last eval's decoded responses
  int64_t resumed_from = -1;                 // the step a --resume restored, -1: a first start
  bool stopped = false;                      // stopped at --stop-at-step (no final eval, no --out)
  bool reused = false;                       // --reuse-out found --out made with these options: nothing trained
  std::string last_checkpoint;               // the newest checkpoint written, if any
};

StatusOr<SftResult> RunSft(const SftOptions& options);

// The held-out problems sft evaluates on (see SftOptions::eval_options),
// prompts over `limit` left out, and the number of leading problems of a
// bounded `train` set that remain for training (all of them when the eval
// set is separate; nullopt for an unbounded set).
struct SftHeldOut {
  std::vector<data::Problem> problems;
  std::optional<size_t> train_size;
};
StatusOr<SftHeldOut> SftHeldOutProblems(const SftOptions& options, const data::Dataset& train,
                                        const data::PromptLengthLimit& limit);

}  // namespace tandem::roles

// The options of `tandem-worker sft` (docs/model.md, "sft"), without
// LibTorch so the command line can be parsed in any build. Defaults are the
// 2-CPU-core recipe: the "small" preset from scratch on easy
// synthetic-arith.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "workers/roles/optimizer_flags.h"

namespace tandem::roles {

struct SftOptions {
  // Data: a registered data set and its options (workers/data/dataset.h).
  std::string dataset = "synthetic-arith";
  nlohmann::json dataset_options;  // null: the data set's defaults
  // Held-out problems: eval_options opens the same data set with other
  // options (gsm8k's test file, say); without them an unbounded set is
  // opened with seed + 1 and a bounded one holds out its last eval_problems
  // problems (not trained on).
  nlohmann::json eval_options;
  int64_t eval_problems = 64;

  // Model: continue an HF directory, or build `preset` (with overrides) from
  // scratch with the byte-level tokenizer.
  std::string init_dir;
  std::string preset = "small";
  std::optional<int64_t> hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size;

  std::string out_dir;  // required: the HF directory written at the end (staged beside it, renamed in)
  bool reuse_out = false;  // an out_dir made with the same options (its trainer_state.json's recipe) is kept: no training

  // Limits: at least one of them.
  int64_t max_steps = 0;     // 0: none
  double time_limit_s = 0;   // 0: none; wall clock from the first step, evals included

  // Optimisation.
  int64_t batch_size = 32;   // problems per step
  double lr = 3e-3;
  int64_t warmup_steps = 20;
  double final_lr_ratio = 0.1;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;
  OptimizerFlags optimizer;         // AdamW's residency (optimizer_flags.h)

  int64_t eval_every = 0;            // steps between evals; 0: before and after only
  int64_t eval_max_new_tokens = 64;
  int64_t log_every = 10;
  int64_t max_prompt_tokens = 256;    // longer prompts (after the chat template) are filtered out
  int64_t max_sequence_tokens = 512;  // longer prompt+response examples are skipped
  uint64_t seed = 0;                  // initialisation and sampling
  std::string device = "cpu";         // cpu (fp32) or cuda (bf16)
  int threads = 0;                    // LibTorch intra-op threads; 0: its default
  std::string log_path;               // JSON lines; empty: stdout

  // Checkpoints and exact resume (sft_checkpoint.h): a checkpoint every
  // checkpoint_every steps, at stop_at_step and at the end, under
  // checkpoint_dir, which keeps the newest keep_checkpoints.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // 0: only at stop_at_step and at the end
  int64_t keep_checkpoints = 2;
  bool resume = false;           // continue from checkpoint_dir's newest valid one (a first start when it holds none)
  int64_t stop_at_step = 0;      // > 0: stop after this step with a checkpoint and no --out (a run split across jobs)
};

}  // namespace tandem::roles

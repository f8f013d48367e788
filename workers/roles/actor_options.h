// The options of `tandem-worker actor` (docs/rl.md "The actor"), without
// LibTorch so that the command line parses in any build.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "workers/roles/optimizer_flags.h"

namespace tandem::roles {

// An option's seconds as a timeout.
inline std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct ActorOptions {
  std::string model_dir;             // required: the HF directory to start from (its tokenizer too)
  double wait_for_model_s = 0;       // > 0: wait this long for model_dir to appear (model_wait.h)
  std::string dataset = "synthetic-arith";
  nlohmann::json dataset_options;    // null: the data set's defaults
  nlohmann::json eval_options;       // held-out set; null: seed + 1 (unbounded) or the last eval_problems (bounded)
  int64_t eval_problems = 64;
  int64_t eval_every = 0;            // steps between held-out evals; 0: before and after only
  // MOPD's objectives (objectives.h: data sets, teachers, weights, routes);
  // null: one rl objective over dataset / dataset_options / eval_options.
  nlohmann::json objectives;

  nlohmann::json algorithm = "grpo"; // a name or {"name", "options"} (workers/rl/algorithm_registry.h)
  int64_t steps = 10;
  int64_t prompts_per_step = 8;
  int64_t group_size = 8;            // samples per prompt
  int64_t max_new_tokens = 64;
  double temperature = 1.0;
  int64_t max_prompt_tokens = 256;
  double lr = 1e-5;
  int64_t warmup_steps = 0;
  double final_lr_ratio = 1.0;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;
  OptimizerFlags optimizer;          // AdamW's residency (optimizer_flags.h)
  bool optimizer_shard = false;      // AdamW's state sharded across the replicas (ZeRO-1)
  int64_t micro_batch_tokens = 0;    // 0: one micro-batch per step
  bool tree_packing = true;

  // The rollouts: `rollouts` replicas whose ports are in rollout_port_file
  // ("{rank}" replaced by 0..rollouts-1; relative to the working directory).
  int64_t rollouts = 1;
  std::string rollout_port_file = "rollout.{rank}.port";
  std::string rollout_host = "127.0.0.1";
  // SYNC's transport to the rollouts (docs/rl.md "Weights to the rollouts"):
  // "shm" (a host segment a version), "cuda-ipc" (a CUDA VMM export on the
  // actor's GPU, for rollouts colocated on that GPU; --device cuda), or
  // "nccl" (a broadcast to every rollout at once: NCCL between GPUs, gloo on
  // the CPU; its store on one of the actor's leased ports, reached at
  // weights_host).
  std::string weights_transport = "shm";
  std::string weights_host = "127.0.0.1";
  double request_timeout_s = 600;
  double phase_timeout_s = 600;

  // Data parallel (actor_replicas.h): with replicas > 1, rank 0 writes its
  // rendezvous port to dp_port_file (relative to the working directory);
  // the others join it at dp_host.
  std::string dp_port_file = "actor.dp.port";
  std::string dp_host = "127.0.0.1";

  // Multi-turn episodes (actor_episodes.h, docs/agents.md): a workflow
  // (agents/workflow.h: a name or {"name", "options"}; null: the rollouts
  // are asked directly, one response per sample), the unit of its
  // advantages ("episode" or "turn"), the episodes run at once, and where
  // the in-process proxy's port is written ("": nowhere).
  nlohmann::json workflow;
  std::string advantage_unit = "episode";
  int64_t episode_threads = 64;
  std::string proxy_port_file;

  std::string control;               // default $TANDEM_CONTROL (required: the daemon drives the weights)
  std::string metrics_path;          // default $TANDEM_RUN_DIR/metrics.jsonl, else ./metrics.jsonl
  std::string out_dir;               // optional: the final model as an HF directory
  // Checkpoints (actor_checkpoint.h): every checkpoint_every steps and after
  // the last; a checkpoint_dir that holds one is resumed from.
  std::string checkpoint_dir;        // relative to the working directory (the run dir); empty: none
  int64_t checkpoint_every = 0;      // 0: after the last step only
  int64_t keep_checkpoints = 2;
  std::string device = "cpu";        // cpu (fp32) or cuda (bf16, device 0 of CUDA_VISIBLE_DEVICES)
  uint64_t seed = 0;
  int threads = 0;
};

}  // namespace tandem::roles

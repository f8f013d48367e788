// Flags and run of `tandem-worker actor` (actor_command.h).
#include "workers/roles/actor_command.h"

#include <iostream>

#include "common/log.h"
#include "workers/roles/json_flag.h"
#if TANDEM_WORKER_WITH_SFT
#include "workers/roles/actor_role.h"
#endif

namespace tandem::roles {

void ActorCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("actor", summary);
  CLI::App* s = sub_;
  s->add_option("--model", o_.model_dir, "the Hugging Face directory to train (its tokenizer too)")->required();
  s->add_option("--wait-for-model", o_.wait_for_model_s, "wait up to this many seconds for --model to appear (0: it must exist)");
  s->add_option("--dataset", o_.dataset, "data set: synthetic-arith, gsm8k, dapo-math")->capture_default_str();
  s->add_option("--dataset-options", dataset_options_, "the data set's options, a JSON object (docs/model.md)");
  s->add_option("--eval-options", eval_options_, "options of the held-out set (default: seed+1, or the last --eval-problems)");
  s->add_option("--objectives", objectives_,
                "MOPD: objectives with data sets, teachers, weights and routes, a JSON object (docs/mopd.md); "
                "replaces --dataset, --dataset-options and --eval-options");
  s->add_option("--eval-problems", o_.eval_problems, "held-out problems evaluated (per objective)")->capture_default_str();
  s->add_option("--eval-every", o_.eval_every, "steps between held-out evals (0: before and after only)")->capture_default_str();
  s->add_option("--algorithm", algorithm_, "grpo, dr_grpo, dapo, mopd, or {\"name\": ..., \"options\": {...}} (docs/rl.md)");
  s->add_option("--steps", o_.steps, "training steps")->capture_default_str();
  s->add_option("--prompts-per-step", o_.prompts_per_step, "prompts per step")->capture_default_str();
  s->add_option("--group-size", o_.group_size, "samples per prompt")->capture_default_str();
  s->add_option("--max-new-tokens", o_.max_new_tokens, "response tokens at most")->capture_default_str();
  s->add_option("--temperature", o_.temperature, "sampling temperature")->capture_default_str();
  s->add_option("--max-prompt-tokens", o_.max_prompt_tokens, "drop longer prompts (after the chat template)")->capture_default_str();
  s->add_option("--lr", o_.lr, "peak learning rate")->capture_default_str();
  s->add_option("--warmup-steps", o_.warmup_steps, "linear warmup steps")->capture_default_str();
  s->add_option("--final-lr-ratio", o_.final_lr_ratio, "lr at the end, as a fraction of the peak")->capture_default_str();
  s->add_option("--weight-decay", o_.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  AddOptimizerFlags(s, o_.optimizer);
  s->add_flag("--optimizer-shard", o_.optimizer_shard,
              "with replicas: each keeps AdamW's state of 1/N of the parameters and the updated parameters are "
              "gathered (ZeRO-1; adamw only)");
  s->add_option("--max-grad-norm", o_.max_grad_norm, "clip the gradient's global norm (0: off)")->capture_default_str();
  s->add_option("--micro-batch-tokens", o_.micro_batch_tokens, "compact tokens per micro-batch (0: one per step)");
  s->add_flag("--no-tree-packing", no_tree_packing_, "pack every sequence whole (same losses; for comparison)");
  s->add_option("--workflow", workflow_,
                "multi-turn episodes: single-turn, multi-turn-feedback, tool-calls, or {\"name\": ..., \"options\": {...}} "
                "(docs/agents.md; default: the rollouts asked directly)");
  s->add_option("--advantage-unit", o_.advantage_unit, "a workflow's advantages: per episode or per turn")
      ->check(CLI::IsMember({"episode", "turn"}))
      ->capture_default_str();
  s->add_option("--episode-threads", o_.episode_threads, "a workflow's episodes run at once")->capture_default_str();
  s->add_option("--proxy-port-file", o_.proxy_port_file, "a workflow's proxy writes its port here (for outside agents)");
  s->add_option("--rollouts", o_.rollouts, "rollout replicas")->capture_default_str();
  s->add_option("--rollout-port-file", o_.rollout_port_file, "where replica {rank} wrote its port")->capture_default_str();
  s->add_option("--rollout-host", o_.rollout_host, "the rollouts' host")->capture_default_str();
  s->add_option("--weights-transport", o_.weights_transport,
                "how SYNC hands the weights to the rollouts: shm, cuda-ipc (rollouts on the actor's GPU) or "
                "nccl (a broadcast to all rollouts; gloo on the CPU; needs a leased port)")
      ->check(CLI::IsMember({"shm", "cuda-ipc", "nccl"}))
      ->capture_default_str();
  s->add_option("--weights-host", o_.weights_host, "nccl: this actor's address as the rollouts reach it")
      ->capture_default_str();
  s->add_option("--request-timeout", o_.request_timeout_s, "seconds for one /generate")->capture_default_str();
  s->add_option("--phase-timeout", o_.phase_timeout_s, "seconds for a phase, or for the rollouts' port files")->capture_default_str();
  s->add_option("--dp-port-file", o_.dp_port_file, "data parallel: where rank 0 writes its rendezvous port")
      ->capture_default_str();
  s->add_option("--dp-host", o_.dp_host, "data parallel: rank 0's address as the other replicas reach it")
      ->capture_default_str();
  s->add_option("--control", o_.control, "tandemd's control endpoint (default: $TANDEM_CONTROL)");
  s->add_option("--metrics", o_.metrics_path, "JSON lines per step (default: $TANDEM_RUN_DIR/metrics.jsonl)");
  s->add_option("--out", o_.out_dir, "write the trained model here at the end (HF directory)");
  s->add_option("--checkpoint-dir", o_.checkpoint_dir, "checkpoints here; one there is resumed from (docs/rl.md)");
  s->add_option("--checkpoint-every", o_.checkpoint_every, "steps between checkpoints (0: after the last only)")
      ->capture_default_str();
  s->add_option("--keep-checkpoints", o_.keep_checkpoints, "the newest checkpoints kept")->capture_default_str();
  s->add_option("--device", o_.device, "cpu (fp32) or cuda (bf16)")->capture_default_str();
  s->add_option("--seed", o_.seed, "sampling seed")->capture_default_str();
  s->add_option("--threads", o_.threads, "LibTorch intra-op threads (0: its default)");
}

int ActorCommand::Run() {
  if (!ParseJsonFlag("actor", "--dataset-options", dataset_options_, o_.dataset_options) ||
      !ParseJsonFlag("actor", "--eval-options", eval_options_, o_.eval_options) ||
      !ParseJsonFlag("actor", "--objectives", objectives_, o_.objectives))
    return 2;
  // --algorithm and --workflow: a bare name, or a JSON object.
  auto name_or_json = [](const char* flag, const std::string& text, nlohmann::json& out) {
    if (!text.empty() && text.front() == '{') return ParseJsonFlag("actor", flag, text, out);
    if (!text.empty()) out = text;
    return true;
  };
  if (!name_or_json("--algorithm", algorithm_, o_.algorithm) || !name_or_json("--workflow", workflow_, o_.workflow))
    return 2;
  o_.tree_packing = !no_tree_packing_;
#if TANDEM_WORKER_WITH_SFT
  StatusOr<ActorResult> r = RunActor(o_);
  if (!r.ok()) {
    tandem::log::Error("actor", "{}", r.status().ToString());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
#else
  std::cerr << "tandem-worker actor: this build has no LibTorch model (TANDEM_WITH_TORCH)\n";
  return 1;
#endif
}

}  // namespace tandem::roles

// Flags and run of `tandem-worker sft` (sft_command.h).
#include "workers/roles/sft_command.h"

#include <iostream>
#include <optional>

#include "common/log.h"
#include "workers/roles/json_flag.h"
#if TANDEM_WORKER_WITH_SFT
#include "workers/roles/sft_role.h"
#endif

namespace tandem::roles {

void SftCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("sft", summary);
  CLI::App* s = sub_;
  s->add_option("--dataset", o_.dataset, "data set: synthetic-arith, gsm8k, dapo-math")->capture_default_str();
  s->add_option("--dataset-options", dataset_options_, "the data set's options, a JSON object (docs/model.md)");
  s->add_option("--eval-options", eval_options_, "options of the held-out set (default: seed+1, or the last --eval-problems)");
  s->add_option("--eval-problems", o_.eval_problems, "held-out problems evaluated")->capture_default_str();
  s->add_option("--init", o_.init_dir, "continue this Hugging Face model directory (default: from scratch)");
  s->add_option("--preset", o_.preset, "from-scratch model: tiny, small, base")->capture_default_str();
  s->add_option("--hidden-size", hidden_, "override the preset's hidden_size");
  s->add_option("--layers", layers_, "override num_hidden_layers");
  s->add_option("--heads", heads_, "override num_attention_heads");
  s->add_option("--kv-heads", kv_heads_, "override num_key_value_heads");
  s->add_option("--head-dim", head_dim_, "override head_dim");
  s->add_option("--intermediate-size", intermediate_, "override intermediate_size");
  s->add_option("--out", o_.out_dir, "the Hugging Face directory to write")->required();
  s->add_flag("--reuse-out", o_.reuse_out, "keep --out when it was made with the same options (a cache); else train");
  s->add_option("--max-steps", o_.max_steps, "stop after this many steps (0: no limit)");
  s->add_option("--time-limit", o_.time_limit_s, "stop after this many seconds of training, evals included (0: none)");
  s->add_option("--batch-size", o_.batch_size, "problems per step")->capture_default_str();
  s->add_option("--lr", o_.lr, "peak learning rate")->capture_default_str();
  s->add_option("--warmup-steps", o_.warmup_steps, "linear warmup steps")->capture_default_str();
  s->add_option("--final-lr-ratio", o_.final_lr_ratio, "lr at the end, as a fraction of the peak")->capture_default_str();
  s->add_option("--weight-decay", o_.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  AddOptimizerFlags(s, o_.optimizer);
  s->add_option("--max-grad-norm", o_.max_grad_norm, "clip the gradient's global norm (0: off)")->capture_default_str();
  s->add_option("--eval-every", o_.eval_every, "steps between evals (0: before and after only)")->capture_default_str();
  s->add_option("--eval-max-new-tokens", o_.eval_max_new_tokens, "greedy tokens per eval answer")->capture_default_str();
  s->add_option("--log-every", o_.log_every, "steps per log line")->capture_default_str();
  s->add_option("--max-prompt-tokens", o_.max_prompt_tokens, "drop longer prompts (after the chat template)")->capture_default_str();
  s->add_option("--max-sequence-tokens", o_.max_sequence_tokens, "skip longer prompt+response examples")->capture_default_str();
  s->add_option("--seed", o_.seed, "initialisation and sampling seed")->capture_default_str();
  s->add_option("--device", o_.device, "cpu (fp32) or cuda (bf16)")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  s->add_option("--threads", o_.threads, "LibTorch intra-op threads (0: its default)");
  s->add_option("--log", o_.log_path, "write the JSON-line log here (default: stdout)");
  s->add_option("--checkpoint-dir", o_.checkpoint_dir, "write checkpoints here (docs/model.md, \"Checkpoints and resume\")");
  s->add_option("--checkpoint-every", o_.checkpoint_every, "steps between checkpoints (0: only at the end and --stop-at-step)");
  s->add_option("--keep-checkpoints", o_.keep_checkpoints, "checkpoints kept, the newest first")->capture_default_str();
  s->add_flag("--resume", o_.resume, "continue from the newest valid checkpoint in --checkpoint-dir (a first start when none)");
  s->add_option("--stop-at-step", o_.stop_at_step, "stop after this step with a checkpoint, without --out (a run split across jobs)");
}

int SftCommand::Run() {
  if (!ParseJsonFlag("sft", "--dataset-options", dataset_options_, o_.dataset_options) ||
      !ParseJsonFlag("sft", "--eval-options", eval_options_, o_.eval_options))
    return 2;
  auto set = [](int64_t v, std::optional<int64_t>* field) {
    if (v > 0) *field = v;
  };
  set(hidden_, &o_.hidden_size);
  set(layers_, &o_.num_layers);
  set(heads_, &o_.num_heads);
  set(kv_heads_, &o_.num_kv_heads);
  set(head_dim_, &o_.head_dim);
  set(intermediate_, &o_.intermediate_size);
#if TANDEM_WORKER_WITH_SFT
  StatusOr<SftResult> r = RunSft(o_);
  if (!r.ok()) {
    tandem::log::Error("sft", "{}", r.status().ToString());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (r->stopped) {
    tandem::log::Info("sft", "stopped at step {} (--stop-at-step); resume from {}", r->steps, r->last_checkpoint);
    return 0;
  }
  if (r->reused) {
    tandem::log::Info("sft", "reused {} (made with the same options): steps={} accuracy={:.3f}", r->out_dir, r->steps,
                      r->accuracy_after);
    return 0;
  }
  tandem::log::Info("sft", "saved {} steps={} accuracy_before={:.3f} accuracy_after={:.3f}", r->out_dir, r->steps,
                    r->accuracy_before, r->accuracy_after);
  return 0;
#else
  std::cerr << "tandem-worker sft: this build has no LibTorch model (TANDEM_WITH_TORCH)\n";
  return 1;
#endif
}

}  // namespace tandem::roles

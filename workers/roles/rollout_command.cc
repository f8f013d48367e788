// Flags and run of `tandem-worker rollout` (rollout_command.h).
#include "workers/roles/rollout_command.h"

#include <iostream>

namespace tandem::roles {

void RolloutCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("rollout", summary);
  CLI::App* s = sub_;
  AddServeFlags(*s, o_.serve);
  s->add_option("--kv-cache-mib", o_.kv_cache_mib, "KV pool size in MiB")->capture_default_str();
  s->add_option("--kv-blocks", o_.kv_blocks, "KV pool size in blocks (overrides --kv-cache-mib)");
  s->add_option("--block-size", o_.block_size, "tokens per KV block")->capture_default_str();
  s->add_option("--max-running", o_.max_running, "sequences in the running batch")->capture_default_str();
  s->add_option("--max-step-tokens", o_.max_step_tokens, "tokens per engine step (decode + prefill)")
      ->capture_default_str();
  s->add_option("--max-waiting", o_.max_waiting, "queued requests before 503")->capture_default_str();
  s->add_option("--max-model-len", o_.max_model_len, "prompt + max_new_tokens at most (default: the model's)");
  s->add_option("--seed", o_.seed, "seeds requests that have none")->capture_default_str();
  s->add_option("--cuda-graphs", o_.cuda_graphs,
                "decode-step CUDA graphs: auto (batch sizes 1..256, CUDA only), none, or sizes like 1,2,4,8")
      ->capture_default_str();
}

int RolloutCommand::Run() {
#if TANDEM_WORKER_WITH_ROLLOUT
  return ServeExitStatus("rollout", RunRollout(o_));
#else
  std::cerr << "tandem-worker rollout: this build has no LibTorch model (TANDEM_WITH_TORCH)\n";
  return 1;
#endif
}

}  // namespace tandem::roles

// Flags and run of `tandem-worker rollout` (rollout_command.h).
#include "workers/roles/rollout_command.h"

#include <iostream>

#include "common/log.h"

namespace tandem::roles {

void RolloutCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("rollout", summary);
  CLI::App* s = sub_;
  s->add_option("--model", o_.model_dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  s->add_option("--device", o_.device, "cpu (fp32) or cuda (bf16)")->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  s->add_option("--host", o_.host, "listen address (loopback unless you mean otherwise)")->capture_default_str();
  s->add_option("--port", o_.port, "listen port (default: the first of $TANDEM_PORTS, else any free port)");
  s->add_option("--kv-cache-mib", o_.kv_cache_mib, "KV pool size in MiB")->capture_default_str();
  s->add_option("--kv-blocks", o_.kv_blocks, "KV pool size in blocks (overrides --kv-cache-mib)");
  s->add_option("--block-size", o_.block_size, "tokens per KV block")->capture_default_str();
  s->add_option("--max-running", o_.max_running, "sequences in the running batch")->capture_default_str();
  s->add_option("--max-step-tokens", o_.max_step_tokens, "tokens per engine step (decode + prefill)")
      ->capture_default_str();
  s->add_option("--max-waiting", o_.max_waiting, "queued requests before 503")->capture_default_str();
  s->add_option("--max-model-len", o_.max_model_len, "prompt + max_new_tokens at most (default: the model's)");
  s->add_option("--seed", o_.seed, "seeds requests that have none")->capture_default_str();
  s->add_option("--threads", o_.threads, "LibTorch intra-op threads (0: its default)");
  s->add_option("--port-file", o_.port_file, "write the bound port here once listening");
  s->add_option("--control", o_.control, "tandemd's control channel, unix:PATH or tcp:HOST:PORT (default: $TANDEM_CONTROL)");
  s->add_option("--reconnect-window-s", o_.reconnect_window_s, "reconnect to a restarted tandemd for this long")
      ->capture_default_str();
}

int RolloutCommand::Run() {
#if TANDEM_WORKER_WITH_ROLLOUT
  const Status st = RunRollout(o_);
  if (!st.ok()) {
    tandem::log::Error("rollout", "{}", st.ToString());
    return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
#else
  std::cerr << "tandem-worker rollout: this build has no LibTorch model (TANDEM_WITH_TORCH)\n";
  return 1;
#endif
}

}  // namespace tandem::roles

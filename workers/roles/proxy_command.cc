// Flags and run of `tandem-worker proxy` (proxy_command.h).
#include "workers/roles/proxy_command.h"

namespace tandem::roles {

void ProxyCommand::Register(CLI::App& app, const std::string& summary) {
  sub_ = app.add_subcommand("proxy", summary);
  CLI::App* s = sub_;
  s->add_option("--rollout-port-file", o_.rollout_port_file,
                "the rollouts' port files, \"{rank}\" standing for 0..N-1 (their own --port-file)")
      ->required();
  s->add_option("--replicas", o_.replicas, "rollout replicas")->capture_default_str();
  s->add_option("--tokenizer", o_.tokenizer_dir, "the model's directory (tokenizer.json, tokenizer_config.json)")
      ->required();
  s->add_option("--host", o_.host, "bind address (loopback unless --allow-remote)")->capture_default_str();
  s->add_flag("--allow-remote", o_.allow_remote, "allow a non-loopback --host (no authentication)");
  s->add_option("--port", o_.port, "listen here (default: the first of $TANDEM_PORTS, else a free port)");
  s->add_option("--port-file", o_.port_file, "write the bound port here (\"{rank}\": $TANDEM_RANK)");
  s->add_option("--model-name", o_.model, "the model id /v1/models reports")->capture_default_str();
  s->add_option("--worker-threads", o_.worker_threads, "threads for templates, tokenisation and answers")
      ->capture_default_str();
  s->add_option("--request-timeout-s", o_.request_timeout_s, "a call's deadline, retries included")
      ->capture_default_str();
  s->add_option("--pause-wait-s", o_.pause_wait_s, "the longest a call waits while paused (then 503)")
      ->capture_default_str();
  s->add_option("--max-sessions", o_.max_sessions, "open sessions (then 429)")->capture_default_str();
  s->add_option("--max-session-tokens", o_.max_session_tokens, "tokens in one session's tree")->capture_default_str();
  s->add_option("--default-max-tokens", o_.default_max_tokens, "max_tokens of a chat call that gives none")
      ->capture_default_str();
}

int ProxyCommand::Run() { return agents::RunProxyRole(o_); }

}  // namespace tandem::roles

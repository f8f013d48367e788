// `tandem-worker proxy` (docs/agents.md "tandem-worker proxy"): the proxy as
// a job's task. Torch-free; the subcommand's file
// (workers/roles/proxy_command.cc) only declares the flags.
//
// The replicas are --replicas port files named by --rollout-port-file, whose
// "{rank}" becomes 0, 1, ... (the rollouts' own --port-file with {rank}); the
// tokenizer is --tokenizer's tokenizer.json (+ tokenizer_config.json), the
// model's; the proxy serves on --port, else the first of $TANDEM_PORTS,
// else a free port, and writes it to --port-file ("{rank}" becomes
// $TANDEM_RANK) in port_file.h's format. Port files of another job
// ($TANDEM_JOB_ID) are waited past. SIGTERM or SIGINT: stop (proxy_server.h
// bounds how long that takes), exit 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/agents/proxy_server.h"

namespace tandem::agents {

struct ProxyRoleOptions {
  std::string rollout_port_file;  // with "{rank}" when replicas > 1
  int replicas = 1;
  std::string tokenizer_dir;
  std::string host = "127.0.0.1";
  int port = 0;
  bool allow_remote = false;
  std::string port_file;
  std::string model = "tandem";
  int worker_threads = 2;
  double request_timeout_s = 600;
  double pause_wait_s = 300;
  size_t max_sessions = 4096;
  size_t max_session_tokens = 1 << 20;
  int64_t default_max_tokens = 1024;
};

// The replicas' port files: `pattern` with "{rank}" replaced by 0 ..
// replicas - 1. InvalidArgument when replicas < 1, or > 1 without "{rank}".
StatusOr<std::vector<std::string>> ReplicaPortFiles(const std::string& pattern, int replicas);

// Loads the tokenizer, starts the proxy, writes the port file.
StatusOr<std::unique_ptr<Proxy>> StartProxyRole(const ProxyRoleOptions& o);

// StartProxyRole, then until SIGTERM or SIGINT. Exit status: 0 stopped,
// 2 bad options (InvalidArgument), 1 anything else; errors are logged.
int RunProxyRole(const ProxyRoleOptions& o);

}  // namespace tandem::agents

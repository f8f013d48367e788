// Every tandemd setting in one table: flag, environment variable, default
// (one documented line per knob). The same table feeds `tandemd --help`,
// `tandem daemon`, `tandem run` (which takes the daemon's flags) and
// docs/daemon.md.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "orchestrator/daemon/http_server.h"

namespace tandem::daemon {

struct DaemonSettings {
  std::string state_dir;     // --state-dir       TANDEM_STATE_DIR   ~/.local/state/tandem
  std::string socket;        // --socket          TANDEM_SOCKET      <state-dir>/tandemd.sock
  std::string listen;        // --listen          TANDEM_LISTEN      "" (no TCP)
  std::string token_file;    // --token-file      TANDEM_TOKEN_FILE  "" (required with --listen)
  bool allow_remote = false; // --allow-remote    TANDEM_ALLOW_REMOTE  off
  std::string gpus;          // --gpus            TANDEM_GPUS        detected with nvidia-smi, else none
  double grace_s = 10;       // --grace           TANDEM_GRACE_S     10
  uint64_t compact_every = 20000;  // --compact-every TANDEM_COMPACT_EVERY 20000
  uint64_t max_tasks_per_job = 10000;  // --max-tasks-per-job TANDEM_MAX_TASKS_PER_JOB 10000 (0 = no limit)
  uint64_t max_tasks = 50000;  // --max-tasks       TANDEM_MAX_TASKS   50000 (tasks of all live jobs; 0 = no limit)
  size_t launch_batch = 32;    // --launch-batch    TANDEM_LAUNCH_BATCH 32 (launches per scheduling pass)
  std::string log_level = "info";  // --log-level TANDEM_LOG_LEVEL   info
  std::string exec_shim;     // --exec-shim       TANDEM_EXEC_SHIM   tandem-exec beside this binary
  std::string worker_bin;    // --worker-bin      TANDEM_WORKER_BIN  tandem-worker beside this binary
  std::string port_lock_dir = "/tmp/tandem-ports";  // --port-lock-dir TANDEM_PORT_LOCK_DIR /tmp/tandem-ports ("none": no machine-wide port claims)
  std::string slurm_job;     // --slurm-job       TANDEM_SLURM_JOB   $SLURM_JOB_ID ("submit": submit mode, "none": no Slurm backend)
  std::string slurm_api = "auto";  // --slurm-api TANDEM_SLURM_API   auto (submit mode: libslurm when usable, else CLI), lib, cli
  std::string redis_url;     // --redis           TANDEM_REDIS_URL   "" (no redis backend)
  std::string redis_password_file;  // --redis-password-file TANDEM_REDIS_PASSWORD_FILE ""
  std::string redis_prefix = "tandem";  // --redis-prefix TANDEM_REDIS_PREFIX tandem
  std::string cluster_key_file;  // --cluster-key-file TANDEM_CLUSTER_KEY_FILE "" (required with --redis)
  std::string control_listen;     // --control-listen TANDEM_CONTROL_LISTEN "" (control socket only; HOST:PORT, port 0 = any)
  std::string control_advertise;  // --control-advertise TANDEM_CONTROL_ADVERTISE "" (= --control-listen's bound address unless 0.0.0.0/::)
  // HTTP API limits (docs/api.md "Limits"; HttpLimits in http_server.h).
  size_t http_max_unix_connections = 256;  // --http-max-unix-connections TANDEM_HTTP_MAX_UNIX_CONNECTIONS 256
  size_t http_max_tcp_connections = 256;   // --http-max-tcp-connections TANDEM_HTTP_MAX_TCP_CONNECTIONS 256 (authenticated)
  size_t http_max_unauthenticated = 64;    // --http-max-unauthenticated TANDEM_HTTP_MAX_UNAUTHENTICATED 64 (TCP, no token yet)
  size_t http_max_unauthenticated_per_peer = 8;  // --http-max-unauthenticated-per-peer TANDEM_HTTP_MAX_UNAUTHENTICATED_PER_PEER 8
  int http_auth_timeout_s = 5;             // --http-auth-timeout TANDEM_HTTP_AUTH_TIMEOUT_S 5
  int http_read_timeout_s = 30;            // --http-read-timeout TANDEM_HTTP_READ_TIMEOUT_S 30
  size_t http_stream_queue_bytes = 4u << 20;  // --http-stream-queue TANDEM_HTTP_STREAM_QUEUE_BYTES 4 MiB

  // Resolved values, filled by Resolve().
  std::vector<int> gpu_ids;
};

// Adds the table's flags to `app` (with their environment variables).
void AddDaemonFlags(CLI::App& app, DaemonSettings& s, bool include_socket = true);
// Fills defaults that depend on the environment and parses --gpus.
Status Resolve(DaemonSettings& s);
// The default state dir: $TANDEM_STATE_DIR, else $XDG_STATE_HOME/tandem, else ~/.local/state/tandem.
std::string DefaultStateDir();
// "0,1,3" -> {0,1,3}; "" -> {}; errors name the bad item.
StatusOr<std::vector<int>> ParseGpuList(const std::string& text);
// The HTTP server's limits from the settings.
HttpLimits HttpLimitsFrom(const DaemonSettings& s);
// Physical GPU ids from `nvidia-smi`, or {} when it is absent or fails.
std::vector<int> DetectGpus();

}  // namespace tandem::daemon

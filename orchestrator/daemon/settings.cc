// The daemon's settings table; see settings.h.
#include "orchestrator/daemon/settings.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace tandem::daemon {

void AddDaemonFlags(CLI::App& app, DaemonSettings& s, bool include_socket) {
  app.add_option("--state-dir", s.state_dir, "Journal, snapshot, socket and default run dirs")
      ->envname("TANDEM_STATE_DIR");
  if (include_socket)
    app.add_option("--socket", s.socket, "Unix socket of the API (default <state-dir>/tandemd.sock)")
        ->envname("TANDEM_SOCKET");
  app.add_option("--listen", s.listen, "Also serve the API on HOST:PORT (loopback unless --allow-remote); needs --token-file")
      ->envname("TANDEM_LISTEN");
  app.add_option("--token-file", s.token_file, "File holding the bearer token for --listen")
      ->envname("TANDEM_TOKEN_FILE");
  app.add_flag("--allow-remote", s.allow_remote, "Permit --listen on a non-loopback address")
      ->envname("TANDEM_ALLOW_REMOTE");
  app.add_option("--gpus", s.gpus, "Physical GPU ids to hand out, e.g. 0,1,2,3 (default: nvidia-smi, else none)")
      ->envname("TANDEM_GPUS");
  app.add_option("--grace", s.grace_s, "Seconds between SIGTERM and SIGKILL on cancel")
      ->envname("TANDEM_GRACE_S")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--compact-every", s.compact_every,
                 "Journal records between snapshots (the job journal and each handoff group's)")
      ->envname("TANDEM_COMPACT_EVERY")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--max-tasks-per-job", s.max_tasks_per_job,
                 "Most tasks (replicas of all roles) one job may have; a wider job is refused at submit (0: no limit)")
      ->envname("TANDEM_MAX_TASKS_PER_JOB");
  app.add_option("--max-tasks", s.max_tasks,
                 "Most tasks of all live jobs together; a submit over it is refused (0: no limit)")
      ->envname("TANDEM_MAX_TASKS");
  app.add_option("--launch-batch", s.launch_batch,
                 "Task launches per scheduling pass; a wider job launches in passes with API requests between them")
      ->envname("TANDEM_LAUNCH_BATCH")->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--log-level", s.log_level, "trace, debug, info, warn, error")
      ->envname("TANDEM_LOG_LEVEL");
  app.add_option("--exec-shim", s.exec_shim, "Path of tandem-exec (default: beside this binary)")
      ->envname("TANDEM_EXEC_SHIM");
  app.add_option("--worker-bin", s.worker_bin, "Path of tandem-worker, run for roles with \"worker\" (default: beside this binary)")
      ->envname("TANDEM_WORKER_BIN");
  app.add_option("--port-lock-dir", s.port_lock_dir,
                 "Directory of the machine-wide claims on leased ports, shared by every daemon on this machine so "
                 "that two never lease one port (\"none\": no claims)")
      ->envname("TANDEM_PORT_LOCK_DIR");
  app.add_option("--slurm-job", s.slurm_job,
                 "Slurm allocation whose job steps run jobs with backend.kind \"slurm\" "
                 "(default: $SLURM_JOB_ID; \"submit\": one batch job per tandem job; \"none\": no Slurm backend)")
      ->envname("TANDEM_SLURM_JOB");
  app.add_option("--slurm-api", s.slurm_api,
                 "Submit mode talks to Slurm through libslurm (lib), sbatch/squeue/scancel (cli), "
                 "or libslurm when built and usable (auto)")
      ->envname("TANDEM_SLURM_API")->check(CLI::IsMember({"auto", "lib", "cli"}));
  app.add_option("--redis", s.redis_url, "Enable the redis backend: redis://[user@]host:port (docs/redis.md)")
      ->envname("TANDEM_REDIS_URL");
  app.add_option("--redis-password-file", s.redis_password_file, "File holding the Redis password")
      ->envname("TANDEM_REDIS_PASSWORD_FILE");
  app.add_option("--redis-prefix", s.redis_prefix, "Key prefix of the redis backend")
      ->envname("TANDEM_REDIS_PREFIX");
  app.add_option("--cluster-key-file", s.cluster_key_file,
                 "File (chmod 600) holding the key that signs commands for redis agents (required with --redis)")
      ->envname("TANDEM_CLUSTER_KEY_FILE");
  app.add_option("--control-listen", s.control_listen,
                 "Also serve the worker control channel on TCP HOST:PORT (port 0: any free port), for tasks on "
                 "other nodes; hellos need the launch's token (docs/control-protocol.md)")
      ->envname("TANDEM_CONTROL_LISTEN");
  app.add_option("--control-advertise", s.control_advertise,
                 "HOST:PORT that remote tasks connect to (default: --control-listen's bound address, unless it is "
                 "0.0.0.0 or ::)")
      ->envname("TANDEM_CONTROL_ADVERTISE");
  app.add_option("--http-max-unix-connections", s.http_max_unix_connections,
                 "Most open connections on the API's unix socket (503 beyond)")
      ->envname("TANDEM_HTTP_MAX_UNIX_CONNECTIONS")->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--http-max-tcp-connections", s.http_max_tcp_connections,
                 "Most authenticated connections on --listen (503 beyond)")
      ->envname("TANDEM_HTTP_MAX_TCP_CONNECTIONS")->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--http-max-unauthenticated", s.http_max_unauthenticated,
                 "Most --listen connections that have not yet sent a request with the token (closed beyond)")
      ->envname("TANDEM_HTTP_MAX_UNAUTHENTICATED")->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--http-max-unauthenticated-per-peer", s.http_max_unauthenticated_per_peer,
                 "Of those, most from one peer (an IPv4 address, an IPv6 /64; closed beyond), so one peer cannot "
                 "take every slot")
      ->envname("TANDEM_HTTP_MAX_UNAUTHENTICATED_PER_PEER")->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--http-auth-timeout", s.http_auth_timeout_s,
                 "Seconds a new --listen connection has to send its request header")
      ->envname("TANDEM_HTTP_AUTH_TIMEOUT_S")->check(CLI::Range(1, 3600));
  app.add_option("--http-read-timeout", s.http_read_timeout_s,
                 "Seconds to read a request (and an idle keep-alive connection's next one)")
      ->envname("TANDEM_HTTP_READ_TIMEOUT_S")->check(CLI::Range(1, 3600));
  app.add_option("--http-stream-queue", s.http_stream_queue_bytes,
                 "Bytes a streaming client (events, logs -f) may leave unread before it is dropped")
      ->envname("TANDEM_HTTP_STREAM_QUEUE_BYTES")->check(CLI::Range(size_t{64} << 10, size_t{1} << 32));
}

HttpLimits HttpLimitsFrom(const DaemonSettings& s) {
  HttpLimits l;
  l.max_unix_connections = s.http_max_unix_connections;
  l.max_tcp_connections = s.http_max_tcp_connections;
  l.max_tcp_unauthenticated = s.http_max_unauthenticated;
  l.max_tcp_unauthenticated_per_peer = s.http_max_unauthenticated_per_peer;
  l.auth_timeout_s = s.http_auth_timeout_s;
  l.read_timeout_s = s.http_read_timeout_s;
  l.max_stream_queue_bytes = s.http_stream_queue_bytes;
  return l;
}

std::string DefaultStateDir() {
  if (const char* e = std::getenv("TANDEM_STATE_DIR"); e && *e) return e;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/tandem";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/tandem";
}

StatusOr<std::vector<int>> ParseGpuList(const std::string& text) {
  std::vector<int> out;
  std::set<int> seen;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1023) return InvalidArgument("--gpus: \"" + item + "\" is not a GPU id");
    if (!seen.insert(static_cast<int>(v)).second) return InvalidArgument("--gpus: " + item + " listed twice");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

std::vector<int> DetectGpus() {
  std::vector<int> ids;
  FILE* p = ::popen("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null", "r");
  if (!p) return ids;
  char line[64];
  while (std::fgets(line, sizeof line, p)) {
    char* end = nullptr;
    long v = std::strtol(line, &end, 10);
    if (end != line) ids.push_back(static_cast<int>(v));
  }
  if (::pclose(p) != 0) ids.clear();
  return ids;
}

Status Resolve(DaemonSettings& s) {
  if (s.state_dir.empty()) s.state_dir = DefaultStateDir();
  if (s.socket.empty()) s.socket = s.state_dir + "/tandemd.sock";
  // Tasks run in their own directories and reach the daemon by these paths:
  // a relative --state-dir or --socket would name nothing there.
  std::error_code ec;
  s.state_dir = std::filesystem::absolute(s.state_dir, ec).lexically_normal().string();
  if (ec) return InvalidArgument("--state-dir " + s.state_dir + ": " + ec.message());
  s.socket = std::filesystem::absolute(s.socket, ec).lexically_normal().string();
  if (ec) return InvalidArgument("--socket " + s.socket + ": " + ec.message());
  if (s.gpus.empty()) {
    s.gpu_ids = DetectGpus();
  } else if (s.gpus == "none") {
    s.gpu_ids.clear();
  } else {
    TANDEM_ASSIGN_OR_RETURN(s.gpu_ids, ParseGpuList(s.gpus));
  }
  if (s.exec_shim.empty() || s.worker_bin.empty()) {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
      buf[n] = '\0';
      const std::filesystem::path dir = std::filesystem::path(buf).parent_path();
      if (s.exec_shim.empty()) s.exec_shim = (dir / "tandem-exec").string();
      if (s.worker_bin.empty()) s.worker_bin = (dir / "tandem-worker").string();
    }
  }
  // Launched with each task's run dir as the working directory: a relative
  // path (one with a slash; a bare name is looked up in PATH) names nothing there.
  for (std::string* path : {&s.exec_shim, &s.worker_bin}) {
    if (path->find('/') == std::string::npos) continue;
    *path = std::filesystem::absolute(*path, ec).lexically_normal().string();
    if (ec) return InvalidArgument(*path + ": " + ec.message());
  }
  if (s.slurm_job.empty()) {
    const char* job = std::getenv("SLURM_JOB_ID");
    s.slurm_job = job ? job : "none";
  }
  if (!s.listen.empty() && s.token_file.empty())
    return InvalidArgument("--listen needs --token-file");
  if (!s.control_advertise.empty() && s.control_listen.empty())
    return InvalidArgument("--control-advertise needs --control-listen");
  return Status::Ok();
}

}  // namespace tandem::daemon

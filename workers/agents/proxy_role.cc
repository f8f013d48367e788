// `tandem-worker proxy`'s run (proxy_role.h).
#include "workers/agents/proxy_role.h"

#include <signal.h>

#include <cstdlib>

#include "common/log.h"
#include "common/replace_all.h"
#include "workers/roles/port_file.h"

namespace tandem::agents {
namespace {

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

StatusOr<std::vector<std::string>> ReplicaPortFiles(const std::string& pattern, int replicas) {
  if (pattern.empty()) return InvalidArgument("--rollout-port-file: required");
  if (replicas < 1) return InvalidArgument("--replicas: must be >= 1, got " + std::to_string(replicas));
  if (replicas > 1 && pattern.find("{rank}") == std::string::npos)
    return InvalidArgument("--rollout-port-file: needs \"{rank}\" for " + std::to_string(replicas) + " replicas");
  std::vector<std::string> files;
  for (int i = 0; i < replicas; ++i) files.push_back(ReplaceAll(pattern, "{rank}", std::to_string(i)));
  return files;
}

StatusOr<std::unique_ptr<Proxy>> StartProxyRole(const ProxyRoleOptions& o) {
  ProxyOptions p;
  TANDEM_ASSIGN_OR_RETURN(p.replicas.port_files, ReplicaPortFiles(o.rollout_port_file, o.replicas));
  if (const char* job = std::getenv("TANDEM_JOB_ID")) p.replicas.job = job;
  if (o.tokenizer_dir.empty()) return InvalidArgument("--tokenizer: required (the model's directory)");
  auto tok = data::Tokenizer::FromDirectory(o.tokenizer_dir);
  if (!tok.ok()) return InvalidArgument(tok.status().WithContext("--tokenizer").message());
  if (o.request_timeout_s <= 0 || o.pause_wait_s < 0 || o.worker_threads < 1 || o.default_max_tokens < 1)
    return InvalidArgument("--request-timeout-s, --pause-wait-s, --worker-threads, --default-max-tokens: out of range");
  p.host = o.host;
  p.allow_remote = o.allow_remote;
  p.port = o.port;
  if (p.port == 0) {
    TANDEM_ASSIGN_OR_RETURN(p.port, roles::FirstLeasedPort());
  }
  p.model = o.model;
  p.worker_threads = o.worker_threads;
  p.request_timeout = Ms(o.request_timeout_s);
  p.pause_wait = Ms(o.pause_wait_s);
  p.sessions.max_sessions = o.max_sessions;
  p.sessions.max_tokens = o.max_session_tokens;
  p.request.default_chat_max_tokens = o.default_max_tokens;
  auto proxy = std::make_unique<Proxy>(std::move(*tok), p);
  TANDEM_RETURN_IF_ERROR(proxy->Start());
  if (!o.port_file.empty()) {
    const char* rank = std::getenv("TANDEM_RANK");
    TANDEM_RETURN_IF_ERROR(
        roles::WritePortFile(ReplaceAll(o.port_file, "{rank}", rank != nullptr && *rank ? rank : "0"), proxy->port()));
  }
  return proxy;
}

int RunProxyRole(const ProxyRoleOptions& o) {
  // Blocked before any thread starts, so that only the wait below takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto proxy = StartProxyRole(o);
  if (!proxy.ok()) {
    log::Error("proxy", "{}", proxy.status().ToString());
    return proxy.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  log::Info("proxy", "signal {}: stopping", sig);
  (*proxy)->Stop();
  return 0;
}

}  // namespace tandem::agents

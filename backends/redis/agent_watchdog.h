// The agent's watchdog (issue #6 "Leases and fencing"; docs/redis.md "Agent
// crash"): a small process forked by `tandem-agent` at start-up that outlives
// it. The agent tells it, over a pipe, which tasks run (task id and local
// TaskRef) and which ended. When the pipe closes without a clean goodbye —
// the agent was killed with SIGKILL or crashed — the watchdog kills every
// task still listed, with the local backend's Kill (the whole process tree),
// so a dead agent leaves no running work behind; the daemon reports those
// tasks lost once the node's lease lapses and restarts them elsewhere.
//
// Protocol (one line each, written by the agent's io thread):
//   + <task_id> <local TaskRef JSON>
//   - <task_id>
//   bye                 clean shutdown: the watchdog exits without killing
#pragma once

#include <string>

#include "backends/executor.h"
#include "backends/local/local_executor.h"
#include "common/status.h"

namespace tandem::backends::redis {

class AgentWatchdog {
 public:
  // Forks the watchdog. Call while the process has a single thread.
  static StatusOr<AgentWatchdog> Spawn(const std::string& node, LocalExecutorOptions local);
  AgentWatchdog() = default;
  AgentWatchdog(AgentWatchdog&& o) noexcept : fd_(o.fd_), pid_(o.pid_) { o.fd_ = -1; }
  AgentWatchdog& operator=(AgentWatchdog&& o) noexcept;
  ~AgentWatchdog();

  void TaskStarted(const std::string& task_id, const TaskRef& local_ref);
  void TaskEnded(const std::string& task_id);
  // Clean shutdown: the watchdog exits and kills nothing.
  void Release();
  int pid() const { return pid_; }

 private:
  void Send(const std::string& line);
  int fd_ = -1;
  int pid_ = -1;
};

}  // namespace tandem::backends::redis

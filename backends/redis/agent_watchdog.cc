// Implements agent_watchdog.h: fork, then the child reads the pipe until EOF.
#include "backends/redis/agent_watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <boost/asio/io_context.hpp>

#include "common/log.h"

namespace tandem::backends::redis {
namespace {

// The watchdog process's body; never returns.
[[noreturn]] void RunWatchdog(int fd, const std::string& node, LocalExecutorOptions local) {
  ::prctl(PR_SET_NAME, "tandem-agent-wd", 0, 0, 0);
  // Signals meant for the agent's process group (Ctrl-C, a service manager's
  // SIGTERM) must not end the watchdog before it sees the agent go.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  std::map<std::string, std::string> tasks;  // task id -> local TaskRef JSON
  std::string buf;
  bool bye = false;
  char chunk[4096];
  while (!bye) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line == "bye") {
        bye = true;
      } else if (line.size() > 2 && line[0] == '+') {
        auto sp = line.find(' ', 2);
        if (sp != std::string::npos) tasks[line.substr(2, sp - 2)] = line.substr(sp + 1);
      } else if (line.size() > 2 && line[0] == '-') {
        tasks.erase(line.substr(2));
      }
    }
  }
  if (!bye && !tasks.empty()) {
    log::Warn("redis", "agent gone node={}: watchdog killing {} task(s)", node, tasks.size());
    boost::asio::io_context io;
    local.reap_orphans = false;
    auto exec = LocalExecutor::Create(io, [](const std::string&, const TaskExit&) {}, local);
    for (const auto& [id, text] : tasks) {
      auto j = nlohmann::json::parse(text, nullptr, false);
      auto ref = j.is_discarded() ? StatusOr<TaskRef>(InvalidArgument("bad ref")) : TaskRef::FromJson(j);
      Status st = !exec.ok() ? exec.status() : !ref.ok() ? ref.status() : (*exec)->Kill(*ref);
      if (st.ok()) {
        log::Warn("redis", "watchdog killed task={} node={}", id, node);  // warn: flushed before _exit
      } else {
        log::Error("redis", "watchdog could not kill task={} node={} error={}", id, node, st.ToString());
      }
    }
  }
  ::_exit(0);
}

}  // namespace

StatusOr<AgentWatchdog> AgentWatchdog::Spawn(const std::string& node, LocalExecutorOptions local) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Internal(std::string("watchdog: pipe: ") + std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Internal(std::string("watchdog: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[1]);
    RunWatchdog(fds[0], node, std::move(local));
  }
  ::close(fds[0]);
  AgentWatchdog w;
  w.fd_ = fds[1];
  w.pid_ = pid;
  return w;
}

AgentWatchdog& AgentWatchdog::operator=(AgentWatchdog&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    pid_ = o.pid_;
    o.fd_ = -1;
  }
  return *this;
}

AgentWatchdog::~AgentWatchdog() {
  if (fd_ >= 0) ::close(fd_);
}

void AgentWatchdog::Send(const std::string& line) {
  if (fd_ < 0) return;
  std::string text = line + "\n";
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log::Warn("redis", "watchdog pipe closed: {}", std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

void AgentWatchdog::TaskStarted(const std::string& task_id, const TaskRef& local_ref) {
  Send("+ " + task_id + " " + local_ref.ToJson().dump());
}

void AgentWatchdog::TaskEnded(const std::string& task_id) { Send("- " + task_id); }

void AgentWatchdog::Release() {
  Send("bye");
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace tandem::backends::redis

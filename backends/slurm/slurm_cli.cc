// RunCommand: see slurm_cli.h.
#include "backends/slurm/slurm_cli.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

extern char** environ;

namespace tandem::backends::slurm {

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout) {
  if (argv.empty()) return InvalidArgument("run command: empty argv");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return ErrnoStatus("pipe");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], STDERR_FILENO);
  // Nothing else of ours: asio opens the daemon's sockets without
  // close-on-exec, and a child would keep them open.
  posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
  std::vector<char*> cargv;
  std::vector<std::string> copy = argv;
  for (auto& s : copy) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return ErrnoStatus("run " + argv[0], rc);
  }

  CommandResult res;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  pid_t waited;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return DeadlineExceeded("run " + argv[0] + ": no answer after " +
                            std::to_string(timeout.count()) + " ms");
  if (waited < 0) {
    // ECHILD: tandemd's orphan reaper (LocalExecutorOptions::reap_orphans),
    // running on the io thread while this runs on a worker, reaped it first.
    // The Slurm clients print to stderr exactly when they fail.
    res.exit_code = res.err.empty() ? 0 : 1;
    return res;
  }
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return res;
}

bool HaveCommand(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace tandem::backends::slurm

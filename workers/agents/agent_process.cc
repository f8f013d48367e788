// One run of an outside agent program (agent_process.h).
#include "workers/agents/agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace tandem::agents {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kErrTail = 2048;

struct Fd {
  int fd = -1;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

}  // namespace

StatusOr<AgentRun> RunAgentProcess(const std::vector<std::string>& argv,
                                   const std::vector<std::pair<std::string, std::string>>& env, const std::string& input,
                                   std::chrono::milliseconds timeout, size_t max_stdout) {
  if (argv.empty()) return InvalidArgument("agent command: empty");
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Internal(std::string("agent command: pipe: ") + std::strerror(errno));
  Fd in_r{in[0]}, in_w{in[1]};
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(std::string("agent command: pipe: ") + std::strerror(errno));
  Fd out_r{out[0]}, out_w{out[1]};
  if (pipe2(err, O_CLOEXEC) != 0) return Internal(std::string("agent command: pipe: ") + std::strerror(errno));
  Fd err_r{err[0]}, err_w{err[1]};

  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& [k, v] : env) replaced |= kv.rfind(k + "=", 0) == 0;
    if (!replaced) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cenv, cargv;
  for (std::string& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_r.fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, pipe_signal;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &pipe_signal);  // an ignored SIGPIPE would be inherited
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return InvalidArgument("agent command " + argv[0] + ": cannot start: " + std::strerror(rc));
  in_r.Close();
  out_w.Close();
  err_w.Close();

  // A write to an agent that closed its stdin is EPIPE here, not a SIGPIPE
  // that ends the worker: the signal is blocked on this thread while it
  // writes, and one that came is taken before it is unblocked.
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old_mask);
  struct Restore {
    sigset_t mask, pipe;
    ~Restore() {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) > 0) {
      }
      pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    }
  } restore{old_mask, pipe_signal};

  AgentRun run;
  const Clock::time_point deadline = Clock::now() + timeout;
  size_t written = 0;
  if (input.empty()) in_w.Close();
  if (in_w.fd >= 0) fcntl(in_w.fd, F_SETFL, O_NONBLOCK);
  bool over = false, late = false;
  char buf[65536];
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      late = true;
      break;
    }
    pollfd p[3];
    nfds_t n = 0;
    for (Fd* f : {&out_r, &err_r}) {
      if (f->fd >= 0) p[n++] = {f->fd, POLLIN, 0};
    }
    if (in_w.fd >= 0) p[n++] = {in_w.fd, POLLOUT, 0};
    if (poll(p, n, static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < n; ++i) {
      if (p[i].revents == 0) continue;
      if (p[i].fd == in_w.fd) {
        const ssize_t w = ::write(in_w.fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) in_w.Close();  // the agent closed its stdin: fine
        if (written == input.size()) in_w.Close();
        continue;
      }
      const ssize_t r = ::read(p[i].fd, buf, sizeof buf);
      if (r <= 0) {
        if (r == 0 || errno != EAGAIN) (p[i].fd == out_r.fd ? out_r : err_r).Close();
        continue;
      }
      if (p[i].fd == out_r.fd) {
        run.out.append(buf, static_cast<size_t>(r));
        if (run.out.size() > max_stdout) {
          over = true;
          break;
        }
      } else {
        run.err_tail.append(buf, static_cast<size_t>(r));
        if (run.err_tail.size() > 2 * kErrTail) run.err_tail.erase(0, run.err_tail.size() - kErrTail);
      }
    }
    if (over) break;
  }
  in_w.Close();
  if (late || over) ::kill(-pid, SIGKILL);
  // The pipes are closed (or the group killed): the program ends. Wait for
  // it without reaping (bounded by the deadline, then killed), so that its
  // group id is still its own when whatever it left in the group is killed;
  // then reap it.
  for (;;) {
    siginfo_t info{};
    const int w = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && info.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (Clock::now() > deadline && !late) {
      late = true;
      ::kill(-pid, SIGKILL);
    }
    ::usleep(2000);
  }
  ::kill(-pid, SIGKILL);  // what it left running in its group
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (run.err_tail.size() > kErrTail) run.err_tail.erase(0, run.err_tail.size() - kErrTail);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  if (late)
    return DeadlineExceeded("agent command " + argv[0] + ": still running after " + std::to_string(timeout.count()) +
                            " ms (killed)");
  if (over) return InvalidArgument("agent command " + argv[0] + ": over " + std::to_string(max_stdout) + " bytes on stdout");
  return run;
}

}  // namespace tandem::agents

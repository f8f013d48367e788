// The other process of the transports' fault tests (ipc_fault_test.cc,
// nccl_transport_test.cc): weights_peer (TANDEM_BIN_DIR), started fresh with
// posix_spawn, its stdout read line by line; killed (SIGKILL, by its pid)
// and reaped when the test drops it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace tandem::weights::testing {

// A weights_peer child (peer_main.cc) with its stdout on a pipe.
class Peer {
 public:
  static std::string Binary() {
    const char* dir = std::getenv("TANDEM_BIN_DIR");
    return std::string(dir ? dir : ".") + "/weights_peer";
  }
  explicit Peer(std::vector<std::string> args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    args.insert(args.begin(), Binary());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~Peer() {
    if (pid_ > 0 && !reaped_) Signal(SIGKILL), Reap();
    if (out_ >= 0) ::close(out_);
  }
  bool started() const { return pid_ > 0; }
  // The next line of its stdout, "" at EOF or after `timeout`.
  std::string ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      pollfd p{out_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return "";
      char b[512];
      const ssize_t n = ::read(out_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // True when a signal ended it.
  bool Reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return WIFSIGNALED(status);
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
  bool reaped_ = false;
};

}  // namespace tandem::weights::testing

// A serving worker as the role tests run it: `tandem-worker ROLE ARGS...
// --port-file F`, its stdout and stderr in a log file, started and waited
// for by pid (never by name).
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace tandem::roles {

inline std::string BinDir() {
  const char* d = std::getenv("TANDEM_BIN_DIR");
  return d ? d : "bin";
}

struct Worker {
  pid_t pid = -1;
  int port = 0;
  int exit_status = -1;  // when it exited before listening
  int Stop(int sig = SIGTERM) {
    if (pid <= 0) return -1;
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Worker() { Stop(SIGKILL); }
};

// Starts `tandem-worker role args...`; waits for its port file (or for it to exit).
inline void Start(Worker& w, const std::string& role, const std::vector<std::string>& args, const std::string& port_file,
           const std::string& log) {
  std::vector<std::string> argv = {BinDir() + "/tandem-worker", role};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--port-file");
  argv.push_back(port_file);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  ASSERT_EQ(posix_spawn(&w.pid, cargv[0], &fa, nullptr, cargv.data(), environ), 0) << cargv[0];
  posix_spawn_file_actions_destroy(&fa);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> w.port && w.port > 0) return;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      w.pid = -1;
      w.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tandem::roles

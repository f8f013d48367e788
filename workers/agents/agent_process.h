// One run of an outside agent program (the `command` workflow, workflow.h):
// argv spawned (posix_spawnp, its own process group) with extra environment
// variables, `input` written to its stdin, its stdout kept (at most
// max_stdout bytes; more is an error), its stderr's last 2 KiB kept for
// errors. Torch-free.
//
// Bounded: past `timeout` the whole process group gets SIGKILL and the run
// is DeadlineExceeded; a program that closes stdin early or never reads it
// does not block the writer (the write gives up at the deadline too). Every
// process started is reaped before Run returns, and whatever it left in its
// process group is killed: nothing is left behind. Its environment is the
// caller's (plus `env`), so a job backend that sweeps a task's processes
// by its environment or its cgroup (docs/architecture.md) finds an agent
// whose worker was killed with SIGKILL mid-episode too.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::agents {

struct AgentRun {
  int exit_code = -1;        // -1 when killed by a signal
  int signal = 0;
  std::string out;           // stdout
  std::string err_tail;      // the end of stderr
};

StatusOr<AgentRun> RunAgentProcess(const std::vector<std::string>& argv,
                                   const std::vector<std::pair<std::string, std::string>>& env, const std::string& input,
                                   std::chrono::milliseconds timeout, size_t max_stdout = 1u << 20);

}  // namespace tandem::agents

// Orphaned srun clients found by their step's name: see srun_client.h.
#include "backends/slurm/srun_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace tandem::backends::slurm {
namespace {

// Whether the NUL-separated argument list in `cmdline` holds `arg` exactly.
bool HasArg(std::string_view cmdline, std::string_view arg) {
  size_t pos = 0;
  while (pos < cmdline.size()) {
    size_t end = cmdline.find('\0', pos);
    if (end == std::string_view::npos) end = cmdline.size();
    if (cmdline.substr(pos, end - pos) == arg) return true;
    pos = end + 1;
  }
  return false;
}

bool ReadCmdline(pid_t pid, std::string& out) {
  const std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

}  // namespace

std::string StepNameArg(const std::string& step_name) { return "--job-name=" + step_name; }

std::vector<local::ProcStat> FindSrunClients(const std::string& step_name) {
  std::vector<local::ProcStat> out;
  const std::string arg = StepNameArg(step_name);
  DIR* dir = ::opendir("/proc");
  if (!dir) return out;
  const pid_t self = ::getpid();
  std::string cmdline;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    if (!ReadCmdline(static_cast<pid_t>(pid), cmdline) || !HasArg(cmdline, arg)) continue;
    auto st = local::ReadProcStat(static_cast<pid_t>(pid));
    if (st && !st->dead()) out.push_back(*st);
  }
  ::closedir(dir);
  return out;
}

int SignalProcesses(const std::vector<local::ProcStat>& procs, int sig) {
  int n = 0;
  for (const auto& p : procs) {
    auto now = local::ReadProcStat(p.pid);
    if (!now || now->dead() || now->start_time != p.start_time) continue;
    if (::kill(p.pid, sig) == 0) ++n;
  }
  return n;
}

}  // namespace tandem::backends::slurm

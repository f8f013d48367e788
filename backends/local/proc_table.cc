// /proc readers: see proc_table.h.
#include "backends/local/proc_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tandem::backends::local {
namespace {

// Whether a NUL-separated list (/proc/<pid>/environ or cmdline) holds `entry`.
bool ListHas(std::string_view list, std::string_view entry) {
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find('\0', pos);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(pos, end - pos) == entry) return true;
    pos = end + 1;
  }
  return false;
}

// Live processes whose /proc/<pid>/<file> (a NUL-separated list) holds `entry`.
std::vector<ProcStat> FindProcessesHolding(const char* file, const std::string& entry) {
  std::vector<ProcStat> found;
  ForEachProcessList(file, [&](pid_t pid, std::string_view list) {
    if (!ListHas(list, entry)) return;
    auto st = ReadProcStat(pid);
    if (st && !st->dead()) found.push_back(*st);
  });
  return found;
}

}  // namespace

void ForEachProcessList(const char* file, const std::function<void(pid_t, std::string_view)>& visit) {
  DIR* dir = ::opendir("/proc");
  if (!dir) return;
  const pid_t self = ::getpid();
  std::string list;
  char path[64];
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid == self) continue;
    std::snprintf(path, sizeof path, "/proc/%ld/%s", pid, file);
    if (ReadKernelFile(path, list)) visit(static_cast<pid_t>(pid), list);
  }
  ::closedir(dir);
}

bool ReadKernelFile(const std::filesystem::path& path, std::string& out) {
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

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::string text;
  if (!ReadKernelFile(path, text)) return std::nullopt;
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
  //  majflt cmajflt utime stime cutime cstime priority nice num_threads
  //  itrealvalue starttime ..."; comm may hold spaces and ')'.
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcStat st;
  st.pid = pid;
  st.comm = text.substr(open + 1, close - open - 1);
  const char* p = text.c_str() + close + 1;
  // Fields after comm, 1-based from "state" (field 3 overall).
  char* end = nullptr;
  while (*p == ' ') ++p;
  st.state = *p ? *p++ : '?';
  st.ppid = static_cast<pid_t>(std::strtol(p, &end, 10)); p = end;
  st.pgid = static_cast<pid_t>(std::strtol(p, &end, 10)); p = end;
  st.sid = static_cast<pid_t>(std::strtol(p, &end, 10)); p = end;
  // Skip fields 7..21 (15 fields) to reach field 22.
  for (int i = 0; i < 15; ++i) {
    std::strtoll(p, &end, 10);
    if (end == p) return std::nullopt;
    p = end;
  }
  st.start_time = std::strtoull(p, &end, 10);
  if (end == p) return std::nullopt;
  return st;
}

StatusOr<std::string> ReadBootId() {
  std::string text;
  if (!ReadKernelFile("/proc/sys/kernel/random/boot_id", text))
    return ErrnoStatus("read /proc/sys/kernel/random/boot_id");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::vector<ProcStat> FindProcessesWithEnv(const std::string& env_entry) {
  return FindProcessesHolding("environ", env_entry);
}

std::vector<ProcStat> FindProcessesWithArg(const std::string& arg) { return FindProcessesHolding("cmdline", arg); }

}  // namespace tandem::backends::local

// Task cgroups: see task_cgroup.h.
#include "backends/local/task_cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "backends/local/proc_table.h"

namespace tandem::backends::local {
namespace fs = std::filesystem;
namespace {

Status WriteSmallFile(const fs::path& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path.string());
  ssize_t n;
  do n = ::write(fd, text.data(), text.size());
  while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return ErrnoStatus("write " + path.string(), n < 0 ? err : EIO);
  return Status::Ok();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(v));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> f;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) f.push_back(line.substr(i, j - i));
    i = j;
  }
  return f;
}

// Child cgroups of `cg` (directories), not recursive.
std::vector<fs::path> ChildCgroups(const fs::path& cg) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(cg, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) out.push_back(it->path());
  return out;
}

bool EventsSay(const fs::path& cg, std::string_view key) {
  std::string text;
  if (!ReadKernelFile(cg / "cgroup.events", text)) return false;
  std::istringstream in(text);
  for (std::string k, v; in >> k >> v;)
    if (k == key) return v == "1";
  return false;
}

}  // namespace

std::optional<Cgroup2Mount> FindCgroup2Mount(std::string_view mountinfo) {
  size_t pos = 0;
  while (pos < mountinfo.size()) {
    size_t end = mountinfo.find('\n', pos);
    if (end == std::string_view::npos) end = mountinfo.size();
    auto f = Fields(mountinfo.substr(pos, end - pos));
    pos = end + 1;
    // id parent maj:min root mount-point options [optional...] - fstype source super-options
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i)
      if (f[i] == "-") { dash = i; break; }
    if (dash == 0 || dash + 1 >= f.size() || f[dash + 1] != "cgroup2") continue;
    Cgroup2Mount m;
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    return m;
  }
  return std::nullopt;
}

std::optional<std::string> UnifiedCgroupPath(std::string_view proc_cgroup) {
  size_t pos = 0;
  while (pos < proc_cgroup.size()) {
    size_t end = proc_cgroup.find('\n', pos);
    if (end == std::string_view::npos) end = proc_cgroup.size();
    std::string_view line = proc_cgroup.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::string TaskCgroupName(std::string_view task_id) {
  bool safe = !task_id.empty() && task_id.size() <= 200 && task_id[0] != '.';
  for (char c : task_id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      safe = false;
  if (safe && task_id.substr(0, 7) != "cgroup.") return std::string(task_id);
  uint64_t h = 1469598103934665603ull;
  for (char c : task_id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "t-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string_view ToString(CgroupKillMethod m) {
  switch (m) {
    case CgroupKillMethod::kKillFile: return "cgroup.kill";
    case CgroupKillMethod::kFreezeAndKill: return "freeze+sigkill";
    case CgroupKillMethod::kSignalEach: return "sigkill-each";
  }
  return "?";
}

StatusOr<TaskCgroups> TaskCgroups::Open(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.rfind("tandem", 0) != 0)
    return InvalidArgument("cgroup subtree name '" + name + "' must start with \"tandem\" and hold no '/'");
  std::string text;
  if (!ReadKernelFile("/proc/self/mountinfo", text)) return ErrnoStatus("read /proc/self/mountinfo");
  auto mount = FindCgroup2Mount(text);
  if (!mount) return NotFound("no cgroup2 file system is mounted");
  if (!ReadKernelFile("/proc/self/cgroup", text)) return ErrnoStatus("read /proc/self/cgroup");
  auto own = UnifiedCgroupPath(text);
  if (!own) return NotFound("/proc/self/cgroup has no cgroup2 (\"0::\") line");
  // Our path relative to what the mount shows.
  std::string rel = *own;
  if (mount->root != "/") {
    if (rel.rfind(mount->root, 0) != 0)
      return FailedPrecondition("own cgroup " + rel + " is outside the cgroup2 mount's root " + mount->root);
    rel = rel.substr(mount->root.size());
  }
  while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
  if (rel.find("/..") != std::string::npos || rel.rfind("..", 0) == 0)
    return FailedPrecondition("own cgroup path " + *own + " is not below the cgroup2 mount");
  const fs::path own_dir = rel.empty() ? mount->mount_point : mount->mount_point / rel;
  const fs::path subtree = own_dir / name;
  if (::mkdir(subtree.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("create cgroup " + subtree.string());
  struct stat st {};
  if (::stat((subtree / "cgroup.procs").c_str(), &st) != 0)
    return ErrnoStatus(subtree.string() + " is not a cgroup2 directory");
  if (::access((subtree / "cgroup.procs").c_str(), W_OK) != 0) return ErrnoStatus("write " + subtree.string());
  CgroupKillMethod m = CgroupKillMethod::kSignalEach;
  if (::access((subtree / "cgroup.kill").c_str(), W_OK) == 0)
    m = CgroupKillMethod::kKillFile;
  else if (::access((subtree / "cgroup.freeze").c_str(), W_OK) == 0)
    m = CgroupKillMethod::kFreezeAndKill;
  return TaskCgroups(mount->mount_point, subtree, m);
}

bool TaskCgroups::IsTaskCgroup(const fs::path& cg) const {
  if (!cg.is_absolute()) return false;
  for (const auto& part : cg)
    if (part == "." || part == "..") return false;
  const fs::path parent = cg.parent_path();
  if (cg.filename().empty() || cg.filename().string().rfind("cgroup.", 0) == 0) return false;
  if (parent.filename().string().rfind("tandem", 0) != 0) return false;
  auto rel = parent.lexically_relative(mount_);
  return !rel.empty() && *rel.begin() != "..";
}

std::vector<fs::path> TaskCgroups::List() const { return ChildCgroups(subtree_); }

std::vector<pid_t> TaskCgroups::Procs(const fs::path& cg) {
  std::vector<pid_t> out;
  std::string text;
  if (ReadKernelFile(cg / "cgroup.procs", text)) {
    std::istringstream in(text);
    for (long pid; in >> pid;)
      if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  for (const auto& child : ChildCgroups(cg))
    for (pid_t p : Procs(child)) out.push_back(p);
  return out;
}

bool TaskCgroups::Populated(const fs::path& cg) { return EventsSay(cg, "populated"); }

Status TaskCgroups::Remove(const fs::path& cg) {
  for (const auto& child : ChildCgroups(cg)) TANDEM_RETURN_IF_ERROR(Remove(child));
  if (::rmdir(cg.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove cgroup " + cg.string());
  return Status::Ok();
}

Status TaskCgroups::KillAll(const fs::path& cg) const {
  struct stat st {};
  if (::stat(cg.c_str(), &st) != 0) return Status::Ok();
  switch (kill_method_) {
    case CgroupKillMethod::kKillFile:
      return WriteSmallFile(cg / "cgroup.kill", "1");
    case CgroupKillMethod::kFreezeAndKill: {
      // Frozen members cannot fork while we read them; SIGKILL ends frozen
      // processes, and thawing lets the kernel finish them off.
      TANDEM_RETURN_IF_ERROR(WriteSmallFile(cg / "cgroup.freeze", "1"));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (Populated(cg) && !EventsSay(cg, "frozen") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (pid_t p : Procs(cg)) ::kill(p, SIGKILL);
      return WriteSmallFile(cg / "cgroup.freeze", "0");
    }
    case CgroupKillMethod::kSignalEach:
      for (pid_t p : Procs(cg)) ::kill(p, SIGKILL);
      return Status::Ok();
  }
  return Status::Ok();
}

Status TaskCgroups::KillAndRemove(const fs::path& cg, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::microseconds(500);
  for (;;) {
    if (Remove(cg).ok()) return Status::Ok();
    TANDEM_RETURN_IF_ERROR(KillAll(cg), "kill cgroup " + cg.string());
    if (std::chrono::steady_clock::now() > deadline) {
      std::string pids;
      for (pid_t p : Procs(cg)) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      return DeadlineExceeded("cgroup " + cg.string() + " still holds processes after " +
                              std::to_string(timeout.count()) + " ms: " + (pids.empty() ? "(none listed)" : pids));
    }
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::microseconds(20000));
  }
}

}  // namespace tandem::backends::local

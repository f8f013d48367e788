// A task id's slot; see task_slot.h.
#include "backends/local/task_slot.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

namespace tandem::backends::local {

namespace {
constexpr std::string_view kMarkPrefix = "TANDEM_TASK_MARK=";
}  // namespace

std::string SlotScope(const std::string& cgroup_name) {
  return cgroup_name.empty() ? "tandem-" + std::to_string(::getpid()) : cgroup_name;
}

std::string SlotEntry(const std::string& scope, const std::string& task_id) {
  return std::string(kSlotKey) + "=" + scope + "/" + task_id;
}

std::vector<SlotProcess> FindSlotProcesses(const std::string& scope) {
  std::vector<SlotProcess> found;
  const std::string prefix = std::string(kSlotKey) + "=" + scope + "/";
  ForEachProcessList("environ", [&](pid_t pid, std::string_view list) {
    SlotProcess p;
    bool slot = false;
    for (size_t pos = 0; pos < list.size();) {
      size_t stop = list.find('\0', pos);
      if (stop == std::string_view::npos) stop = list.size();
      const std::string_view entry = list.substr(pos, stop - pos);
      if (!slot && entry.substr(0, prefix.size()) == prefix) {
        slot = true;
        p.task_id = std::string(entry.substr(prefix.size()));
      } else if (entry.substr(0, kMarkPrefix.size()) == kMarkPrefix) {
        p.marker = std::string(entry.substr(kMarkPrefix.size()));
      }
      pos = stop + 1;
    }
    if (!slot) return;
    auto st = ReadProcStat(pid);
    if (!st || st->dead()) return;
    p.stat = *st;
    found.push_back(std::move(p));
  });
  return found;
}

StatusOr<size_t> KillSlotProcesses(const std::string& scope, const std::function<bool(const SlotProcess&)>& victim,
                                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::microseconds(500);
  size_t found = 0;
  for (bool first = true;; first = false) {
    std::vector<ProcStat> rest;
    for (const SlotProcess& p : FindSlotProcesses(scope))
      if (victim(p)) rest.push_back(p.stat);
    if (first) found = rest.size();
    if (rest.empty()) return found;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string names;
      for (const auto& p : rest) names += (names.empty() ? "" : ", ") + std::to_string(p.pid) + " (" + p.comm + ")";
      return DeadlineExceeded("still running after " + std::to_string(timeout.count()) + " ms: " + names);
    }
    // Their process groups (inside the tasks' own sessions), then each.
    std::set<pid_t> groups;
    for (const auto& p : rest)
      if (p.pgid > 1) groups.insert(p.pgid);
    for (pid_t g : groups) ::kill(-g, SIGKILL);
    for (const auto& p : rest) ::kill(p.pid, SIGKILL);
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::microseconds(20000));
  }
}

}  // namespace tandem::backends::local

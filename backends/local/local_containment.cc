// The local backend's process containment (local_executor.h "Containment",
// docs/processes.md): choosing cgroups or the marker scan at start-up,
// emptying a task's cgroup before its exit is reported, and killing the
// cgroups no task claims after a restart. Methods of LocalExecutor.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "backends/local/local_executor.h"
#include "backends/local/task_slot.h"
#include "common/log.h"

namespace tandem::backends {

using local::ProcStat;

void LocalExecutor::SetUpContainment() {
  const char* env = std::getenv("TANDEM_CGROUPS");
  auto marker = [&](std::string reason) {
    containment_ = Containment{"marker", "", "", std::move(reason)};
    log::Warn("local", "process containment mode=marker reason=\"{}\" (descendants that leave the task's "
              "environment can escape; docs/processes.md)", containment_.reason);
  };
  if (!options_.use_cgroups) return marker("cgroups turned off by the executor's options");
  if (env && std::string_view(env) == "off") return marker("cgroups turned off by TANDEM_CGROUPS=off");
  if (env && *env && std::string_view(env) != "auto")
    log::Warn("local", "TANDEM_CGROUPS={} is neither auto nor off: using auto", env);
  std::string name = options_.cgroup_name.empty() ? "tandem-" + std::to_string(::getpid()) : options_.cgroup_name;
  auto tree = local::TaskCgroups::Open(name);
  if (!tree.ok()) return marker(tree.status().ToString());
  // Only a real move proves we may put processes in: the shim joins a probe cgroup.
  const auto probe = tree->subtree() / ("probe-" + std::to_string(::getpid()));
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST)
    return marker(ErrnoStatus("create cgroup " + probe.string()).ToString());
  std::string shim = options_.exec_shim.string(), flag = "--probe-cgroup", dir = probe.string();
  char* argv[] = {shim.data(), flag.data(), dir.data(), nullptr};
  char* envp[] = {nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  int wstatus = 0;
  if (rc == 0) {
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {}
  }
  (void)local::TaskCgroups::Remove(probe);
  if (rc != 0) return marker(ErrnoStatus("spawn the cgroup probe", rc).ToString());
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    return marker("the exec shim cannot move a process into " + probe.string() + " (see its stderr)");
  // Leftovers of an earlier executor with this subtree are re-attached or go
  // in KillUnclaimed(), empty ones too: an empty cgroup may be a task's
  // whose shim has not moved its command in yet.
  cgroups_ = std::move(tree).value();
  containment_ = Containment{"cgroup", cgroups_->subtree().string(), std::string(ToString(cgroups_->kill_method())), ""};
  log::Info("local", "process containment mode=cgroup cgroup={} kill={} leftovers={}", containment_.cgroup,
            containment_.kill_method, cgroups_->List().size());
}

nlohmann::json Containment::ToJson() const {
  nlohmann::json j = {{"mode", mode}};
  if (mode == "cgroup") {
    j["cgroup"] = cgroup;
    j["kill"] = kill_method;
  } else {
    j["reason"] = reason;
  }
  return j;
}

void LocalExecutor::ForceCgroupKillMethod(local::CgroupKillMethod m) {
  if (!cgroups_) return;
  cgroups_->set_kill_method(m);
  containment_.kill_method = std::string(ToString(m));
}

std::filesystem::path LocalExecutor::CgroupOf(const TaskRef& ref) const {
  const nlohmann::json& data = ref.data;
  if (!cgroups_ || !data.is_object() || !data.contains("cgroup") || !data["cgroup"].is_string()) return {};
  std::filesystem::path cg = data["cgroup"].get<std::string>();
  if (!cgroups_->IsTaskCgroup(cg)) {
    log::Warn("local", "ignoring a task ref's cgroup outside any tandem subtree cgroup={}", cg.string());
    return {};
  }
  // A task's cgroup is named after its id: a ref naming another task's cgroup
  // (a copied or stale record) must never kill that task.
  if (cg.filename() != local::TaskCgroupName(ref.task_id)) {
    log::Warn("local", "ignoring a task ref's cgroup named for another task task={} cgroup={}", ref.task_id,
              cg.string());
    return {};
  }
  return cg;
}

std::vector<ProcStat> LocalExecutor::TaskProcesses(const std::filesystem::path& cgroup,
                                                  const std::string& mark_entry) {
  if (cgroup.empty()) return local::FindProcessesWithEnv(mark_entry);
  std::vector<ProcStat> out;
  for (pid_t p : local::TaskCgroups::Procs(cgroup))
    if (auto st = local::ReadProcStat(p); st && !st->dead()) out.push_back(*st);
  return out;
}

namespace {
// In marker mode (no cgroups): kills every process of this executor's slots
// (task_slot.h) that no supervised run claims by its task id and marker: the
// copy a daemon killed between a start and its journal record left, and
// what runs that ended while no executor watched left behind. The daemon
// calls it before it launches anything after a restart.
size_t KillUnclaimedSlots(const std::string& scope, const std::set<std::pair<std::string, std::string>>& claimed,
                          std::chrono::milliseconds timeout) {
  std::map<std::string, size_t> by_task;
  auto victim = [&](const local::SlotProcess& p) { return !claimed.count({p.task_id, p.marker}); };
  for (const local::SlotProcess& p : local::FindSlotProcesses(scope))
    if (victim(p)) ++by_task[p.task_id];
  if (by_task.empty()) return 0;
  auto n = local::KillSlotProcesses(scope, victim, timeout);
  if (!n.ok()) log::Error("local", "cannot kill processes of no known run scope={}: {}", scope, n.status().ToString());
  for (const auto& [task, count] : by_task)
    log::Warn("local", "killed processes of an earlier run task={} processes={} (no known run)", task, count);
  return by_task.size();
}
}  // namespace

size_t LocalExecutor::KillUnclaimed() {
  if (!cgroups_) {
    std::set<std::pair<std::string, std::string>> claimed;
    for (const auto& [pid, t] : tracked_) claimed.insert({t.task_id, t.marker});
    return KillUnclaimedSlots(local::SlotScope(options_.cgroup_name), claimed, options_.kill_timeout);
  }
  std::set<std::filesystem::path> claimed;
  for (const auto& [pid, t] : tracked_) claimed.insert(t.cgroup);
  for (const auto& [id, d] : drains_) claimed.insert(d->cgroup);
  size_t killed = 0;
  for (const auto& cg : cgroups_->List()) {
    if (claimed.count(cg)) continue;
    const size_t n = local::TaskCgroups::Procs(cg).size();
    Status st = cgroups_->KillAndRemove(cg, options_.kill_timeout);
    if (!st.ok()) {
      log::Error("local", "cannot clean up unclaimed cgroup={}: {}", cg.string(), st.ToString());
      continue;
    }
    if (n > 0) {
      ++killed;
      log::Warn("local", "killed processes of no known task cgroup={} processes={}", cg.string(), n);
    }
  }
  return killed;
}

void LocalExecutor::DrainThenReport(std::filesystem::path cgroup, std::string task_id, TaskExit exit) {
  // The common case, nothing left behind: one rmdir, and the report now.
  if (cgroup.empty() || local::TaskCgroups::Remove(cgroup).ok()) {
    on_exit_(task_id, exit);
    return;
  }
  auto d = std::make_unique<DrainState>();
  d->processes = local::TaskCgroups::Procs(cgroup).size();
  if (Status st = cgroups_->KillAll(cgroup); !st.ok())
    log::Error("local", "kill leftovers task={} cgroup={}: {}", task_id, cgroup.string(), st.ToString());
  d->cgroup = std::move(cgroup);
  d->task_id = std::move(task_id);
  d->exit = std::move(exit);
  d->deadline = std::chrono::steady_clock::now() + options_.kill_timeout;
  d->timer = std::make_unique<boost::asio::steady_timer>(io_);
  const uint64_t id = next_serial_++;
  drains_.emplace(id, std::move(d));
  PollDrain(id);
}

void LocalExecutor::PollDrain(uint64_t id) {
  auto it = drains_.find(id);
  if (it == drains_.end()) return;
  DrainState& d = *it->second;
  const bool gone = local::TaskCgroups::Remove(d.cgroup).ok();
  if (gone || std::chrono::steady_clock::now() > d.deadline) {
    if (gone) {
      log::Info("local", "killed processes left behind by an ended task task={} processes={}", d.task_id,
                d.processes);
    } else {
      log::Error("local", "processes of ended task={} survive in cgroup={} after {} ms (they are killed again "
                 "on its next start and at daemon start)", d.task_id, d.cgroup.string(),
                 options_.kill_timeout.count());
    }
    std::string task_id = std::move(d.task_id);
    TaskExit exit = std::move(d.exit);
    drains_.erase(it);
    on_exit_(task_id, exit);
    return;
  }
  if (Status st = cgroups_->KillAll(d.cgroup); !st.ok())
    log::Debug("local", "kill leftovers task={}: {}", d.task_id, st.ToString());
  d.timer->expires_after(d.step);
  d.step = std::min(d.step * 2, std::chrono::milliseconds(20));
  d.timer->async_wait([weak = std::weak_ptr<int>(alive_), this, id](const boost::system::error_code& ec) {
    if (!weak.lock() || ec) return;
    PollDrain(id);
  });
}

}  // namespace tandem::backends

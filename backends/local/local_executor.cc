// LocalExecutor: see local_executor.h.
#include "backends/local/local_executor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "backends/local/exit_record.h"
#include "backends/local/proc_table.h"
#include "backends/local/task_slot.h"
#include "common/control/control_token.h"
#include "common/hex.h"
#include "common/log.h"

namespace tandem::backends {
namespace {

using local::ProcStat;

constexpr std::string_view kMarkKey = "TANDEM_TASK_MARK";

// The local part of a TaskRef.
struct LocalRef {
  pid_t pid = 0;
  pid_t pgid = 0;
  uint64_t start_time = 0;
  std::string boot_id;
  std::string marker;
  std::filesystem::path exit_path;
  std::filesystem::path cgroup;  // as recorded; checked by CgroupOf before use

  std::string mark_entry() const { return std::string(kMarkKey) + "=" + marker; }
};

StatusOr<LocalRef> ParseRef(const TaskRef& ref) {
  const auto& d = ref.data;
  auto bad = [&](const char* what) {
    return InvalidArgument("local task ref " + ref.task_id + ": " + what);
  };
  if (ref.backend != "local") return bad("backend is not \"local\"");
  if (!d.is_object()) return bad("data is not an object");
  LocalRef r;
  if (!d.contains("pid") || !d["pid"].is_number_integer() || d["pid"].get<int64_t>() <= 1)
    return bad("expected data.pid > 1");
  r.pid = static_cast<pid_t>(d["pid"].get<int64_t>());
  r.pgid = d.contains("pgid") && d["pgid"].is_number_integer()
               ? static_cast<pid_t>(d["pgid"].get<int64_t>()) : r.pid;
  if (!d.contains("start_time") || !d["start_time"].is_number_unsigned())
    return bad("expected data.start_time (unsigned)");
  r.start_time = d["start_time"].get<uint64_t>();
  if (!d.contains("boot_id") || !d["boot_id"].is_string()) return bad("expected data.boot_id");
  r.boot_id = d["boot_id"].get<std::string>();
  if (!d.contains("marker") || !d["marker"].is_string() || d["marker"].get<std::string>().size() < 16)
    return bad("expected data.marker");
  r.marker = d["marker"].get<std::string>();
  if (d.contains("exit_path") && d["exit_path"].is_string())
    r.exit_path = d["exit_path"].get<std::string>();
  if (d.contains("cgroup") && d["cgroup"].is_string()) r.cgroup = d["cgroup"].get<std::string>();
  return r;
}

StatusOr<std::string> RandomMarker() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("getrandom");
    got += static_cast<size_t>(n);
  }
  return HexEncode(b, sizeof b);
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// The running process `r.pid` is the task's shim (same boot, same start time).
std::optional<ProcStat> ShimIfAlive(const LocalRef& r, const std::string& boot_id) {
  if (r.boot_id != boot_id) return std::nullopt;
  auto st = local::ReadProcStat(r.pid);
  if (!st || st->start_time != r.start_time || st->dead()) return std::nullopt;
  return st;
}

// Holds posix_spawn's C structures and frees them on every path.
struct SpawnArgs {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  SpawnArgs() {
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
  }
  ~SpawnArgs() {
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
};

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A relaunch: the request's TANDEM_CONTROL_LAUNCH (the daemon's launch
// number, common/control/control_token.h) is above 1.
bool IsRelaunch(const LaunchRequest& req) {
  const std::string key = std::string(control::kLaunchEnv) + "=";
  for (const auto& e : req.env)
    if (e.compare(0, key.size(), key) == 0) return std::atoll(e.c_str() + key.size()) > 1;
  return false;
}

// The shims supervised by every executor of this process. The orphan reaper
// leaves these to their own executor, which reaps them through their pidfds.
class SupervisedPids {
 public:
  static void Add(pid_t pid) {
    std::lock_guard lock(mu());
    pids().insert(pid);
  }
  static void Remove(pid_t pid) {
    std::lock_guard lock(mu());
    pids().erase(pid);
  }
  static bool Contains(pid_t pid) {
    std::lock_guard lock(mu());
    return pids().count(pid) > 0;
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::unordered_set<pid_t>& pids() {
    static std::unordered_set<pid_t> p;
    return p;
  }
};

// Whether a pidfd is readable now: its process ended.
bool PidfdReadable(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, 0) != 0;
}

void SleepBackoff(std::chrono::microseconds& step) {
  std::this_thread::sleep_for(step);
  step = std::min(step * 2, std::chrono::microseconds(20000));
}

}  // namespace

Status EnableChildSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return ErrnoStatus("prctl(PR_SET_CHILD_SUBREAPER)");
  return Status::Ok();
}

StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::Create(boost::asio::io_context& io,
                                                               ExitCallback on_exit,
                                                               LocalExecutorOptions options) {
  if (options.exec_shim.empty()) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return Internal("local executor: cannot read /proc/self/exe: " + ec.message());
    options.exec_shim = self.parent_path() / "tandem-exec";
  }
  if (::access(options.exec_shim.c_str(), X_OK) != 0)
    return ErrnoStatus("local executor: exec shim " + options.exec_shim.string());
  TANDEM_ASSIGN_OR_RETURN(std::string boot_id, local::ReadBootId(), "local executor");
  std::unique_ptr<LocalExecutor> self(
      new LocalExecutor(io, std::move(on_exit), std::move(options), std::move(boot_id)));
  self->SetUpContainment();  // local_containment.cc
  return self;
}

LocalExecutor::LocalExecutor(boost::asio::io_context& io, ExitCallback on_exit,
                             LocalExecutorOptions options, std::string boot_id)
    : io_(io), on_exit_(std::move(on_exit)), options_(std::move(options)), boot_id_(std::move(boot_id)) {
  if (options_.reap_orphans) {
    sigchld_ = std::make_unique<boost::asio::signal_set>(io_, SIGCHLD);
    WaitForChildren();
    boost::asio::post(io_, [weak = std::weak_ptr<int>(alive_), this] {
      if (weak.lock()) ReapOrphans();  // children that exited before we listened
    });
  }
}

LocalExecutor::~LocalExecutor() {
  alive_.reset();
  if (sigchld_) {
    boost::system::error_code ignored;
    sigchld_->cancel(ignored);
  }
  for (const auto& [pid, t] : tracked_) SupervisedPids::Remove(pid);
  tracked_.clear();  // closes the pidfds; the tasks keep running
  drains_.clear();   // their cgroups are emptied by the next executor (start-up, KillUnclaimed)
  if (cgroups_) (void)::rmdir(cgroups_->subtree().c_str());  // only when no task cgroup is left
}

StatusOr<TaskRef> LocalExecutor::Start(const LaunchRequest& req) {
  if (req.argv.empty() || req.argv[0].empty())
    return InvalidArgument("start task " + req.task_id + ": empty command");
  TANDEM_ASSIGN_OR_RETURN(std::string marker, RandomMarker(), "start task " + req.task_id);

  std::filesystem::path exit_path = req.exit_path;
  if (!exit_path.empty() && exit_path.is_relative()) exit_path = std::filesystem::absolute(exit_path);

  // The task's cgroup. One left by an earlier launch of this task id (a
  // relaunch after a daemon crash) is emptied first: the old run ends before
  // the new one begins.
  std::filesystem::path cgroup;
  if (cgroups_) {
    cgroup = cgroups_->PathFor(req.task_id);
    if (::mkdir(cgroup.c_str(), 0755) != 0) {
      if (errno != EEXIST) return ErrnoStatus("start task " + req.task_id + ": create cgroup " + cgroup.string());
      const size_t n = local::TaskCgroups::Procs(cgroup).size();
      TANDEM_RETURN_IF_ERROR(cgroups_->KillAndRemove(cgroup, options_.kill_timeout),
                             "start task " + req.task_id + ": empty its earlier cgroup");
      if (n > 0) log::Warn("local", "killed processes of an earlier run task={} processes={}", req.task_id, n);
      if (::mkdir(cgroup.c_str(), 0755) != 0)
        return ErrnoStatus("start task " + req.task_id + ": create cgroup " + cgroup.string());
    }
  } else if (IsRelaunch(req)) {
    // Marker mode: what an earlier run of this task id left behind goes
    // first (task_slot.h); a daemon's crash copies went in KillUnclaimed().
    const std::string scope = local::SlotScope(options_.cgroup_name);
    TANDEM_ASSIGN_OR_RETURN(
        size_t n,
        local::KillSlotProcesses(scope, [&](const local::SlotProcess& p) { return p.task_id == req.task_id; },
                                 options_.kill_timeout),
        "start task " + req.task_id + ": kill its earlier run");
    if (n > 0) log::Warn("local", "killed processes of an earlier run task={} processes={}", req.task_id, n);
  }

  std::vector<std::string> argv;
  argv.reserve(req.argv.size() + 6);
  argv.push_back(options_.exec_shim.string());
  if (!exit_path.empty()) {
    argv.push_back("--exit-path");
    argv.push_back(exit_path.string());
  }
  if (!cgroup.empty()) {
    argv.push_back("--cgroup");
    argv.push_back(cgroup.string());
  }
  argv.push_back("--");
  argv.insert(argv.end(), req.argv.begin(), req.argv.end());

  std::vector<std::string> env;
  env.reserve(req.env.size() + 2);
  const std::string mark_prefix = std::string(kMarkKey) + "=";
  const std::string slot_prefix = std::string(local::kSlotKey) + "=";
  for (const auto& e : req.env)
    if (e.compare(0, mark_prefix.size(), mark_prefix) != 0 && e.compare(0, slot_prefix.size(), slot_prefix) != 0)
      env.push_back(e);
  env.push_back(mark_prefix + marker);
  env.push_back(local::SlotEntry(local::SlotScope(options_.cgroup_name), req.task_id));

  SpawnArgs sp;
  const char* out = req.stdout_path.empty() ? "/dev/null" : req.stdout_path.c_str();
  const char* err = req.stderr_path.empty() ? "/dev/null" : req.stderr_path.c_str();
  const int wflags = O_WRONLY | O_CREAT | O_APPEND;
  posix_spawn_file_actions_addopen(&sp.fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&sp.fa, STDOUT_FILENO, out, wflags, 0600);  // output may echo the environment
  posix_spawn_file_actions_addopen(&sp.fa, STDERR_FILENO, err, wflags, 0600);
  posix_spawn_file_actions_addclosefrom_np(&sp.fa, STDERR_FILENO + 1);
  if (!req.cwd.empty()) posix_spawn_file_actions_addchdir_np(&sp.fa, req.cwd.c_str());
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&sp.attr, &none);
  posix_spawnattr_setsigdefault(&sp.attr, &all);
  posix_spawnattr_setflags(&sp.attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  auto cargv = CStrings(argv);
  auto cenv = CStrings(env);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &sp.fa, &sp.attr, cargv.data(), cenv.data());
  if (rc != 0 && !cgroup.empty()) (void)local::TaskCgroups::Remove(cgroup);
  if (rc != 0)
    return ErrnoStatus("start task " + req.task_id + " (stdout " + std::string(out) + ", cwd " +
                           req.cwd.string() + ")", rc);

  int pidfd = PidfdOpen(pid);  // our unreaped child: cannot fail with ESRCH
  if (pidfd < 0) {
    Status st = ErrnoStatus("start task " + req.task_id + ": pidfd_open");
    ::kill(pid, SIGKILL);
    siginfo_t si{};
    ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED);
    if (!cgroup.empty()) (void)cgroups_->KillAndRemove(cgroup, options_.kill_timeout);
    return st;
  }
  auto stat = local::ReadProcStat(pid);  // a zombie keeps its stat until reaped

  TaskRef ref;
  ref.backend = "local";
  ref.task_id = req.task_id;
  ref.data = {{"pid", pid},
              {"pgid", pid},
              {"sid", pid},
              {"start_time", stat ? stat->start_time : uint64_t{0}},
              {"boot_id", boot_id_},
              {"marker", marker},
              {"exit_path", exit_path.string()}};
  if (!cgroup.empty()) ref.data["cgroup"] = cgroup.string();
  Supervise(pid, pidfd, req.task_id, exit_path, marker, cgroup);
  log::Debug("local", "task started task={} pid={}", req.task_id, pid);
  return ref;
}

void LocalExecutor::Supervise(pid_t pid, int pidfd, const std::string& task_id,
                              const std::filesystem::path& exit_path, const std::string& marker,
                              const std::filesystem::path& cgroup) {
  Tracked t;
  t.task_id = task_id;
  t.exit_path = exit_path;
  t.marker = marker;
  t.cgroup = cgroup;
  t.serial = next_serial_++;
  t.pidfd = std::make_unique<boost::asio::posix::stream_descriptor>(io_, pidfd);
  tracked_.insert_or_assign(pid, std::move(t));
  SupervisedPids::Add(pid);
  Watch(pid);
}

void LocalExecutor::Watch(pid_t pid) {
  Tracked& t = tracked_.at(pid);
  t.pidfd->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                      [weak = std::weak_ptr<int>(alive_), this, pid, serial = t.serial](
                          const boost::system::error_code& ec) {
                        if (!weak.lock() || ec == boost::asio::error::operation_aborted) return;
                        if (ec) log::Warn("local", "pid={}: waiting on its pidfd: {}", pid, ec.message());
                        OnEnded(pid, serial);
                      });
}

void LocalExecutor::OnEnded(pid_t pid, uint64_t serial) {
  auto it = tracked_.find(pid);
  if (it == tracked_.end() || it->second.serial != serial) return;
  Tracked& live = it->second;
  const int fd = live.pidfd->native_handle();

  // A wakeup whose pidfd is not readable is not an exit: asio hands the state
  // of a descriptor that a handler closed, with the events epoll had found for
  // it, to the next descriptor opened (a task's pidfd), and then processes
  // them (local_executor_test, WakeupTest).
  if (!PidfdReadable(fd)) {
    log::Warn("local", "task={} pid={}: woken while it runs; watching on", live.task_id, pid);
    WatchAgainSoon(pid, serial);
    return;
  }
  // Reap it if it is our child (ECHILD otherwise: a re-attached task).
  siginfo_t si{};
  const bool waited = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(fd), &si, WEXITED | WNOHANG) == 0 &&
                      si.si_pid != 0;
  Tracked t = std::move(it->second);
  tracked_.erase(it);
  SupervisedPids::Remove(pid);

  TaskExit exit;
  if (auto rec = local::ReadExitRecord(t.exit_path, t.marker)) {
    exit = *rec;
  } else if (waited) {
    exit = local::ExitFromSiginfo(si);
    if (!t.exit_path.empty()) exit.detail += exit.detail.empty() ? "no exit record" : "; no exit record";
  } else {
    exit.status_known = false;
    exit.ended_at = std::chrono::system_clock::now();
    exit.detail = "ended unsupervised by its parent; no exit record";
  }
  t.pidfd.reset();  // close before the callback may start more tasks
  log::Debug("local", "task ended task={} pid={} code={} signal={}", t.task_id, pid, exit.exit_code,
             exit.signal);
  DrainThenReport(t.cgroup, t.task_id, std::move(exit));
}

void LocalExecutor::WatchAgainSoon(pid_t pid, uint64_t serial) {
  auto& timer = tracked_.at(pid).rewatch;
  if (!timer) timer = std::make_unique<boost::asio::steady_timer>(io_);
  timer->expires_after(std::chrono::milliseconds(5));  // a wait that fails at once cannot spin the io thread
  timer->async_wait([weak = std::weak_ptr<int>(alive_), this, pid, serial](const boost::system::error_code& ec) {
    if (!weak.lock() || ec) return;
    auto it = tracked_.find(pid);
    if (it == tracked_.end() || it->second.serial != serial) return;
    Watch(pid);
    // An exit between the wakeup and this wait raised no event for it.
    if (PidfdReadable(it->second.pidfd->native_handle())) OnEnded(pid, serial);
  });
}

void LocalExecutor::WaitForChildren() {
  sigchld_->async_wait([weak = std::weak_ptr<int>(alive_), this](const boost::system::error_code& ec,
                                                                 int) {
    if (!weak.lock() || ec) return;
    ReapOrphans();
    WaitForChildren();
  });
}

void LocalExecutor::ReapOrphans() {
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
    auto it = tracked_.find(si.si_pid);
    if (it != tracked_.end()) {
      OnEnded(si.si_pid, it->second.serial);  // reaps it through its pidfd
      continue;
    }
    if (SupervisedPids::Contains(si.si_pid)) {
      // Another executor's shim: its own pidfd handler reaps it. waitid
      // shows the first zombie only, so look again once it has.
      if (!reap_retry_) reap_retry_ = std::make_unique<boost::asio::steady_timer>(io_);
      reap_retry_->expires_after(std::chrono::milliseconds(2));
      reap_retry_->async_wait([weak = std::weak_ptr<int>(alive_), this](const boost::system::error_code& ec) {
        if (weak.lock() && !ec) ReapOrphans();
      });
      return;
    }
    siginfo_t gone{};
    ::waitid(P_PID, static_cast<id_t>(si.si_pid), &gone, WEXITED | WNOHANG);
    log::Debug("local", "reaped orphan pid={}", si.si_pid);
  }
}

Status LocalExecutor::Signal(const TaskRef& ref, int sig) {
  TANDEM_ASSIGN_OR_RETURN(LocalRef r, ParseRef(ref), "signal");
  auto shim = ShimIfAlive(r, boot_id_);
  const bool via_shim = shim && (sig == SIGTERM || sig == SIGINT || sig == SIGHUP);
  if (via_shim) ::kill(-r.pgid, sig);  // the shim forwards to the command's group

  // The command's own group: the group of the shim's direct child. The
  // task's processes: its cgroup's members, else those with its marker.
  auto procs = TaskProcesses(CgroupOf(ref), r.mark_entry());
  pid_t command_group = 0;
  if (shim)
    for (const auto& p : procs)
      if (p.ppid == r.pid) command_group = p.pgid;
  if (command_group > 1 && !via_shim) ::kill(-command_group, sig);
  for (const auto& p : procs) {
    if (shim && p.pid == r.pid) continue;
    if (command_group > 1 && p.pgid == command_group) continue;
    ::kill(p.pid, sig);  // left the command's group or session
  }
  return Status::Ok();
}

Status LocalExecutor::Kill(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(LocalRef r, ParseRef(ref), "kill");
  const auto deadline = std::chrono::steady_clock::now() + options_.kill_timeout;
  const std::string entry = r.mark_entry();
  const std::filesystem::path cgroup = CgroupOf(ref);
  auto step = std::chrono::microseconds(500);
  std::optional<std::chrono::steady_clock::time_point> shim_alone_since;
  for (;;) {
    auto shim = ShimIfAlive(r, boot_id_);
    bool left = false;
    if (!cgroup.empty()) {
      // Everything the command started is in its cgroup; the shim is not.
      left = local::TaskCgroups::Populated(cgroup);
      if (left) {
        if (Status st = cgroups_->KillAll(cgroup); !st.ok())
          log::Warn("local", "kill task={} cgroup={}: {}", ref.task_id, cgroup.string(), st.ToString());
      }
    } else {
      std::vector<ProcStat> rest;
      for (auto& p : local::FindProcessesWithEnv(entry))
        if (!(shim && p.pid == r.pid)) rest.push_back(p);
      left = !rest.empty();
      std::set<pid_t> groups;
      for (const auto& p : rest)
        if (p.pgid > 1 && p.pgid != r.pgid) groups.insert(p.pgid);
      for (pid_t g : groups) ::kill(-g, SIGKILL);
      for (const auto& p : rest) ::kill(p.pid, SIGKILL);
    }

    if (!left) {
      if (!shim) {
        if (!cgroup.empty()) (void)local::TaskCgroups::Remove(cgroup);
        return Status::Ok();
      }
      // Only the shim is left: it writes the exit record and exits by itself
      // once its command is gone; after a short grace it is killed too.
      auto now = std::chrono::steady_clock::now();
      if (!shim_alone_since) shim_alone_since = now;
      if (now - *shim_alone_since > std::chrono::milliseconds(200)) ::kill(r.pid, SIGKILL);
    } else {
      shim_alone_since.reset();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<ProcStat> rest = TaskProcesses(cgroup, entry);
      std::string names;
      if (shim) rest.push_back(*shim);
      for (const auto& p : rest)
        names += (names.empty() ? "" : ", ") + std::to_string(p.pid) + " (" + p.comm + ")";
      return DeadlineExceeded("kill task " + ref.task_id + ": still running after " +
                              std::to_string(options_.kill_timeout.count()) + " ms: " + names);
    }
    SleepBackoff(step);
  }
}

Status LocalExecutor::Reattach(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(LocalRef r, ParseRef(ref), "reattach");
  auto it = tracked_.find(r.pid);
  if (it != tracked_.end()) {
    if (it->second.task_id == ref.task_id) return Status::Ok();  // already supervised
    return AlreadyExists("reattach " + ref.task_id + ": pid " + std::to_string(r.pid) +
                         " is supervised as task " + it->second.task_id);
  }

  // Open the pidfd first, then check identity: the pidfd pins the process,
  // so a match afterwards proves it refers to the task and not a recycled pid.
  int pidfd = r.boot_id == boot_id_ ? PidfdOpen(r.pid) : -1;
  if (pidfd >= 0) {
    auto st = local::ReadProcStat(r.pid);
    if (st && st->start_time == r.start_time) {
      Supervise(r.pid, pidfd, ref.task_id, r.exit_path, r.marker, CgroupOf(ref));
      log::Info("local", "task reattached task={} pid={}", ref.task_id, r.pid);
      return Status::Ok();
    }
    ::close(pidfd);
  }
  // Gone (or a different process now holds the pid): report what is known.
  boost::asio::post(io_, [weak = std::weak_ptr<int>(alive_), this, task_id = ref.task_id,
                          exit_path = r.exit_path, marker = r.marker, cgroup = CgroupOf(ref)] {
    if (!weak.lock()) return;
    TaskExit exit;
    if (auto rec = local::ReadExitRecord(exit_path, marker)) {
      exit = *rec;
    } else {
      exit.status_known = false;
      exit.ended_at = std::chrono::system_clock::now();
      exit.detail = "ended while the daemon was down; no exit record";
    }
    DrainThenReport(cgroup, task_id, std::move(exit));  // what it left behind (a kill -9'd shim's command) goes
  });
  log::Info("local", "task gone on reattach task={} pid={}", ref.task_id, r.pid);
  return Status::Ok();
}

bool LocalExecutor::Alive(const TaskRef& ref) {
  auto r = ParseRef(ref);
  return r.ok() && ShimIfAlive(*r, boot_id_).has_value();
}

}  // namespace tandem::backends

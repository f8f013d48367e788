// Launch: one task's ports, environment, files and the executor's Start
// (job_manager.h; the environment order is backends/task_env.h's).
#include "orchestrator/daemon/job_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/task_env.h"
#include "common/log.h"
#include "orchestrator/store/durable_file.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

fs::path TaskFile(const Job& job, const Task& task, const char* ext) {
  return fs::path(job.run_dir) / "tasks" / (task.name + ext);
}
}  // namespace

JobManager::Launch JobManager::LaunchTask(Job& job, Task& task) {
  const spec::JobSpec& sp = SpecOf(job);
  const spec::RoleSpec* role = sp.FindRole(task.role);
  if (!role) {
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
            {"detail", "spec no longer parses for role " + task.role}});
    StopJob(job, "task " + task.name + " could not be launched");
    return Launch::kFailed;
  }
  std::vector<int> ports;
  if (role->ports > 0) {
    auto leased = ports_.Lease(task.id, role->ports);
    if (!leased.ok()) {
      Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
              {"detail", leased.status().message()}});
      StopJob(job, "task " + task.name + ": no ports");
      return Launch::kFailed;
    }
    ports = *leased;
  }
  backends::TaskEnvInput in;
  in.job_env = sp.env;
  in.role_env = role->env;
  if (!role->replica_env.empty()) in.replica_env = role->replica_env.at(static_cast<size_t>(task.rank));
  in.job_id = job.id;
  in.task_id = task.id;
  in.role = task.role;
  in.rank = task.rank;
  in.world_size = task.world_size;
  in.ports = ports;
  in.run_dir = job.run_dir;
  in.logical_devices = task.logical_devices;
  in.physical_devices = task.physical_devices;
  in.control = opts_.control_endpoint;
  if (opts_.control_env) {
    in.task_overrides = opts_.control_env(job.backend, job.id, task.id, task.launches + 1);
    if (auto c = in.task_overrides.find("TANDEM_CONTROL"); c != in.task_overrides.end()) {
      in.control = c->second;
      in.task_overrides.erase(c);
    }
  }

  backends::LaunchRequest req;
  req.job_id = job.id;
  req.task_id = task.id;
  req.argv = role->command;
  if (!role->worker.empty()) {
    req.argv = {opts_.worker_binary.empty() ? std::string("tandem-worker") : opts_.worker_binary, role->worker};
    req.argv.insert(req.argv.end(), role->args.begin(), role->args.end());
  }
  req.env = backends::BuildTaskEnvironment(in);
  req.cwd = role->cwd.empty() ? fs::path(job.run_dir) : fs::path(job.run_dir) / role->cwd;
  req.stdout_path = TaskFile(job, task, ".out");
  req.stderr_path = TaskFile(job, task, ".err");
  req.exit_path = TaskFile(job, task, ".exit");
  std::error_code ec;
  fs::remove(req.exit_path, ec);
  // Output may echo the spec's environment: 0600 (the executor appends to what is there).
  // Not for Redis jobs: an agent writes them on its node, under its own run root, 0600
  // (the local executor's mode); a file here would hide the agent's from `tandem logs`.
  if (job.backend != "redis") {
    for (const fs::path& p : {req.stdout_path, req.stderr_path}) {
      store::UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (fd) (void)::fchmod(fd.get(), 0600);
    }
  }

  backends::Executor* ex = ExecutorOf(job);
  auto started = ex ? ex->Start(req) : StatusOr<backends::TaskRef>(FailedPrecondition("backend \"" + job.backend + "\" is not enabled in this daemon"));
  if (!started.ok()) {
    ports_.Release(task.id);
    if (backends::IsRetryableStart(started.status())) {  // nothing started: wait for capacity
      MarkWaiting(job, task, started.status().message());
      return started.status().code() == StatusCode::kUnavailable ? Launch::kBackendDown : Launch::kWaiting;
    }
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
            {"detail", started.status().message()}});
    StopJob(job, "task " + task.name + " could not be launched");
    return Launch::kFailed;
  }
  metrics_.task_launches->Get().Inc();
  if (task.launches == 0)
    metrics_.launch_latency->Get().Observe(static_cast<double>(NowMs() - job.submitted_ms) / 1000.0);
  Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "running"},
          {"detail", ""}, {"ref", started->ToJson()}, {"ports", ports},
          {"launches", task.launches + 1}});
  return Launch::kStarted;
}

}  // namespace tandem::daemon

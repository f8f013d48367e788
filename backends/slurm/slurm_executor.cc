// SlurmExecutor: see slurm_executor.h.
#include "backends/slurm/slurm_executor.h"

#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <boost/asio/post.hpp>

#include "backends/local/exit_record.h"
#include "backends/slurm/end_reason.h"
#include "backends/slurm/hostlist.h"
#include "backends/slurm/slurm_cli.h"
#include "backends/slurm/step_control.h"
#include "backends/task_env.h"
#include "common/log.h"

namespace tandem::backends {
namespace {

struct SlurmRef {
  std::string job_id;
  std::string step_name;
  std::filesystem::path exit_path;
  std::string marker;
  TaskRef local;
};

StatusOr<SlurmRef> ParseRef(const TaskRef& ref) {
  const auto& d = ref.data;
  auto bad = [&](const char* what) { return InvalidArgument("slurm task ref " + ref.task_id + ": " + what); };
  if (ref.backend != "slurm") return bad("backend is not \"slurm\"");
  if (!d.is_object()) return bad("data is not an object");
  SlurmRef r;
  if (!d.contains("job_id") || !d["job_id"].is_string() || d["job_id"].get<std::string>().empty())
    return bad("expected data.job_id");
  r.job_id = d["job_id"].get<std::string>();
  if (!d.contains("step_name") || !d["step_name"].is_string()) return bad("expected data.step_name");
  r.step_name = d["step_name"].get<std::string>();
  if (d.contains("exit_path") && d["exit_path"].is_string()) r.exit_path = d["exit_path"].get<std::string>();
  if (d.contains("marker") && d["marker"].is_string()) r.marker = d["marker"].get<std::string>();
  if (!d.contains("local") || !d["local"].is_object()) return bad("expected data.local");
  r.local.backend = "local";
  r.local.task_id = ref.task_id;
  r.local.data = d["local"];
  return r;
}

std::string RandomHex8() {
  uint32_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) v = static_cast<uint32_t>(::getpid()) ^ static_cast<uint32_t>(clock());
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// srun expands %j, %s, ... in --output/--error; "%%" is a literal '%'.
std::string SrunFilename(const std::filesystem::path& p) {
  std::string out;
  for (char c : p.string()) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

bool HasEnv(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

std::set<int> DeviceSet(const std::string& cvd) {
  std::set<int> out;
  auto ids = slurm::ParseIndexList(cvd);
  if (ids.ok()) out.insert(ids->begin(), ids->end());
  return out;
}

std::filesystem::path Sibling(const std::filesystem::path& p, const std::string& suffix) {
  return p.empty() ? p : std::filesystem::path(p.string() + suffix);
}

}  // namespace

StatusOr<std::unique_ptr<SlurmExecutor>> SlurmExecutor::Create(boost::asio::io_context& io,
                                                               ExitCallback on_exit,
                                                               SlurmExecutorOptions options) {
  if (options.job_id.empty()) return InvalidArgument("slurm executor: no allocation job id");
  if (!slurm::HaveCommand("srun")) return FailedPrecondition("slurm executor: srun is not in PATH");
  std::unique_ptr<SlurmExecutor> self(new SlurmExecutor(io, std::move(on_exit), std::move(options)));
  LocalExecutorOptions lopts;
  lopts.exec_shim = self->options_.exec_shim;
  auto* raw = self.get();
  TANDEM_ASSIGN_OR_RETURN(self->local_,
                          LocalExecutor::Create(io, [raw](const std::string& id, const TaskExit& x) {
                            raw->OnLocalExit(id, x);
                          }, lopts),
                          "slurm executor");
  self->options_.exec_shim = self->local_->exec_shim();
  return self;
}

SlurmExecutor::SlurmExecutor(boost::asio::io_context& io, ExitCallback on_exit,
                             SlurmExecutorOptions options)
    : io_(io),
      on_exit_(std::move(on_exit)),
      options_(std::move(options)),
      workers_(std::make_unique<boost::asio::thread_pool>(kWorkers)) {}

SlurmExecutor::~SlurmExecutor() {
  // Stops supervising; steps keep running. Workers give up their loops.
  stop_->store(true);
  alive_.reset();
  workers_->join();
  local_.reset();
}

std::vector<std::string> SlurmExecutor::SrunCommand(const LaunchRequest& req,
                                                    const std::string& step_name,
                                                    bool gres_owner) const {
  const std::string cvd = EnvValue(req.env, "CUDA_VISIBLE_DEVICES");
  std::vector<std::string> a = {"srun", "--jobid=" + options_.job_id, "--job-name=" + step_name,
                                "--ntasks=1", "--nodes=1", "--quiet", "--open-mode=append"};
  if (!req.cwd.empty()) a.push_back("--chdir=" + req.cwd.string());
  a.push_back("--output=" + (req.stdout_path.empty() ? std::string("/dev/null") : SrunFilename(req.stdout_path)));
  a.push_back("--error=" + (req.stderr_path.empty() ? std::string("/dev/null") : SrunFilename(req.stderr_path)));
  if (gres_owner) {
    a.push_back("--gres=" + options_.gres + ":" + std::to_string(DeviceSet(cvd).size()));
  } else {
    a.push_back("--overlap");
    a.push_back("--gres=none");
  }
  std::string node = EnvValue(req.env, "TANDEM_NODE");
  if (!node.empty()) a.push_back("--nodelist=" + node);
  a.insert(a.end(), options_.srun_args.begin(), options_.srun_args.end());
  a.push_back("--");
  // Put back tandem's device ids after Slurm's GRES plugin set its own.
  a.push_back("env");
  a.push_back("CUDA_VISIBLE_DEVICES=" + cvd);
  a.push_back(options_.exec_shim.string());
  if (!req.exit_path.empty()) {
    a.push_back("--exit-path");
    a.push_back(std::filesystem::absolute(req.exit_path).string());
  }
  a.push_back("--");
  a.insert(a.end(), req.argv.begin(), req.argv.end());
  return a;
}

std::string SlurmExecutor::NewStepName(const std::string& task_id) { return task_id + "." + RandomHex8(); }

void SlurmExecutor::HoldGres(const std::string& holder, std::set<int> devices) {
  if (!devices.empty()) held_gres_[holder] = std::move(devices);
}

void SlurmExecutor::ReleaseGres(const std::string& holder) { held_gres_.erase(holder); }

StatusOr<TaskRef> SlurmExecutor::Start(const LaunchRequest& req) { return StartNamed(req, NewStepName(req.task_id)); }

StatusOr<TaskRef> SlurmExecutor::StartNamed(const LaunchRequest& req, const std::string& step_name) {
  if (req.argv.empty() || req.argv[0].empty())
    return InvalidArgument("start task " + req.task_id + ": empty command");
  if (tracked_.count(req.task_id)) return AlreadyExists("start task " + req.task_id + ": already running");

  // GRES ownership: the first live step on these GPUs requests them.
  std::set<int> devices = DeviceSet(EnvValue(req.env, "CUDA_VISIBLE_DEVICES"));
  auto overlaps = [&devices](const std::set<int>& held) {
    return std::any_of(devices.begin(), devices.end(), [&held](int d) { return held.count(d) > 0; });
  };
  bool owner = !devices.empty();
  for (const auto& [id, t] : tracked_) owner = owner && !overlaps(t.gres_devices);
  for (const auto& [holder, held] : held_gres_) owner = owner && !overlaps(held);

  LaunchRequest srun;
  srun.job_id = req.job_id;
  srun.task_id = req.task_id;
  srun.argv = SrunCommand(req, step_name, owner);
  srun.env = req.env;
  if (const char* conf = std::getenv("SLURM_CONF"); conf && !HasEnv(srun.env, "SLURM_CONF"))
    srun.env.push_back(std::string("SLURM_CONF=") + conf);
  srun.cwd = req.cwd;
  const std::filesystem::path exit_path =
      req.exit_path.empty() ? req.exit_path : std::filesystem::absolute(req.exit_path);
  srun.stdout_path = exit_path.empty() ? "" : Sibling(exit_path, ".srun.log");
  srun.stderr_path = srun.stdout_path;
  srun.exit_path = Sibling(exit_path, ".srun.json");

  TANDEM_ASSIGN_OR_RETURN(TaskRef local, local_->Start(srun), "slurm step " + step_name);
  Tracked t;
  t.exit_path = exit_path;
  t.stderr_path = req.stderr_path;
  t.marker = local.data.value("marker", "");
  if (owner) t.gres_devices = devices;
  tracked_[req.task_id] = t;

  TaskRef ref;
  ref.backend = "slurm";
  ref.task_id = req.task_id;
  ref.data = {{"job_id", options_.job_id},
              {"step_name", step_name},
              {"exit_path", exit_path.string()},
              {"stderr_path", req.stderr_path.string()},
              {"marker", t.marker},
              {"gres_devices", t.gres_devices},
              {"local", local.data}};
  log::Debug("slurm", "step started task={} job={} step={} owner={}", req.task_id, options_.job_id,
             step_name, owner);
  return ref;
}

void SlurmExecutor::OnLocalExit(const std::string& task_id, const TaskExit& srun_exit) {
  auto it = tracked_.find(task_id);
  if (it == tracked_.end()) return;
  Tracked t = std::move(it->second);
  tracked_.erase(it);
  t.ended->store(true);
  TaskExit exit;
  if (auto rec = local::ReadExitRecord(t.exit_path, t.marker)) {
    exit = *rec;
  } else {
    exit = srun_exit;
    if (exit.status_known && exit.signal == 0 && exit.exit_code > 128) {
      exit.signal = exit.exit_code - 128;
      exit.exit_code = -1;
    }
    if (t.killed) {
      exit.signal = SIGKILL;
      exit.exit_code = -1;
      exit.status_known = true;
    }
    std::string why = "no exit record from the step; srun ended with " +
                      (srun_exit.signal ? "signal " + std::to_string(srun_exit.signal)
                                        : "code " + std::to_string(srun_exit.exit_code));
    exit.detail = exit.detail.empty() ? why : why + "; " + exit.detail;
  }
  if (!exit.succeeded()) {
    // Slurm ended it (time limit, preemption, node failure, scancel): say so.
    std::string banner = slurm::BannerInFiles({t.stderr_path, Sibling(t.exit_path, ".srun.log")});
    if (!banner.empty()) exit.detail = "slurm: " + banner + (exit.detail.empty() ? "" : "; " + exit.detail);
  }
  log::Debug("slurm", "step ended task={} code={} signal={} detail=\"{}\"", task_id, exit.exit_code,
             exit.signal, exit.detail);
  on_exit_(task_id, exit);
}

Status SlurmExecutor::Signal(const TaskRef& ref, int sig) {
  TANDEM_ASSIGN_OR_RETURN(SlurmRef r, ParseRef(ref), "signal");
  auto it = tracked_.find(ref.task_id);
  if (it == tracked_.end() && !local_->Alive(r.local)) return Status::Ok();
  auto ended = it != tracked_.end() ? it->second.ended : std::make_shared<std::atomic<bool>>(false);
  // squeue/scancel block: on a worker, never on the io thread.
  boost::asio::post(*workers_, [job = r.job_id, step = r.step_name, task = ref.task_id, sig, ended,
                                stop = stop_] {
    slurm::StepHandle h{job, step, ended.get(), stop.get()};
    Status st = slurm::SignalStep(h, sig, std::chrono::seconds(5));
    if (!st.ok() && !stop->load()) log::Warn("slurm", "signal task={} sig={}: {}", task, sig, st.ToString());
  });
  return Status::Ok();
}

Status SlurmExecutor::Kill(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(SlurmRef r, ParseRef(ref), "kill");
  auto it = tracked_.find(ref.task_id);
  std::shared_ptr<std::atomic<bool>> ended;
  if (it == tracked_.end()) {
    // Not supervised here: nothing reports its end, so the srun client is
    // killed now (local, quick) and only its step is left to cancel.
    if (!local_->Alive(r.local)) return Status::Ok();
    TANDEM_RETURN_IF_ERROR(local_->Kill(r.local), "kill srun client of " + ref.task_id);
    ended = std::make_shared<std::atomic<bool>>(true);
  } else {
    if (it->second.killing) return Status::Ok();
    it->second.killed = it->second.killing = true;
    ended = it->second.ended;
  }
  // The io thread does what concerns the srun client (a local process).
  auto on_io = [this, weak = std::weak_ptr<int>(alive_), local = r.local](bool kill) {
    boost::asio::post(io_, [this, weak, local, kill] {
      if (!weak.lock()) return;
      if (kill) {
        if (Status st = local_->Kill(local); !st.ok())
          log::Warn("slurm", "kill srun client task={}: {}", local.task_id, st.ToString());
      } else {
        (void)local_->Signal(local, SIGTERM);
      }
    });
  };
  boost::asio::post(*workers_, [job = r.job_id, step = r.step_name, task = ref.task_id, ended, stop = stop_,
                                on_io, timeout = options_.kill_timeout] {
    slurm::StepHandle h{job, step, ended.get(), stop.get()};
    slurm::ClientActions client{[&] { on_io(false); }, [&] { on_io(true); }};
    Status st = slurm::KillStep(h, client, std::chrono::seconds(5), timeout);
    if (!st.ok() && !stop->load()) log::Error("slurm", "kill task={}: {}", task, st.ToString());
    else log::Debug("slurm", "killed task={} step={}", task, step);
  });
  return Status::Ok();
}

Status SlurmExecutor::Reattach(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(SlurmRef r, ParseRef(ref), "reattach");
  if (tracked_.count(ref.task_id)) return Status::Ok();
  Tracked t;
  t.exit_path = r.exit_path;
  if (ref.data.contains("stderr_path") && ref.data["stderr_path"].is_string())
    t.stderr_path = ref.data["stderr_path"].get<std::string>();
  t.marker = r.marker;
  if (ref.data.contains("gres_devices") && ref.data["gres_devices"].is_array())
    for (const auto& d : ref.data["gres_devices"])
      if (d.is_number_integer()) t.gres_devices.insert(d.get<int>());
  tracked_[ref.task_id] = t;
  Status st = local_->Reattach(r.local);
  if (!st.ok()) {
    tracked_.erase(ref.task_id);
    return st.WithContext("reattach slurm step " + r.step_name);
  }
  log::Info("slurm", "step reattached task={} job={} step={}", ref.task_id, r.job_id, r.step_name);
  return Status::Ok();
}

bool SlurmExecutor::Alive(const TaskRef& ref) {
  auto r = ParseRef(ref);
  return r.ok() && local_->Alive(r->local);
}

}  // namespace tandem::backends

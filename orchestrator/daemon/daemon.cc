// tandemd assembled; see daemon.h.
#include "orchestrator/daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <vector>

#include "common/log.h"
#ifdef TANDEM_HAVE_SLURM
#include "backends/slurm/allocation.h"
#include "backends/slurm/batch_control.h"
#include "backends/slurm/slurm_executor.h"
#include "backends/slurm/submit_executor.h"
#include "backends/task_env.h"
#endif
#ifdef TANDEM_HAVE_REDIS
#include "backends/redis/redis_executor.h"
#endif

namespace tandem::daemon {

namespace fs = std::filesystem;

namespace {

// "tandemd-<16 hex digits of the FNV-1a hash of the state dir's path>".
std::string CgroupSubtreeName(const fs::path& state) {
  std::error_code ec;
  const std::string key = fs::weakly_canonical(state, ec).string();
  uint64_t h = 1469598103934665603ull;
  for (char c : ec ? state.string() : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "tandemd-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

Daemon::Daemon(boost::asio::io_context& io, DaemonSettings settings)
    : io_(io), settings_(std::move(settings)) {}

Daemon::~Daemon() {
  Stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status Daemon::Start(const fs::path& run_root) {
  TANDEM_RETURN_IF_ERROR(Resolve(settings_), "settings");
  const fs::path state(settings_.state_dir);
  std::error_code ec;
  fs::create_directories(state, ec);
  if (ec) return ErrnoStatus("create state dir " + state.string(), ec.value());
  ::chmod(state.c_str(), 0700);

  lock_fd_ = ::open((state / "tandemd.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return ErrnoStatus("open lock file");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string owner;
    std::ifstream(state / "tandemd.pid") >> owner;
    return FailedPrecondition("another tandemd (pid " + owner + ") owns " + state.string());
  }
  std::ofstream(state / "tandemd.pid") << ::getpid() << '\n';

  std::string token;
  if (!settings_.token_file.empty()) {
    std::ifstream in(settings_.token_file);
    if (!in) return NotFound("--token-file " + settings_.token_file + ": cannot read");
    std::getline(in, token);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.size() < 16) return InvalidArgument("--token-file: token must be at least 16 characters");
  }

  // Test-only fault points (backends/fault_injection.h): never set in production.
  if (const char* f = std::getenv("TANDEM_TEST_FAULTS"); f && *f) {
    auto faults = backends::FaultPoints::Parse(f);
    if (!faults.ok()) return faults.status().WithContext("TANDEM_TEST_FAULTS");
    faults_ = std::move(faults).value();
    std::string names;
    for (const auto& p : faults_->armed()) names += (names.empty() ? "" : ",") + p;
    log::Warn("fault", "test fault points armed: {}", names);
  }

  store::Recovered recovered;
  auto log = store::DurableLog::Open(io_, state / "store", &recovered);
  if (!log.ok()) return log.status().WithContext("open journal");
  log_ = std::move(log).value();

  backends::PortLeaseOptions port_options;
  port_options.lock_dir = settings_.port_lock_dir == "none" ? std::string() : settings_.port_lock_dir;
  auto ports = backends::PortLeaseRegistry::Create(port_options);
  if (!ports.ok()) return ports.status().WithContext("port leases");
  ports_ = std::make_unique<backends::PortLeaseRegistry>(std::move(ports).value());
  backends::LocalExecutorOptions lopts;
  lopts.exec_shim = settings_.exec_shim;
  lopts.reap_orphans = true;  // the daemon waits for no children of its own
  // One cgroup subtree per state dir (docs/processes.md): a restarted daemon
  // finds its tasks' cgroups again; two daemons never share one.
  lopts.cgroup_name = CgroupSubtreeName(state);
  auto local = backends::LocalExecutor::Create(
      io_, [this](const std::string& task_id, const backends::TaskExit& exit) {
        if (jobs_) jobs_->OnTaskExit(task_id, exit);
      }, lopts);
  if (!local.ok()) return local.status().WithContext("local backend");
  local_ = std::move(local).value();
  TANDEM_RETURN_IF_ERROR(backends::EnableChildSubreaper(), "subreaper");

  JobManagerOptions jopts;
  jopts.state_dir = state;
  jopts.gpus = settings_.gpu_ids;
  jopts.grace = std::chrono::milliseconds(static_cast<int64_t>(settings_.grace_s * 1000));
  jopts.compact_every = settings_.compact_every;
  jopts.max_tasks_per_job = settings_.max_tasks_per_job;
  jopts.max_tasks = settings_.max_tasks;
  jopts.launch_batch = settings_.launch_batch;
  jopts.run_root = run_root;
  jopts.worker_binary = settings_.worker_bin;
  jopts.control_endpoint = "unix:" + (state / "control.sock").string();
  // Control tokens (common/control/control_token.h): the daemon's own
  // secret signs local and Slurm launches; redis launches are signed under
  // the cluster key by their agent (set below).
  auto secret = control::LoadOrCreateSecret(state / "control.key");
  if (!secret.ok()) return secret.status().WithContext("control secret");
  control_keys_ = control::ControlKeys(*secret);
  jopts.control_env = [this](const std::string& backend, const std::string& job_id, const std::string& task_id,
                             int launch) {
    backends::EnvMap env;
    env[control::kLaunchEnv] = std::to_string(launch);
    // Local tasks keep the unix socket; tasks that may run on other nodes get
    // the advertised TCP address when there is one.
    if (backend != "local" && !remote_control_.empty()) env["TANDEM_CONTROL"] = remote_control_;
    if (backend != "redis") env[control::kTokenEnv] = control_keys_.TokenFor(backend, job_id, task_id, launch);
    return env;
  };
  std::map<std::string, backends::Executor*> executors = {{"local", local_.get()}};
  if (settings_.slurm_job == "submit") {
#ifdef TANDEM_HAVE_SLURM
    // Submit mode: one batch job per tandem job, with the spec's scheduling
    // options; the job's devices are its allocation's (docs/slurm.md).
    backends::SlurmSubmitOptions sopts;
    sopts.exec_shim = settings_.exec_shim;
    auto control = backends::slurm::MakeBatchJobControl(settings_.slurm_api);
    if (!control.ok()) return control.status().WithContext("--slurm-api " + settings_.slurm_api);
    sopts.control = std::move(control).value();
    sopts.faults = faults_;
    sopts.job_info = [this](const std::string& job_id) -> StatusOr<backends::SlurmJobInfo> {
      const Job* job = jobs_ ? jobs_->Find(job_id) : nullptr;
      if (!job) return NotFound("no job " + job_id);
      const spec::JobSpec& sp = jobs_->SpecOf(*job);
      backends::SlurmJobInfo info;
      info.options = sp.backend.options;
      info.devices = static_cast<int>(job->logical_devices.size());
      // One CPU per GPU-owning step (one per distinct device set); colocated
      // and CPU-only steps overlap.
      std::set<std::vector<int>> owners;
      for (const auto& t : job->tasks)
        if (!t.logical_devices.empty()) owners.insert(t.logical_devices);
      info.tasks = std::max<int>(1, static_cast<int>(owners.size()));
      info.run_dir = job->run_dir;
      return info;
    };
    auto slurm = backends::SlurmSubmitExecutor::Create(
        io_, [this](const std::string& task_id, const backends::TaskExit& exit) {
          if (jobs_) jobs_->OnTaskExit(task_id, exit);
        }, sopts);
    if (!slurm.ok()) return slurm.status().WithContext("slurm backend (submit mode)");
    auto* submit = slurm->get();
    jopts.on_job_ended = [submit](const std::string& job_id, const std::string& backend) {
      if (backend == "slurm") submit->JobEnded(job_id);
    };
    slurm_ = std::move(slurm).value();
    executors["slurm"] = slurm_.get();
    jopts.own_device_backends.insert("slurm");
    log::Info("slurm", "submit mode: one batch job per tandem job api={}", sopts.control->name());
#else
    return FailedPrecondition("--slurm-job submit: this tandemd was built without the Slurm backend");
#endif
  } else if (settings_.slurm_job != "none") {
#ifdef TANDEM_HAVE_SLURM
    // Allocation mode: jobs with backend.kind "slurm" run as job steps of
    // this allocation; without --gpus, the GPUs are the allocation's.
    backends::SlurmExecutorOptions sopts;
    sopts.job_id = settings_.slurm_job;
    sopts.exec_shim = settings_.exec_shim;
    auto slurm = backends::SlurmExecutor::Create(
        io_, [this](const std::string& task_id, const backends::TaskExit& exit) {
          if (jobs_) jobs_->OnTaskExit(task_id, exit);
        }, sopts);
    if (!slurm.ok()) return slurm.status().WithContext("slurm backend");
    if (settings_.gpus.empty()) {
      auto alloc = std::getenv("SLURM_JOB_ID") && settings_.slurm_job == std::getenv("SLURM_JOB_ID")
                       ? backends::slurm::AllocationFromEnvironment(backends::ProcessEnvironment())
                       : backends::slurm::QueryAllocation(settings_.slurm_job);
      if (!alloc.ok()) return alloc.status().WithContext("slurm allocation " + settings_.slurm_job);
      jopts.gpus = alloc->gpus;
    }
    slurm_ = std::move(slurm).value();
    executors["slurm"] = slurm_.get();
    log::Info("slurm", "allocation mode job={} gpus={}", settings_.slurm_job, jopts.gpus.size());
#else
    return FailedPrecondition("--slurm-job " + settings_.slurm_job +
                              ": this tandemd was built without the Slurm backend (no srun at build time)");
#endif
  }
  if (!settings_.redis_url.empty()) {
#ifdef TANDEM_HAVE_REDIS
    auto cfg = backends::redis::RedisConfig::FromUrl(settings_.redis_url, settings_.redis_password_file);
    if (!cfg.ok()) return cfg.status().WithContext("--redis");
    backends::redis::RedisExecutorOptions ropts;
    ropts.redis = *cfg;
    ropts.keys.prefix = settings_.redis_prefix;
    auto key = backends::redis::ClusterKey::FromFile(settings_.cluster_key_file);
    if (!key.ok()) return key.status().WithContext("--cluster-key-file");
    ropts.cluster_key = *key;
    control_keys_.SetBackendKey("redis", key->bytes());
    auto redis = backends::redis::RedisExecutor::Create(
        io_, [this](const std::string& task_id, const backends::TaskExit& exit) {
          if (jobs_) jobs_->OnTaskExit(task_id, exit);
        }, ropts);
    if (!redis.ok()) return redis.status().WithContext("redis backend");
    redis_ = std::move(redis).value();
    executors["redis"] = redis_.get();
    // Each node maps the job's logical devices onto its own GPUs (docs/redis.md "Placement").
    jopts.own_device_backends.insert("redis");
#else
    return FailedPrecondition("--redis: this tandemd was built without hiredis");
#endif
  }
  if (faults_) {
    for (auto& [kind, ex] : executors) {
      fault_wrappers_.push_back(std::make_unique<backends::FaultInjectingExecutor>(*ex, faults_));
      ex = fault_wrappers_.back().get();
    }
  }
  jobs_ = std::make_unique<JobManager>(io_, jopts, *log_, executors, *ports_, metrics_);
  handoff_ = std::make_unique<HandoffService>(io_, *jobs_, state, settings_.compact_every);
  handoff_->SetWorkerMetrics(&worker_metrics_);
  handoff_->SetControlKeys(control_keys_);
  jobs_->SetObserver(handoff_.get());
  // The address remote tasks get, known before Recover launches anything
  // unless the port is picked at bind time (then: PublishControlAddress).
  if (!settings_.control_advertise.empty()) {
    TANDEM_RETURN_IF_ERROR(control::ParseHostPort(settings_.control_advertise).status(), "--control-advertise");
    remote_control_ = "tcp:" + settings_.control_advertise;
  } else if (!settings_.control_listen.empty()) {
    TANDEM_ASSIGN_OR_RETURN(auto ep, control::ParseHostPort(settings_.control_listen), "--control-listen");
    if (ep.port() != 0 && !ep.address().is_unspecified()) remote_control_ = "tcp:" + control::HostPort(ep);
  }
  TANDEM_RETURN_IF_ERROR(jobs_->Recover(recovered), "recover");
  // Every task the journal knows is re-attached now: what is left in the
  // local cgroups (marker mode: the task slots, backends/local/task_slot.h)
  // belongs to no task (a crash between a start and its journal record)
  // and goes, before anything is launched again.
  local_->KillUnclaimed();
  jobs_->ResumeLaunches();
  TANDEM_RETURN_IF_ERROR(handoff_->Start(state / "control.sock", settings_.control_listen), "handoff");
  TANDEM_RETURN_IF_ERROR(PublishControlAddress(state), "control address");

  api_ = std::make_unique<Api>(io_, *jobs_, *handoff_, metrics_);
  api_->SetProcessContainment(local_->containment().ToJson());
#ifdef TANDEM_HAVE_REDIS
  if (redis_) {
    auto* redis = static_cast<backends::redis::RedisExecutor*>(redis_.get());
    api_->SetRemoteTail([redis](const nlohmann::json& ref, const std::string& stream) -> StatusOr<std::string> {
      TANDEM_ASSIGN_OR_RETURN(backends::TaskRef r, backends::TaskRef::FromJson(ref), "task ref");
      return redis->Tail(r, stream, 1 << 20);
    });
  }
#endif
  server_ = std::make_unique<HttpServer>(
      io_, [this](const HttpRequest& req, std::shared_ptr<Exchange> ex) { api_->Handle(req, std::move(ex)); },
      HttpLimitsFrom(settings_));
  TANDEM_RETURN_IF_ERROR(server_->ListenUnix(settings_.socket));
  if (!settings_.listen.empty())
    TANDEM_RETURN_IF_ERROR(server_->ListenTcp(settings_.listen, token, settings_.allow_remote));
  std::string gpus;
  for (int g : settings_.gpu_ids) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
  const auto& contain = local_->containment();
  log::Info("daemon", "ready state_dir={} gpus=[{}] pid={} containment={} {}", state.string(), gpus, ::getpid(),
            contain.mode, contain.mode == "cgroup" ? contain.cgroup : contain.reason);
  return Status::Ok();
}

Status Daemon::PublishControlAddress(const fs::path& state) {
  const fs::path file = state / "control.addr";
  std::error_code ec;
  const std::string bound = handoff_->tcp_endpoint();
  if (bound.empty()) {
    fs::remove(file, ec);
    return Status::Ok();
  }
  if (remote_control_.empty()) {
    auto ep = control::ParseHostPort(bound.substr(4));
    if (ep.ok() && !ep->address().is_unspecified()) {
      remote_control_ = bound;
    } else {
      log::Warn("control", "--control-listen {} is a wildcard address: remote tasks keep the unix socket; "
                "pass --control-advertise HOST:PORT", settings_.control_listen);
    }
  }
  // Written atomically: tests and scripts read the bound port from here.
  const fs::path tmp = state / "control.addr.tmp";
  std::ofstream(tmp) << bound << "\n" << (remote_control_.empty() ? handoff_->endpoint() : remote_control_) << "\n";
  fs::rename(tmp, file, ec);
  if (ec) return ErrnoStatus("rename " + tmp.string(), ec.value());
  log::Info("control", "tcp control bound={} advertised={}", bound, remote_control_.empty() ? "(none)" : remote_control_);
  return Status::Ok();
}

void Daemon::Stop() {
  if (server_) server_->Close();
  if (handoff_) handoff_->Stop();
  if (jobs_) {
    if (Status st = jobs_->Shutdown(); !st.ok()) log::Error("daemon", "flush on shutdown: {}", st.ToString());
  }
}

}  // namespace tandem::daemon

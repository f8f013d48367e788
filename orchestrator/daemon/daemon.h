// tandemd assembled: state dir lock, durable log, executor, job manager,
// HTTP server (docs/architecture.md). `tandemd` and `tandem daemon` run one
// until SIGTERM/SIGINT; `tandem run` embeds one on a private state dir.
//
// State dir layout:
//   tandemd.lock     flock'd while a daemon owns the dir (a second one refuses)
//   tandemd.pid      the owner's pid
//   tandemd.sock     the API's unix socket (0600)
//   control.sock     the control socket workers reach via TANDEM_CONTROL (0600)
//   control.key      the secret that signs local/Slurm control tokens (0600,
//                    created once; common/control/control_token.h)
//   control.addr     with --control-listen: line 1 the bound tcp:HOST:PORT,
//                    line 2 the address remote tasks are given
//   handoff/         the daemon epoch and one journal per live handoff group
//   store/           journal.log + snapshot.json (orchestrator/store)
//   runs/<job id>/   default run dirs
//
// Shutdown (SIGTERM) stops accepting requests and flushes the journal; tasks
// keep running and the next daemon on the same state dir re-adopts them.
#pragma once

#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/fault_injection.h"
#include "backends/local/local_executor.h"
#include "orchestrator/daemon/daemon_metrics.h"
#include "backends/port_lease.h"
#include "orchestrator/daemon/api.h"
#include "orchestrator/daemon/http_server.h"
#include "orchestrator/daemon/handoff_service.h"
#include "orchestrator/daemon/job_manager.h"
#include "orchestrator/daemon/settings.h"
#include "common/control/control_token.h"
#include "orchestrator/metrics/registry.h"
#include "orchestrator/store/durable_log.h"

namespace tandem::daemon {

class Daemon {
 public:
  Daemon(boost::asio::io_context& io, DaemonSettings settings);
  ~Daemon();

  // Locks the state dir, recovers, re-attaches, and starts serving.
  Status Start(const std::filesystem::path& run_root = {});
  // Stops serving and flushes; leaves tasks running (see the header comment).
  void Stop();

  JobManager& jobs() { return *jobs_; }
  HandoffService& handoff() { return *handoff_; }
  WorkerMetrics& worker_metrics() { return worker_metrics_; }
  const DaemonSettings& settings() const { return settings_; }

 private:
  // Writes <state>/control.addr and settles the address remote tasks get.
  Status PublishControlAddress(const std::filesystem::path& state);

  boost::asio::io_context& io_;
  DaemonSettings settings_;
  control::ControlKeys control_keys_;
  std::string remote_control_;  // TANDEM_CONTROL of non-local tasks ("" = the unix socket)
  int lock_fd_ = -1;
  metrics::Registry registry_;
  DaemonMetrics metrics_{registry_};
  WorkerMetrics worker_metrics_{registry_};
  std::unique_ptr<store::DurableLog> log_;
  std::unique_ptr<backends::PortLeaseRegistry> ports_;
  std::unique_ptr<backends::LocalExecutor> local_;
  std::unique_ptr<backends::Executor> slurm_;  // allocation mode (backends/slurm), when enabled
  std::unique_ptr<backends::Executor> redis_;  // with --redis (backends/redis)
  // Test-only: with TANDEM_TEST_FAULTS, each executor above seen through a
  // FaultInjectingExecutor (backends/fault_injection.h).
  std::shared_ptr<const backends::FaultPoints> faults_;
  std::vector<std::unique_ptr<backends::Executor>> fault_wrappers_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<HandoffService> handoff_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tandem::daemon

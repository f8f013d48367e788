// The handoff service: the daemon's side of issue #3 (docs/control-
// protocol.md, docs/handoff.md: the engine, the ledger and logs).
//
// - Listens on the control socket (<state_dir>/control.sock, handed to local
//   tasks as TANDEM_CONTROL=unix:...) and, with `--control-listen`, on TCP
//   (handed to tasks on other nodes), and admits a connection only when its
//   hello (decoded, every field type-checked, by common/control/) names a
//   running task of a live job (job_id, task_id, role and rank must agree
//   with the daemon's own records) and carries that launch's control token
//   (common/control/control_token.h), over TCP and over the 0600 unix socket
//   alike; until the token checks out every refusal reads "unauthenticated"
//   and says nothing about the job. A second hello of the same worker (a
//   reconnect) replaces its old connection, which is closed without being
//   taken for the worker's death.
// - Only the spec's `controller` role may send request_phase; another
//   worker's request is answered error{code: permission_denied}.
// - Builds one HandoffGroup per colocation group that has handoff roles (the
//   spec's `handoff` section, HandoffSpec::KindOf), named after the group's
//   owner role, with its journal under <state_dir>/handoff/<job>/<group>/ and
//   its logs in the job's run dir.
// - Turns worker lines into engine events (ack, error, request_phase), and
//   task exits into WorkerDied, deciding with the job manager what happens to
//   the task (TaskObserver): on_fault=restart relaunches it, on_fault=fail
//   fails the job. A control connection that closes while the worker owes an
//   answer is a death; one that closes while idle is not (the task's exit
//   decides). A worker that exits 0 owing nothing has left cleanly.
// - When every task of the spec's `controller` role has succeeded, the
//   group's other workers are sent `shutdown`.
// - API: RequestPhase (POST /v1/jobs/{id}/phase) and Residency (GET
//   /v1/jobs/{id}/residency).
// Single-threaded, on the daemon's io thread.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/control/control_messages.h"
#include "common/control/control_token.h"
#include "orchestrator/control/control_server.h"
#include "orchestrator/daemon/handoff_group.h"
#include "orchestrator/daemon/job_manager.h"
#include "orchestrator/daemon/worker_metrics.h"

namespace tandem::daemon {

class HandoffService : public control::ControlServer::Delegate, public TaskObserver {
 public:
  using PhaseCallback = HandoffGroup::PhaseCallback;

  HandoffService(boost::asio::io_context& io, JobManager& jobs, std::filesystem::path state_dir,
                 uint64_t compact_every);
  ~HandoffService() override;

  // The keys that sign control tokens (before Start). Without keys, TCP
  // hellos are all refused.
  void SetControlKeys(control::ControlKeys keys) { keys_ = std::move(keys); }
  // Where workers' metrics lines go (besides the log); must outlive this.
  void SetWorkerMetrics(WorkerMetrics* metrics) { worker_metrics_ = metrics; }

  // Bumps the daemon epoch, re-opens the groups of live jobs (replaying their
  // journals) and starts listening on `socket` and, when `tcp_listen` is not
  // empty, on that HOST:PORT. Call after JobManager::Recover.
  Status Start(const std::filesystem::path& socket, const std::string& tcp_listen = "");
  std::string endpoint() const;      // "unix:<socket>"
  std::string tcp_endpoint() const;  // "tcp:<bound HOST:PORT>", "" without TCP
  void Stop();

  // POST /v1/jobs/{id}/phase: `group` "" = the job's only group.
  void RequestPhase(const std::string& job_id, const std::string& group, const std::string& phase,
                    int64_t version, PhaseCallback done);
  // GET /v1/jobs/{id}/residency.
  StatusOr<nlohmann::json> Residency(const std::string& job_id);

  // control::ControlServer::Delegate
  StatusOr<nlohmann::json> OnHello(const control::ControlServer::ConnectionPtr& c, const control::Hello& hello) override;
  void OnMessage(const control::ControlServer::ConnectionPtr& c, const control::ParsedObject& message) override;
  void OnClosed(const control::ControlServer::ConnectionPtr& c) override;

  // TaskObserver
  Verdict OnTaskExit(const Job& job, const Task& task, const backends::TaskExit& exit, std::string* reason) override;
  void OnJobEnded(const Job& job) override;

 private:
  struct JobGroups;
  struct Peer {
    std::string job;
    handoff::WorkerId worker;
    std::string group;  // "" for a plain task
    std::weak_ptr<control::ControlConnection> conn;
  };
  class GroupHost;

  // The job and task a hello names, when its fields and token admit it.
  StatusOr<std::pair<const Job*, const Task*>> Admit(const control::ControlServer::ConnectionPtr& c,
                                                     const control::Hello& hello);
  void OnPhaseRequest(const control::ControlServer::ConnectionPtr& c, const Peer& peer,
                      const control::ParsedObject& msg);
  StatusOr<JobGroups*> GroupsOf(const Job& job);
  HandoffGroup* FindGroup(const std::string& job_id, const handoff::WorkerId& w);
  std::vector<handoff::DeviceMemory> Devices(const Task& task, const std::optional<control::Residency>& r) const;
  void MaybeShutdownGroup(const Job& job);
  void DropJob(const std::string& job_id, bool remove_journals);

  boost::asio::io_context& io_;
  JobManager& jobs_;
  std::filesystem::path state_dir_;
  uint32_t epoch_ = 0;
  uint64_t compact_every_;  // journal records between a group's snapshots (--compact-every)
  std::unique_ptr<control::ControlServer> server_;
  control::ControlKeys keys_;
  std::map<std::string, std::unique_ptr<JobGroups>> groups_;       // by job id
  std::map<uint64_t, Peer> peers_;                                 // by connection id
  std::map<std::pair<std::string, handoff::WorkerId>, uint64_t> connection_of_;  // (job, worker) -> connection id
  std::set<std::string> closing_;                                  // jobs whose controller finished
  std::string exit_failure_;                                       // GroupFailed during OnTaskExit
  std::string exiting_task_;                                       // the task OnTaskExit is about
  bool in_exit_ = false;
  WorkerMetrics* worker_metrics_ = nullptr;
};

}  // namespace tandem::daemon

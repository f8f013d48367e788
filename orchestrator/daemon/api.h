// The HTTP API of tandemd (issue #2 part 3). Routes, status codes and bodies
// are specified in docs/api.md and schemas/api.schema.json:
//
//   POST /v1/jobs                      submit a job spec            201 | 400 | 409
//   GET  /v1/jobs[?state=S]            list jobs                    200
//   GET  /v1/jobs/{id}                 one job with its tasks       200 | 404
//   POST /v1/jobs/{id}/cancel          request cancellation         202 | 404
//   GET  /v1/jobs/{id}/tasks           the job's tasks              200 | 404
//   GET  /v1/jobs/{id}/logs?task=T[&stream=stdout|stderr][&follow=1]   text
//   GET  /v1/jobs/{id}/events[?follow=0]   server-sent events of every state change
//   POST /v1/jobs/{id}/phase           {"phase","version"?,"group"?}: run a handoff   200 | 400 | 404 | 409
//   GET  /v1/jobs/{id}/residency       who holds which GPU's memory, per group        200 | 404
//   GET  /healthz                      liveness                     200
//   GET  /metrics                      Prometheus text format       200
//
// Errors are JSON: {"error": {"code", "message", "details"?}}.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "orchestrator/daemon/http_server.h"
#include "orchestrator/daemon/handoff_service.h"
#include "orchestrator/daemon/job_manager.h"
#include "orchestrator/daemon/daemon_metrics.h"

namespace tandem::daemon {

class Api {
 public:
  Api(boost::asio::io_context& io, JobManager& jobs, HandoffService& handoff, DaemonMetrics& metrics);
  void Handle(const HttpRequest& req, std::shared_ptr<Exchange> ex);

  // For tasks whose output file is not on this machine (a redis agent's run
  // dir that is not shared): fetches the last bytes of a task's stdout or
  // stderr from the node that ran it, given the task's ref and the stream.
  using RemoteTail = std::function<StatusOr<std::string>(const nlohmann::json& ref, const std::string& stream)>;
  void SetRemoteTail(RemoteTail tail) { remote_tail_ = std::move(tail); }
  // How the local backend contains task processes (docs/processes.md), shown
  // in /healthz as "process_containment".
  void SetProcessContainment(nlohmann::json containment) { containment_ = std::move(containment); }

 private:
  void Submit(const HttpRequest& req, std::shared_ptr<Exchange> ex);
  void Logs(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex);
  void Events(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex);
  void Metrics(std::shared_ptr<Exchange> ex);
  void Phase(const Job& job, const HttpRequest& req, std::shared_ptr<Exchange> ex);

  boost::asio::io_context& io_;
  JobManager& jobs_;
  HandoffService& handoff_;
  DaemonMetrics& metrics_;
  RemoteTail remote_tail_;
  nlohmann::json containment_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Maps a Status to an HTTP status code (400 invalid, 404 not found, 409 conflict, ...).
int HttpStatusFor(const Status& st);

// One line of <run_dir>/events.jsonl as a server-sent event ("id: SEQ\nevent:
// TYPE\ndata: JSON\n\n"), or "" when the line is not an event. The job's
// tasks can write that file: every field is type-checked, nesting is bounded,
// and no line makes this throw.
std::string SseEventOfLine(std::string_view line);

}  // namespace tandem::daemon

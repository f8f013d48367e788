// The run-dir records of submit mode (docs/slurm.md "Restart";
// submit_executor.h): the task ref's data, the launch record
// (<exit_path>.launch.json), and the small JSON files a restarted daemon
// reads (.step.json, .step-intent.json, slurm-batch.json). Shared by
// submit_executor.cc (start) and submit_reattach.cc (restart).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/executor.h"
#include "common/status.h"

namespace tandem::backends::submit {

// TaskRef.data of a submit-mode task: {mode: "submit", job_id, tandem_job, exit_path}.
struct SubmitRef {
  std::string batch_id;  // "" while the batch job was being submitted
  std::string tandem_job;
  std::filesystem::path exit_path;
};
StatusOr<SubmitRef> ParseRef(const TaskRef& ref);

// The launch record: the request, as Start got it.
nlohmann::json RequestToJson(const LaunchRequest& r);
StatusOr<LaunchRequest> RequestFromJson(const nlohmann::json& j);

// `p` + suffix ("" stays "").
std::filesystem::path Sibling(const std::filesystem::path& p, const std::string& suffix);
// Written whole or not at all (write <path>.tmp, flush, rename), so a reader
// never sees half a file. Crash safety depends on these records: an error
// (a full disk, a missing run dir) is returned, and the tmp file removed.
// An empty path writes nothing (Ok).
Status WriteJson(const std::filesystem::path& path, const nlohmann::json& j);

// A task that ended without running (or by `sig`), with `detail`.
TaskExit Ended(std::string detail, int sig = 0);

}  // namespace tandem::backends::submit

// Jobs and tasks as the daemon holds them, and the journal records that
// change them (issue #2, "Durable job store"; schemas/api.schema.json).
//
// The daemon's state is event-sourced: every change is a journal record,
// and `Apply(state, record)` is the one function that changes the state,
// used both live and when replaying the journal after a restart. So what the
// daemon does after `kill -9` + restart is, by construction, what it had
// made durable. Snapshots are `JobTable::ToJson()`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::daemon {

enum class JobState { kPending, kRunning, kSucceeded, kFailed, kCancelled };
enum class TaskState {
  kPending,     // placed, not launched yet (waiting for devices or the launch turn)
  kRunning,     // launched; the executor supervises it
  kRestarting,  // exited, waiting out the restart backoff
  kSucceeded,
  kFailed,
  kCancelled,
  kLost,        // the backend lost track of it (status unknown)
};

std::string_view ToString(JobState s);
std::string_view ToString(TaskState s);
std::optional<JobState> ParseJobState(std::string_view s);
std::optional<TaskState> ParseTaskState(std::string_view s);
bool IsTerminal(JobState s);
bool IsTerminal(TaskState s);

using Clock = std::chrono::system_clock;
int64_t NowMs();

struct Task {
  std::string id;           // "<job>.<role>.<rank>", unique in the daemon
  std::string name;         // "<role>.<rank>", unique in the job
  std::string role;
  int rank = 0;
  int world_size = 1;
  std::vector<int> logical_devices;
  std::vector<int> physical_devices;
  std::vector<int> ports;   // leased while running
  TaskState state = TaskState::kPending;
  int restarts = 0;
  int launches = 0;
  nlohmann::json ref;       // the executor's TaskRef while running, else null
  nlohmann::json last_exit; // TaskExit of the last run, else null
  std::string detail;       // why it is in this state, for people
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;   // last launch
  int64_t ended_ms = 0;

  nlohmann::json ToJson() const;
  static StatusOr<Task> FromJson(const nlohmann::json& j);
};

struct Job {
  std::string id;
  std::string name;
  JobState state = JobState::kPending;
  std::string spec_text;    // the spec as submitted (run_dir resolved), in its document order:
                            // role order decides placement, and nlohmann::json would sort keys
  std::string run_dir;
  std::string backend;      // "local", ...
  std::vector<int> logical_devices;   // the spec's devices, in order
  std::vector<int> physical_devices;  // granted: physical_devices[i] backs logical_devices[i]; [] when none held
  std::vector<Task> tasks;  // spec order of roles, ranks ascending
  bool cancel_requested = false;
  std::string detail;       // why it ended, for people
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;

  Task* FindTask(std::string_view id_or_name);
  const Task* FindTask(std::string_view id_or_name) const;
  nlohmann::json ToJson(bool with_spec = true) const;
  nlohmann::json Summary() const;  // id, name, state, counts of tasks by state, times
  static StatusOr<Job> FromJson(const nlohmann::json& j);
};

// All jobs, in submission order.
struct JobTable {
  std::vector<Job> jobs;
  uint64_t next_seq = 1;  // for job ids

  Job* Find(std::string_view id);
  const Job* Find(std::string_view id) const;
  nlohmann::json ToJson() const;
  static StatusOr<JobTable> FromJson(const nlohmann::json& j);
};

// Journal records. Each has "type" and the fields it needs:
//   job_submitted {job}                         a whole new job (state pending)
//   job_devices   {job, physical_devices}       devices granted (or [] when released)
//   job_state     {job, state, detail, at}
//   job_cancel    {job, at}                     cancel requested
//   task_state    {job, task, state, detail, at, ref?, exit?, ports?, restarts?, launches?}
// Apply() validates the record against the table and refuses (kDataLoss)
// records that do not fit it, rather than guessing.
Status Apply(JobTable& table, const nlohmann::json& record);

}  // namespace tandem::daemon

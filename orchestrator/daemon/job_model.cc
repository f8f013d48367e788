// Job/task records and the journal's Apply; see job_model.h.
#include "orchestrator/daemon/job_model.h"

#include <array>
#include <utility>

namespace tandem::daemon {

namespace {
using json = nlohmann::json;

constexpr std::array<std::pair<JobState, std::string_view>, 5> kJobStates{{
    {JobState::kPending, "pending"},
    {JobState::kRunning, "running"},
    {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},
    {JobState::kCancelled, "cancelled"},
}};
constexpr std::array<std::pair<TaskState, std::string_view>, 7> kTaskStates{{
    {TaskState::kPending, "pending"},
    {TaskState::kRunning, "running"},
    {TaskState::kRestarting, "restarting"},
    {TaskState::kSucceeded, "succeeded"},
    {TaskState::kFailed, "failed"},
    {TaskState::kCancelled, "cancelled"},
    {TaskState::kLost, "lost"},
}};

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}
}  // namespace

std::string_view ToString(JobState s) {
  for (auto& [k, v] : kJobStates) if (k == s) return v;
  return "unknown";
}
std::string_view ToString(TaskState s) {
  for (auto& [k, v] : kTaskStates) if (k == s) return v;
  return "unknown";
}
std::optional<JobState> ParseJobState(std::string_view s) {
  for (auto& [k, v] : kJobStates) if (v == s) return k;
  return std::nullopt;
}
std::optional<TaskState> ParseTaskState(std::string_view s) {
  for (auto& [k, v] : kTaskStates) if (v == s) return k;
  return std::nullopt;
}
bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}
bool IsTerminal(TaskState s) {
  return s == TaskState::kSucceeded || s == TaskState::kFailed || s == TaskState::kCancelled ||
         s == TaskState::kLost;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

json Task::ToJson() const {
  return {{"id", id}, {"name", name}, {"role", role}, {"rank", rank},
          {"world_size", world_size}, {"logical_devices", logical_devices},
          {"physical_devices", physical_devices}, {"ports", ports},
          {"state", ToString(state)}, {"restarts", restarts}, {"launches", launches},
          {"ref", ref}, {"last_exit", last_exit}, {"detail", detail},
          {"submitted_ms", submitted_ms}, {"started_ms", started_ms}, {"ended_ms", ended_ms}};
}

StatusOr<Task> Task::FromJson(const json& j) {
  try {
    Task t;
    t.id = j.at("id").get<std::string>();
    t.name = j.at("name").get<std::string>();
    t.role = j.at("role").get<std::string>();
    t.rank = j.at("rank").get<int>();
    t.world_size = Get<int>(j, "world_size", 1);
    t.logical_devices = Get<std::vector<int>>(j, "logical_devices", {});
    t.physical_devices = Get<std::vector<int>>(j, "physical_devices", {});
    t.ports = Get<std::vector<int>>(j, "ports", {});
    auto st = ParseTaskState(j.at("state").get<std::string>());
    if (!st) return DataLoss("task " + t.id + ": unknown state");
    t.state = *st;
    t.restarts = Get<int>(j, "restarts", 0);
    t.launches = Get<int>(j, "launches", 0);
    t.ref = j.value("ref", json());
    t.last_exit = j.value("last_exit", json());
    t.detail = Get<std::string>(j, "detail", "");
    t.submitted_ms = Get<int64_t>(j, "submitted_ms", 0);
    t.started_ms = Get<int64_t>(j, "started_ms", 0);
    t.ended_ms = Get<int64_t>(j, "ended_ms", 0);
    return t;
  } catch (const json::exception& e) {
    return DataLoss(std::string("task record: ") + e.what());
  }
}

Task* Job::FindTask(std::string_view key) {
  for (auto& t : tasks) if (t.id == key || t.name == key) return &t;
  return nullptr;
}
const Task* Job::FindTask(std::string_view key) const {
  return const_cast<Job*>(this)->FindTask(key);
}

json Job::Summary() const {
  json counts = json::object();
  for (const auto& t : tasks) counts[std::string(ToString(t.state))] = counts.value(std::string(ToString(t.state)), 0) + 1;
  return {{"id", id}, {"name", name}, {"state", ToString(state)}, {"backend", backend},
          {"run_dir", run_dir}, {"task_count", tasks.size()}, {"task_states", counts},
          {"logical_devices", logical_devices}, {"physical_devices", physical_devices},
          {"detail", detail}, {"cancel_requested", cancel_requested}, {"submitted_ms", submitted_ms},
          {"started_ms", started_ms}, {"ended_ms", ended_ms}};
}

json Job::ToJson(bool with_spec) const {
  json j = Summary();
  j["tasks"] = json::array();
  for (const auto& t : tasks) j["tasks"].push_back(t.ToJson());
  if (with_spec) {
    j["spec_text"] = spec_text;  // authoritative (document order), what replay parses
    j["spec"] = json::parse(spec_text, nullptr, false);  // for people and API clients
  }
  return j;
}

StatusOr<Job> Job::FromJson(const json& j) {
  try {
    Job job;
    job.id = j.at("id").get<std::string>();
    job.name = j.at("name").get<std::string>();
    auto st = ParseJobState(j.at("state").get<std::string>());
    if (!st) return DataLoss("job " + job.id + ": unknown state");
    job.state = *st;
    job.spec_text = Get<std::string>(j, "spec_text", "{}");
    job.run_dir = Get<std::string>(j, "run_dir", "");
    job.backend = Get<std::string>(j, "backend", "local");
    job.logical_devices = Get<std::vector<int>>(j, "logical_devices", {});
    job.physical_devices = Get<std::vector<int>>(j, "physical_devices", {});
    job.cancel_requested = Get<bool>(j, "cancel_requested", false);
    job.detail = Get<std::string>(j, "detail", "");
    job.submitted_ms = Get<int64_t>(j, "submitted_ms", 0);
    job.started_ms = Get<int64_t>(j, "started_ms", 0);
    job.ended_ms = Get<int64_t>(j, "ended_ms", 0);
    for (const auto& tj : j.at("tasks")) {
      TANDEM_ASSIGN_OR_RETURN(Task t, Task::FromJson(tj), "job " + job.id);
      job.tasks.push_back(std::move(t));
    }
    return job;
  } catch (const json::exception& e) {
    return DataLoss(std::string("job record: ") + e.what());
  }
}

Job* JobTable::Find(std::string_view id) {
  for (auto& j : jobs) if (j.id == id) return &j;
  return nullptr;
}
const Job* JobTable::Find(std::string_view id) const {
  return const_cast<JobTable*>(this)->Find(id);
}

json JobTable::ToJson() const {
  json j = {{"next_seq", next_seq}, {"jobs", json::array()}};
  for (const auto& job : jobs) j["jobs"].push_back(job.ToJson());
  return j;
}

StatusOr<JobTable> JobTable::FromJson(const json& j) {
  JobTable t;
  if (!j.is_object() || !j.contains("jobs") || !j["jobs"].is_array())
    return DataLoss("snapshot: expected {next_seq, jobs[]}");
  t.next_seq = Get<uint64_t>(j, "next_seq", 1);
  for (const auto& jj : j["jobs"]) {
    TANDEM_ASSIGN_OR_RETURN(Job job, Job::FromJson(jj), "snapshot");
    t.jobs.push_back(std::move(job));
  }
  return t;
}

Status Apply(JobTable& table, const json& r) {
  try {
    const std::string type = r.at("type").get<std::string>();
    if (type == "job_submitted") {
      TANDEM_ASSIGN_OR_RETURN(Job job, Job::FromJson(r.at("job")), "job_submitted");
      if (table.Find(job.id)) return DataLoss("job_submitted: duplicate job " + job.id);
      table.next_seq = std::max(table.next_seq, Get<uint64_t>(r, "seq", 0) + 1);
      table.jobs.push_back(std::move(job));
      return Status::Ok();
    }
    const std::string job_id = r.at("job").get<std::string>();
    Job* job = table.Find(job_id);
    if (!job) return DataLoss(type + ": unknown job " + job_id);
    if (type == "job_devices") {
      job->physical_devices = r.at("physical_devices").get<std::vector<int>>();
      if (!job->physical_devices.empty() &&
          job->physical_devices.size() != job->logical_devices.size())
        return DataLoss("job_devices: " + job_id + " granted a different device count");
      for (auto& t : job->tasks) {
        t.physical_devices.clear();
        if (job->physical_devices.empty()) continue;
        for (int l : t.logical_devices) {
          // logical_devices[i] is backed by physical_devices[i]
          for (size_t i = 0; i < job->logical_devices.size(); ++i)
            if (job->logical_devices[i] == l) t.physical_devices.push_back(job->physical_devices[i]);
        }
      }
      return Status::Ok();
    }
    if (type == "job_state") {
      auto st = ParseJobState(r.at("state").get<std::string>());
      if (!st) return DataLoss("job_state: unknown state");
      job->state = *st;
      job->detail = Get<std::string>(r, "detail", job->detail);
      const int64_t at = Get<int64_t>(r, "at", 0);
      if (*st == JobState::kRunning && !job->started_ms) job->started_ms = at;
      if (IsTerminal(*st)) job->ended_ms = at;
      return Status::Ok();
    }
    if (type == "job_cancel") {
      job->cancel_requested = true;
      return Status::Ok();
    }
    if (type == "task_state") {
      Task* t = job->FindTask(r.at("task").get<std::string>());
      if (!t) return DataLoss("task_state: unknown task in job " + job_id);
      auto st = ParseTaskState(r.at("state").get<std::string>());
      if (!st) return DataLoss("task_state: unknown state");
      const int64_t at = Get<int64_t>(r, "at", 0);
      t->state = *st;
      t->detail = Get<std::string>(r, "detail", "");
      if (r.contains("ref")) t->ref = r["ref"];
      if (r.contains("exit")) t->last_exit = r["exit"];
      if (r.contains("ports")) t->ports = r["ports"].get<std::vector<int>>();
      if (r.contains("restarts")) t->restarts = r["restarts"].get<int>();
      if (r.contains("launches")) t->launches = r["launches"].get<int>();
      if (*st == TaskState::kRunning) { t->started_ms = at; t->ended_ms = 0; }
      if (IsTerminal(*st) || *st == TaskState::kRestarting) { t->ended_ms = at; t->ref = nullptr; }
      if (IsTerminal(*st)) t->ports.clear();
      return Status::Ok();
    }
    return DataLoss("unknown record type " + type);
  } catch (const json::exception& e) {
    return DataLoss(std::string("malformed record: ") + e.what());
  }
}

}  // namespace tandem::daemon

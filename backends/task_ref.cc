// TaskRef and TaskExit JSON forms; see executor.h.
#include <chrono>

#include "backends/executor.h"

namespace tandem::backends {

nlohmann::json TaskRef::ToJson() const {
  return {{"backend", backend}, {"task_id", task_id}, {"data", data}};
}

StatusOr<TaskRef> TaskRef::FromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("backend") || !j["backend"].is_string() ||
      !j.contains("task_id") || !j["task_id"].is_string())
    return InvalidArgument("task ref: expected {backend, task_id, data}");
  TaskRef r;
  r.backend = j["backend"].get<std::string>();
  r.task_id = j["task_id"].get<std::string>();
  if (j.contains("data")) r.data = j["data"];
  return r;
}

nlohmann::json TaskExit::ToJson() const {
  nlohmann::json j = {{"exit_code", exit_code}, {"signal", signal}, {"status_known", status_known}};
  if (!detail.empty()) j["detail"] = detail;
  if (interrupted) j["interrupted"] = true;
  j["ended_at_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                         ended_at.time_since_epoch()).count();
  return j;
}

}  // namespace tandem::backends

// Exit records: see exit_record.h and exec_shim.cc.
#include "backends/local/exit_record.h"

#include <cstring>

#include "common/bounded_json.h"
#include "common/json_field.h"
#include "common/log.h"
#include "common/task_file.h"

namespace tandem::backends::local {

std::optional<TaskExit> ReadExitRecord(const std::filesystem::path& path, const std::string& marker) {
  if (path.empty()) return std::nullopt;
  // The task may have rewritten its record (common/task_file.h): a FIFO, a
  // symlink, a huge file or any JSON is no record.
  auto text = ReadTaskFile(path, kMaxExitRecordBytes);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound)
      log::Warn("local", "unreadable exit record path={}: {}", path.string(), text.status().message());
    return std::nullopt;
  }
  auto parsed = ParseJsonBounded(*text);
  const nlohmann::json j = parsed.ok() ? std::move(parsed).value() : nlohmann::json();
  if (!j.is_object() || !j.contains("exit_code") || !j["exit_code"].is_number_integer() ||
      !j.contains("signal") || !j["signal"].is_number_integer()) {
    log::Warn("local", "malformed exit record path={}", path.string());
    return std::nullopt;
  }
  if (!j.contains("marker") || !j["marker"].is_string() || j["marker"].get<std::string>() != marker) {
    log::Debug("local", "exit record of another run ignored path={}", path.string());
    return std::nullopt;
  }
  TaskExit x;
  x.exit_code = static_cast<int>(IntField(j, "exit_code", -1));
  x.signal = static_cast<int>(IntField(j, "signal", 0));
  x.status_known = true;
  x.detail = StringField(j, "detail");
  x.ended_at = j.contains("ended_at_ms") && j["ended_at_ms"].is_number_integer()
                   ? std::chrono::system_clock::time_point(std::chrono::milliseconds(IntField(j, "ended_at_ms", 0)))
                   : std::chrono::system_clock::now();
  return x;
}

TaskExit ExitFromSiginfo(const siginfo_t& si) {
  TaskExit x;
  x.ended_at = std::chrono::system_clock::now();
  if (si.si_code == CLD_EXITED) {
    x.exit_code = si.si_status;
  } else {
    x.exit_code = -1;
    x.signal = si.si_status;
    x.detail = "killed by signal " + std::to_string(si.si_status) + " (" +
               ::strsignal(si.si_status) + ")";
  }
  return x;
}

}  // namespace tandem::backends::local

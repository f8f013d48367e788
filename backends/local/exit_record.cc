// Exit records: see exit_record.h and exec_shim.cc.
#include "backends/local/exit_record.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace tandem::backends::local {

std::optional<TaskExit> ReadExitRecord(const std::filesystem::path& path, const std::string& marker) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
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
  x.exit_code = j["exit_code"].get<int>();
  x.signal = j["signal"].get<int>();
  x.status_known = true;
  if (j.contains("detail") && j["detail"].is_string()) x.detail = j["detail"].get<std::string>();
  if (j.contains("ended_at_ms") && j["ended_at_ms"].is_number_integer())
    x.ended_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(j["ended_at_ms"].get<int64_t>()));
  else
    x.ended_at = std::chrono::system_clock::now();
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

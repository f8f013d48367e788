// Implements the message encodings of redis_protocol.h. Decoders check every
// field's type: a malformed message is an error value, never an exception.
#include "backends/redis/redis_protocol.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "common/bounded_json.h"
#include "common/control/control_token.h"

namespace tandem::backends::redis {
namespace {

bool StringList(const nlohmann::json& j, std::vector<std::string>* out) {
  if (!j.is_array()) return false;
  for (const auto& v : j) {
    if (!v.is_string()) return false;
    out->push_back(v.get<std::string>());
  }
  return true;
}

}  // namespace

nlohmann::json RequestToJson(const LaunchRequest& r) {
  return {{"job_id", r.job_id},   {"task_id", r.task_id},
          {"argv", r.argv},       {"env", r.env},
          {"cwd", r.cwd.string()}, {"stdout", r.stdout_path.string()},
          {"stderr", r.stderr_path.string()}, {"exit_path", r.exit_path.string()}};
}

StatusOr<LaunchRequest> RequestFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("request: expected an object");
  LaunchRequest r;
  for (const char* k : {"job_id", "task_id", "cwd", "stdout", "stderr", "exit_path"})
    if (!j.contains(k) || !j[k].is_string()) return InvalidArgument(std::string("request: '") + k + "' must be a string");
  if (!j.contains("argv") || !StringList(j["argv"], &r.argv) || r.argv.empty())
    return InvalidArgument("request: 'argv' must be a non-empty list of strings");
  if (!j.contains("env") || !StringList(j["env"], &r.env))
    return InvalidArgument("request: 'env' must be a list of strings");
  r.job_id = j["job_id"].get<std::string>();
  r.task_id = j["task_id"].get<std::string>();
  r.cwd = j["cwd"].get<std::string>();
  r.stdout_path = j["stdout"].get<std::string>();
  r.stderr_path = j["stderr"].get<std::string>();
  r.exit_path = j["exit_path"].get<std::string>();
  return r;
}

StatusOr<TaskExit> ExitFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("exit_code") || !j["exit_code"].is_number_integer())
    return InvalidArgument("exit: expected {exit_code, signal, status_known, detail}");
  TaskExit x;
  x.exit_code = j["exit_code"].get<int>();
  if (j.contains("signal") && j["signal"].is_number_integer()) x.signal = j["signal"].get<int>();
  if (j.contains("status_known") && j["status_known"].is_boolean()) x.status_known = j["status_known"].get<bool>();
  if (j.contains("detail") && j["detail"].is_string()) x.detail = j["detail"].get<std::string>();
  if (j.contains("interrupted") && j["interrupted"].is_boolean()) x.interrupted = j["interrupted"].get<bool>();
  if (j.contains("ended_at_ms") && j["ended_at_ms"].is_number_integer())
    x.ended_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(j["ended_at_ms"].get<long long>()));
  return x;
}

StatusOr<nlohmann::json> ParseMessage(const std::string& text) {
  auto j = ParseJsonBounded(text);
  if (!j.ok()) return InvalidArgument("message: " + j.status().message());
  if (!j->is_object()) return InvalidArgument("message is not a JSON object");
  return j;
}

void AddControlToken(LaunchRequest& r, std::string_view key) {
  std::map<std::string, std::string> vars;
  std::erase_if(r.env, [](const std::string& kv) { return kv.rfind(std::string(control::kTokenEnv) + "=", 0) == 0; });
  for (const std::string& kv : r.env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const char* needed[] = {"TANDEM_CONTROL", "TANDEM_JOB_ID", "TANDEM_TASK_ID", control::kLaunchEnv};
  for (const char* k : needed)
    if (!vars.count(k) || vars[k].empty()) return;
  const std::string& text = vars[control::kLaunchEnv];
  int launch = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), launch);
  if (ec != std::errc() || end != text.data() + text.size() || launch <= 0) return;
  r.env.push_back(std::string(control::kTokenEnv) + "=" +
                  control::ControlToken(key, vars["TANDEM_JOB_ID"], vars["TANDEM_TASK_ID"], launch));
  std::sort(r.env.begin(), r.env.end());
}

}  // namespace tandem::backends::redis
